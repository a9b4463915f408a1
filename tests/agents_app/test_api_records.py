"""`/api/sessions/{id}/` reads: messages, usage, runs, checkpoints and the snapshot."""

import pytest
from rest_framework.test import APIClient

from sessions_app.stores import get_session_store
from sessions_app.stores.types import CheckpointMeta, Message, MessageRole
from streams_app.backends import get_stream_manager
from streams_app.chunks import TextDelta
from tests.agents_app.runs import finished

pytestmark = pytest.mark.django_db(transaction=True)


def client_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def researched(worker, owner):
    """A completed researcher run started through the API; its session id."""
    client = client_of(owner)
    response = client.post(
        "/api/sessions/r-1/start",
        {"agentType": "researcher", "input": {"message": "What is django?"}},
        format="json",
    )
    assert response.status_code == 202, response.content
    finished("r-1")
    return "r-1"


def test_reads_of_a_finished_run(owner, researched):
    client = client_of(owner)
    stored = get_session_store().get_messages(researched).messages

    messages = client.get(f"/api/sessions/{researched}/messages", {"limit": 2}).json()
    rollup = client.get(f"/api/sessions/{researched}/usage").json()
    entries = client.get(
        f"/api/sessions/{researched}/usage", {"mode": "entries", "kind": "tool"}
    ).json()
    runs = client.get(f"/api/sessions/{researched}/runs").json()["runs"]
    checkpoints = client.get(f"/api/sessions/{researched}/checkpoints").json()["checkpoints"]
    snapshot = client.get(f"/api/sessions/{researched}/snapshot").json()

    assert (messages["total"], messages["offset"], messages["limit"]) == (len(stored), 0, 2)
    assert messages["hasMore"] is True
    assert [m["id"] for m in messages["messages"]] == [m.id for m in stored[:2]]
    assert messages["messages"][0]["parts"] == [{"type": "text", "text": "What is django?"}]
    assert rollup["toolStats"]["totalCalls"] == 1
    assert rollup["tokens"]["total"] > 0
    assert [(e["kind"], e["name"]) for e in entries["entries"]] == [("tool", "search")]
    assert [(r["turn"], r["status"]) for r in runs] == [(1, "completed")]
    assert checkpoints[0]["stepCount"] == runs[0]["stepCount"]
    assert checkpoints[0]["messageCount"] == len(stored)
    assert snapshot["status"] == "ended"
    assert snapshot["agentType"] == "researcher"
    assert snapshot["state"] == get_session_store().load_state(researched).custom_state
    assert snapshot["streamSequence"] == checkpoints[0]["streamSequence"]
    assert [m["id"] for m in snapshot["messages"]] == [
        m.id for m in stored if m.role != MessageRole.TOOL
    ]


def test_the_snapshot_holds_the_last_commit_and_the_sequence_it_left_the_stream_at(owner):
    client = client_of(owner)
    store = get_session_store()
    state = store.create_session("s-1", agent_type="counter", owner_id=owner.pk)
    writer = get_stream_manager().create_writer("s-1", "run-1", "counter")

    def delta(text: str) -> None:
        writer.write(TextDelta(step=1, session_id="s-1", agent_type="counter", delta=text))

    delta("committed")
    store.save_state_and_promote_staging(
        "s-1",
        state,
        [Message(role=MessageRole.USER, content="Add 1")],
        CheckpointMeta(
            step_id="run-1:1", step_count=1, stream_sequence=writer.last_sequence, run_id="run-1"
        ),
    )
    delta("in progress")  # A step running now: after the commit, not yet in the messages.
    store.append_messages("s-1", [Message(role=MessageRole.ASSISTANT, content="uncommitted")])

    snapshot = client.get("/api/sessions/s-1/snapshot").json()
    after = client.get("/api/sessions/s-1/history", {"fromSequence": snapshot["streamSequence"]})

    assert [m["parts"][0]["text"] for m in snapshot["messages"]] == ["Add 1"]
    assert (snapshot["runId"], snapshot["streamSequence"], snapshot["status"]) == (
        "run-1",
        1,
        "active",
    )
    assert [c["chunk"]["delta"] for c in after.json()["chunks"]] == ["in progress"]


@pytest.mark.parametrize(
    ("route", "query"),
    [
        ("messages", {"limit": 0}),
        ("messages", {"offset": -1}),
        ("messages", {"offset": 2**63}),  # Past the database's integers.
        ("messages", {"limit": ""}),  # An empty value is a mistake, not an absent one.
        ("usage", {"runId": ""}),
        ("usage", {"mode": "sum"}),
        ("usage", {"mode": "entries", "kind": "gold"}),
        ("checkpoints", {"limit": 100_000}),
    ],
)
def test_bad_read_queries_answer_400(owner, route, query):
    get_session_store().create_session("s-1", agent_type="counter", owner_id=owner.pk)

    response = client_of(owner).get(f"/api/sessions/s-1/{route}", query)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid-input"


def test_search_finds_stemmed_words_in_the_callers_sessions_only(owner, stranger):
    store = get_session_store()
    for session_id, user, text in [
        ("mine", owner, "We are deploying on Friday"),
        ("also-mine", owner, "The Friday deployment failed"),
        ("theirs", stranger, "Their deployment is on Friday"),
    ]:
        store.create_session(session_id, agent_type="counter", owner_id=user.pk)
        store.append_messages(session_id, [Message(role=MessageRole.USER, content=text)])
    client = client_of(owner)

    everywhere = client.get("/api/search", {"q": "deployment friday"}).json()["results"]
    in_one = client.get("/api/sessions/mine/search", {"q": "deployment"}).json()["results"]
    not_mine = client.get("/api/sessions/theirs/search", {"q": "deployment"})

    assert {(hit["sessionId"], hit["content"]) for hit in everywhere} == {
        ("mine", "We are deploying on Friday"),
        ("also-mine", "The Friday deployment failed"),
    }
    assert [(hit["role"], hit["content"]) for hit in in_one] == [
        ("user", "We are deploying on Friday")
    ]
    assert set(in_one[0]) == {"id", "sessionId", "role", "content", "createdAt"}
    assert not_mine.status_code == 404
    assert client.get("/api/search").status_code == 400  # `q` is needed.
