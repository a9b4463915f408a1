"""`/api/sessions/{id}/` run control and status: start, resume, retry, interrupt, abort.

Steps go to a private queue no worker reads, except in the last test, which runs a real worker.
"""

import pytest
from rest_framework.test import APIClient

from sessions_app.stores import get_session_store
from sessions_app.stores.types import SessionStatus
from tests.agents_app.runs import finished

pytestmark = pytest.mark.django_db(transaction=True)
ROUTES = ("start", "resume", "retry", "interrupt", "abort")
READS = ("status", "messages", "usage", "runs", "checkpoints", "snapshot", "history")


def client_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def start(client: APIClient, session_id: str = "s-1", message="Add 2", **body):
    return client.post(
        f"/api/sessions/{session_id}/start",
        {"agentType": "counter", "input": {"message": message}, **body},
        format="json",
    )


@pytest.mark.usefixtures("private_queue")
def test_start_creates_the_session_and_answers_where_to_follow_it(owner):
    response = start(client_of(owner), tags=["t"], metadata={"k": "v"}, userId="u-1")

    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["sessionId"], body["streamId"]) == ("s-1", "s-1")
    assert body["streamUrl"] == "http://testserver/api/sessions/s-1/stream"
    assert body["websocketUrl"] == "ws://testserver/ws/sessions/s-1/stream"
    state = get_session_store().load_state("s-1")
    assert (state.owner_id, state.user_id, state.tags, state.metadata) == (
        owner.pk,
        "u-1",
        ["t"],
        {"k": "v"},
    )
    assert get_session_store().get_current_run("s-1").run_id == body["runId"]


@pytest.mark.usefixtures("private_queue")
def test_start_takes_user_messages_with_files(owner):
    message = [
        {"role": "user", "content": "Background", "metadata": {"source": "system"}},
        {
            "content": "Add 3",
            "files": [{"data": "data:text/plain;base64,aGk=", "mediaType": "text/plain"}],
        },
    ]

    response = start(client_of(owner), message=message)

    assert response.status_code == 202, response.content
    stored = get_session_store().get_messages("s-1").messages
    assert [m.content for m in stored] == ["Background", "Add 3"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"agentType": "counter"}, "input"),
        ({"agentType": "counter", "input": {}}, "message"),
        ({"input": {"message": "hi"}}, "agentType"),
        ({"agentType": "counter", "input": {"message": "hi"}, "tags": [1]}, "tags"),
    ],
)
@pytest.mark.usefixtures("private_queue")
def test_start_with_a_malformed_body_answers_400_and_creates_nothing(owner, body, field):
    response = client_of(owner).post("/api/sessions/s-1/start", body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid-input"
    assert field in str(response.json()["error"]["details"])
    assert get_session_store().load_state("s-1") is None


@pytest.mark.parametrize(
    "message", [[], [{"role": "assistant", "content": "x"}], [{"content": 5}], 7]
)
@pytest.mark.usefixtures("private_queue")
def test_start_with_an_invalid_input_message_answers_400(owner, message):
    response = start(client_of(owner), message=message)

    assert response.status_code == 400
    assert get_session_store().load_state("s-1") is None


def test_an_id_longer_than_any_session_id_matches_no_route(owner):
    response = start(client_of(owner), session_id="x" * 256)

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not-found"


@pytest.mark.usefixtures("private_queue")
def test_run_starts_beyond_the_users_rate_answer_429_with_retry_after(owner, stranger, settings):
    settings.HELIX = {**settings.HELIX, "RUN_START_RATE": "2/minute"}
    client = client_of(owner)

    answers = [start(client, session_id=f"s-{n}").status_code for n in range(2)]
    throttled = start(client, session_id="s-2")

    assert answers == [202, 202]
    assert throttled.status_code == 429
    assert throttled.json()["error"]["code"] == "throttled"
    assert 0 < int(throttled["Retry-After"]) <= 60
    assert get_session_store().load_state("s-2") is None
    assert start(client_of(stranger), session_id="s-3").status_code == 202  # Per user.


def test_a_body_over_the_limit_answers_413_and_writes_nothing(owner, settings):
    settings.HELIX = {**settings.HELIX, "MAX_REQUEST_BYTES": 1000}

    response = start(client_of(owner), message="x" * 2000)

    assert response.status_code == 413
    error = response.json()["error"]
    assert (error["code"], error["details"]["limit"]) == ("request-too-large", 1000)
    assert get_session_store().load_state("s-1") is None


@pytest.mark.usefixtures("private_queue")
def test_run_control_refuses_what_the_sessions_state_does_not_allow(owner):
    client = client_of(owner)
    start(client)

    again = start(client)
    resume = client.post("/api/sessions/s-1/resume", {}, format="json")
    retry = client.post("/api/sessions/s-1/retry")

    for response in (again, resume, retry):
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "run-not-active"


@pytest.mark.usefixtures("private_queue")
def test_interrupt_and_abort_answer_202_and_act(owner):
    client = client_of(owner)
    start(client)

    interrupted = client.post("/api/sessions/s-1/interrupt", {"reason": "enough"}, format="json")

    assert interrupted.status_code == 202
    assert get_session_store().check_interrupt_flag("s-1").reason == "enough"
    aborted = client.post("/api/sessions/s-1/abort", {"reason": "stop"}, format="json")
    assert aborted.status_code == 202
    state = get_session_store().load_state("s-1")
    assert (state.status, state.aborted, state.abort_reason) == (SessionStatus.FAILED, True, "stop")
    again = client.post("/api/sessions/s-1/abort", {}, format="json")
    assert again.status_code == 409


@pytest.mark.usefixtures("private_queue")
def test_resume_validates_its_options(owner):
    client = client_of(owner)
    start(client)

    response = client.post(
        "/api/sessions/s-1/resume", {"options": {"mode": "sideways"}}, format="json"
    )

    assert response.status_code == 400
    assert "mode" in str(response.json()["error"]["details"])


@pytest.mark.usefixtures("private_queue")
def test_status_of_a_started_session_says_it_is_executing(owner):
    client = client_of(owner)
    start(client)

    body = client.get("/api/sessions/s-1/status").json()

    assert body["sessionId"] == "s-1"
    assert body["status"] == "active"
    assert body["isExecuting"] is True
    assert body["checkpointId"] == get_session_store().get_latest_checkpoint("s-1").checkpoint_id


@pytest.mark.usefixtures("private_queue")
def test_every_route_answers_404_for_another_users_session_as_for_a_missing_one(owner, stranger):
    start(client_of(owner))
    client = client_of(stranger)
    before = get_session_store().load_state("s-1")

    for route in ROUTES + READS:
        call = client.get if route in READS else client.post
        body = {"agentType": "counter", "input": {"message": "x"}} if route == "start" else {}
        theirs = call(f"/api/sessions/s-1/{route}", body, format="json")
        missing = call(f"/api/sessions/free-{route}/{route}", body, format="json")

        assert theirs.status_code == 404, route
        if route == "start":  # Starting on a free id creates that session.
            assert missing.status_code == 202
            assert theirs.json()["error"]["code"] == "session-not-found"
        else:
            assert missing.status_code == 404, route
            assert theirs.content == missing.content.replace(f"free-{route}".encode(), b"s-1")
    assert get_session_store().load_state("s-1") == before


def test_a_run_started_through_the_api_completes_on_a_worker(worker, owner):
    client = client_of(owner)
    session_id = start(client, message="Add 5").json()["sessionId"]

    finished(session_id)
    body = client.get(f"/api/sessions/{session_id}/status").json()

    assert body["status"] == "completed"
    assert body["isExecuting"] is False
    assert body["stepCount"] >= 1
    assert client.get(f"/api/sessions/{session_id}/").json()["state"] == {"count": 5}
