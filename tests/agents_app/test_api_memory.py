"""`/api/sessions/{id}/...` conversation memory: the message tree, compactions, context blocks,
the frozen system prompt, forks, usage, and session names."""

import pytest
from rest_framework.test import APIClient

from sessions_app.memory.tokens import estimate_string_tokens
from sessions_app.stores import get_session_store
from sessions_app.usage import get_usage_store
from tests.agents_app import agents  # noqa: F401 (registers the librarian)

pytestmark = pytest.mark.django_db

SUMMARY = "## Topic\nThe books asked about."  # The librarian's script's summary.


def client_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def create(client: APIClient, agent_type: str = "librarian", **body) -> str:
    response = client.post("/api/sessions/", {"agentType": agent_type, **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


def say(message_id: str, text: str, role: str = "user", **fields) -> dict:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}], **fields}


def append(client: APIClient, session_id: str, *messages: dict, **body) -> dict:
    response = client.post(
        f"/api/sessions/{session_id}/conversation", {"messages": list(messages), **body}, "json"
    )
    assert response.status_code == 201, response.content
    return response.json()


def conversation(client: APIClient, session_id: str, **query) -> dict:
    response = client.get(f"/api/sessions/{session_id}/conversation", query)
    assert response.status_code == 200, response.content
    return response.json()


def ids(messages: list[dict]) -> list[str]:
    return [message["id"] for message in messages]


def chain(client: APIClient, session_id: str, count: int) -> None:
    """Append m1..m<count>, users and assistants in turn, each answering the one before."""
    roles = ["user", "assistant"]
    append(
        client,
        session_id,
        *(say(f"m{n}", f"say {n}", roles[n % 2 - 1]) for n in range(1, count + 1)),
    )


@pytest.fixture
def client(owner) -> APIClient:
    return client_of(owner)


@pytest.fixture
def session(client) -> str:
    return create(client)


# The message tree


def test_appending_continues_the_active_branch_in_the_wire_shape(client, session):
    body = append(
        client,
        session,
        {
            "id": "m1",
            "role": "user",
            "parts": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}],
        },
        {
            "role": "assistant",
            "content": "Looking it up.",
            "toolCalls": [{"id": "call-1", "name": "lookup", "arguments": {"q": "dune"}}],
            "metadata": {"model": "m", "score": 1},
        },
    )

    first, second = body["messages"]
    assert (body["compaction"], body["compactionError"]) == (None, None)
    assert first["content"] == "Hello there"
    assert first["parts"] == [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]
    assert first["parentId"] is None
    assert second["parentId"] == "m1"
    assert second["toolCalls"] == [{"id": "call-1", "name": "lookup", "arguments": {"q": "dune"}}]
    assert set(second) == {
        "id", "parentId", "role", "content", "parts", "toolCalls", "toolCallId", "name",
        "metadata", "createdAt",
    }  # fmt: skip
    stored = get_session_store().get_path(session)
    assert [m.id for m in stored] == ["m1", second["id"]]
    assert stored[1].metadata == {"model": "m", "score": 1}
    history = conversation(client, session)
    assert ids(history["messages"]) == ["m1", second["id"]]
    assert (history["leafId"], history["pathLength"]) == (second["id"], 2)
    assert history["messages"][1] == second


def test_a_parent_id_starts_a_branch_that_becomes_active_and_null_starts_a_root(client, session):
    chain(client, session, 2)

    branch = append(client, session, say("b2", "again"), parentId="m1")["messages"]
    on_branch = conversation(client, session)
    old_branch = conversation(client, session, leafId="m2")
    branches = client.get(f"/api/sessions/{session}/conversation/m1/branches").json()
    root = append(client, session, say("r1", "new topic"), parentId=None)["messages"]

    assert branch[0]["parentId"] == "m1"
    assert ids(on_branch["messages"]) == ["m1", "b2"]
    assert on_branch["leafId"] == "b2"
    assert ids(old_branch["messages"]) == ["m1", "m2"]
    assert ids(branches["messages"]) == ["m2", "b2"]
    assert root[0]["parentId"] is None
    assert ids(conversation(client, session)["messages"]) == ["r1"]


def test_a_messages_own_parent_id_places_it(client, session):
    chain(client, session, 2)

    append(client, session, say("b2", "again", parentId="m1"), say("b3", "and again"))

    assert [(m.id, m.parent_id) for m in get_session_store().get_path(session)] == [
        ("m1", None),
        ("b2", "m1"),
        ("b3", "b2"),
    ]


def test_appending_an_id_the_session_holds_is_a_no_op(client, session):
    chain(client, session, 2)

    body = append(client, session, say("m1", "different"))

    assert body["messages"] == []
    assert get_session_store().get_message_count(session) == 2
    assert get_session_store().get_message(session, "m1").content == "say 1"


def test_appending_an_id_another_session_holds_answers_409_and_writes_nothing(client, session):
    chain(client, session, 1)
    other = create(client)

    response = client.post(
        f"/api/sessions/{other}/conversation",
        {"messages": [say("fresh", "x"), say("m1", "taken")]},
        format="json",
    )

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "message-id-conflict"
    assert get_session_store().get_message_count(other) == 0


def test_an_unknown_leaf_answers_404(client, session):
    chain(client, session, 1)

    response = client.get(f"/api/sessions/{session}/conversation", {"leafId": "nope"})

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "message-not-found"


def test_an_empty_conversation_has_no_leaf(client, session):
    assert conversation(client, session) == {"messages": [], "leafId": None, "pathLength": 0}


def test_one_message_is_read_updated_in_place_appended_and_deleted(client, session):
    chain(client, session, 2)
    url = f"/api/sessions/{session}/conversation"

    read = client.get(f"{url}/m1")
    updated = client.put(f"{url}/m1", {"role": "user", "content": "edited"}, format="json")
    created = client.put(
        f"{url}/m3", say("m3", "appended", role="assistant", parentId="m1"), format="json"
    )
    deleted = client.delete(f"{url}/m3")

    assert read.status_code == 200
    assert (read.json()["id"], read.json()["content"]) == ("m1", "say 1")
    assert updated.status_code == 200
    assert (updated.json()["content"], updated.json()["parts"]) == ("edited", [])
    assert get_session_store().get_message(session, "m2").parent_id == "m1"
    assert created.status_code == 201
    assert (created.json()["parentId"], created.json()["content"]) == ("m1", "appended")
    assert deleted.status_code == 204
    assert client.get(f"{url}/m3").json()["error"]["code"] == "message-not-found"
    assert client.delete(f"{url}/m3").status_code == 404
    assert client.get(f"{url}/nope/branches").status_code == 404
    assert [m.content for m in get_session_store().get_path(session)] == ["edited", "say 2"]


def test_a_put_whose_body_names_another_id_answers_400_and_writes_nothing(client, session):
    chain(client, session, 1)

    response = client.put(
        f"/api/sessions/{session}/conversation/m1", say("m2", "edited"), format="json"
    )

    assert response.status_code == 400
    assert "id" in response.json()["error"]["details"]
    assert get_session_store().get_message(session, "m1").content == "say 1"
    assert get_session_store().get_message_count(session) == 1


def test_deleting_messages_makes_their_answers_roots_and_clearing_empties_the_tree(client, session):
    chain(client, session, 3)
    client.post(
        f"/api/sessions/{session}/compactions",
        {"summary": "s", "fromMessageId": "m2", "toMessageId": "m3"},
        format="json",
    )
    url = f"/api/sessions/{session}/conversation"

    deleted = client.post(f"{url}/delete", {"messageIds": ["m1", "nope"]}, format="json")
    orphan = get_session_store().get_message(session, "m2")
    cleared = client.post(f"{url}/clear")

    assert deleted.json() == {"deleted": 1}
    assert orphan.parent_id is None
    assert cleared.json() == {"deleted": 2}
    assert conversation(client, session)["messages"] == []
    assert get_session_store().get_compactions(session) == []


# Compactions


def test_a_compaction_shows_in_place_of_its_range_on_its_branch_only(client, session):
    chain(client, session, 4)
    append(client, session, say("b3", "elsewhere"), parentId="m2")

    added = client.post(
        f"/api/sessions/{session}/compactions",
        {"summary": "Two turns.", "fromMessageId": "m2", "toMessageId": "m3"},
        format="json",
    )
    listed = client.get(f"/api/sessions/{session}/compactions").json()["compactions"]
    compacted = conversation(client, session, leafId="m4")
    branch = conversation(client, session, leafId="b3")

    assert added.status_code == 201
    compaction = added.json()
    assert listed == [compaction]
    assert (compaction["fromMessageId"], compaction["toMessageId"]) == ("m2", "m3")
    summary = compacted["messages"][1]
    assert ids(compacted["messages"]) == ["m1", f"compaction_{compaction['id']}", "m4"]
    assert (summary["role"], summary["content"]) == ("assistant", "Two turns.")
    assert summary["parts"] == [{"type": "text", "text": "Two turns."}]
    assert compacted["pathLength"] == 4
    assert ids(branch["messages"]) == ["m1", "m2", "b3"]


def test_a_compaction_of_messages_the_session_lacks_answers_404(client, session):
    chain(client, session, 1)

    response = client.post(
        f"/api/sessions/{session}/compactions",
        {"summary": "s", "fromMessageId": "m1", "toMessageId": "nope"},
        format="json",
    )

    assert response.status_code == 404
    assert get_session_store().get_compactions(session) == []


def test_compact_summarises_the_branch_with_the_agents_compactor(client, session):
    chain(client, session, 4)

    response = client.post(f"/api/sessions/{session}/compact", {}, format="json")

    compaction = response.json()["compaction"]
    assert response.status_code == 200
    assert (compaction["fromMessageId"], compaction["toMessageId"]) == ("m2", "m3")
    assert compaction["summary"] == SUMMARY
    assert ids(conversation(client, session)["messages"]) == [
        "m1",
        f"compaction_{compaction['id']}",
        "m4",
    ]


def test_compact_of_a_short_branch_adds_nothing(client, session):
    chain(client, session, 2)

    response = client.post(f"/api/sessions/{session}/compact", {"leafId": "m2"}, format="json")

    assert response.json() == {"compaction": None}
    assert get_session_store().get_compactions(session) == []


def test_a_failed_compaction_after_an_append_is_reported_and_keeps_the_messages(client):
    session = create(client, "forgetful")  # Compacts after every append; its summaries fail.

    body = append(client, session, say("m1", "one"), say("m2", "two"), say("m3", "three"))
    compact = client.post(f"/api/sessions/{session}/compact", {}, format="json")

    assert ids(body["messages"]) == ["m1", "m2", "m3"]
    assert body["compaction"] is None
    assert body["compactionError"].startswith("Compaction failed: ")
    assert compact.status_code == 502
    assert compact.json()["error"]["code"] == "compaction-failed"
    assert ids(conversation(client, session)["messages"]) == ["m1", "m2", "m3"]
    assert get_session_store().get_compactions(session) == []


def test_compact_without_a_compactor_answers_409(client):
    session = create(client, "counter")

    response = client.post(f"/api/sessions/{session}/compact", {}, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "no-compactor"


# Context blocks


def block_url(session: str, label: str = "") -> str:
    return f"/api/sessions/{session}/context" + (f"/{label}" if label else "")


def test_the_blocks_are_listed_configured_first_with_their_kinds(client, session):
    blocks = client.get(block_url(session)).json()["blocks"]

    assert [(b["label"], b["writable"], b["isSearchable"]) for b in blocks] == [
        ("soul", False, False),
        ("notes", True, False),
        ("catalog", True, True),
    ]
    assert blocks[0]["content"] == "You keep the library."
    assert blocks[1] == client.get(block_url(session, "notes")).json()
    assert blocks[1]["maxTokens"] == 20


def test_a_writable_block_is_replaced_and_appended_to(client, session):
    replaced = client.put(block_url(session, "notes"), {"content": "Likes Dune."}, format="json")
    appended = client.post(
        block_url(session, "notes") + "/append", {"content": "Reads at night."}, format="json"
    )

    assert replaced.status_code == appended.status_code == 200
    assert replaced.json()["content"] == "Likes Dune."
    assert appended.json()["content"] == "Likes Dune.\nReads at night."
    assert client.get(block_url(session, "notes")).json() == appended.json()


@pytest.mark.parametrize("route", ["put", "append"])
def test_content_over_max_tokens_answers_422_and_leaves_the_block(client, session, route):
    client.put(block_url(session, "notes"), {"content": "Likes Dune."}, format="json")
    content = " ".join(["word"] * 30)
    url = block_url(session, "notes") + ("/append" if route == "append" else "")

    response = getattr(client, "put" if route == "put" else "post")(
        url, {"content": content}, format="json"
    )

    tokens = estimate_string_tokens(content if route == "put" else f"Likes Dune.\n{content}")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "context-block-too-large"
    assert response.json()["error"]["message"] == f'Block "notes" exceeds maxTokens: {tokens} > 20'
    assert client.get(block_url(session, "notes")).json()["content"] == "Likes Dune."


@pytest.mark.parametrize(
    ("label", "code"),
    [("soul", "context-block-readonly"), ("catalog", "context-block-keyed")],
)
def test_a_whole_block_write_to_a_readonly_or_keyed_block_answers_409(client, session, label, code):
    response = client.put(block_url(session, label), {"content": "x"}, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == code


def test_an_unknown_block_answers_404(client, session):
    responses = [
        client.get(block_url(session, "nope")),
        client.put(block_url(session, "nope"), {"content": "x"}, format="json"),
        client.delete(block_url(session, "nope")),
        client.get(block_url(session, "nope") + "/search", {"q": "x"}),
    ]

    assert [r.status_code for r in responses] == [404] * 4
    assert {r.json()["error"]["code"] for r in responses} == {"context-block-not-found"}


def test_entries_of_a_search_block_are_written_and_searched(client, session):
    url = block_url(session, "catalog")

    written = client.post(
        f"{url}/entries", {"content": "A novel of desert planets.", "title": "Dune"}, format="json"
    )
    found = client.get(f"{url}/search", {"q": "deserts"})
    missed = client.get(f"{url}/search", {"q": "oceans"})

    assert written.status_code == 200
    assert written.json() == {"key": "dune"}
    assert found.json() == {"results": "[dune]\nA novel of desert planets."}
    assert missed.json() == {"results": None}
    assert client.get(url).json()["content"] == "1 entries indexed."


def test_entries_and_search_of_a_plain_block_answer_409(client, session):
    url = block_url(session, "notes")

    entry = client.post(f"{url}/entries", {"content": "x"}, format="json")
    search = client.get(f"{url}/search", {"q": "x"})

    assert entry.status_code == search.status_code == 409
    assert entry.json()["error"]["code"] == search.json()["error"]["code"]
    assert entry.json()["error"]["code"] == "context-block-unsupported"


def test_a_block_added_at_run_time_is_listed_written_and_removed(client, session):
    added = client.post(
        block_url(session),
        {"label": "extension-notes", "description": "From X", "maxTokens": 50},
        format="json",
    )
    again = client.post(block_url(session), {"label": "extension-notes"}, format="json")
    written = client.put(block_url(session, "extension-notes"), {"content": "hi"}, format="json")
    listed = [b["label"] for b in client.get(block_url(session)).json()["blocks"]]
    removed = client.delete(block_url(session, "extension-notes"))

    assert added.status_code == 201
    assert added.json() == {
        "label": "extension-notes",
        "description": "From X",
        "content": "",
        "tokens": 0,
        "maxTokens": 50,
        "writable": True,
        "isSkill": False,
        "isSearchable": False,
    }
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "context-block-exists"
    assert written.json()["content"] == "hi"
    assert listed == ["soul", "notes", "catalog", "extension-notes"]
    assert removed.status_code == 204
    assert client.get(block_url(session, "extension-notes")).status_code == 404


def test_a_configured_block_cannot_be_removed_or_added_again(client, session):
    removed = client.delete(block_url(session, "notes"))
    added = client.post(block_url(session), {"label": "notes"}, format="json")

    assert removed.status_code == added.status_code == 409
    assert removed.json()["error"]["code"] == "context-block-configured"
    assert added.json()["error"]["code"] == "context-block-exists"


# The system prompt


def test_the_prompt_is_frozen_until_refreshed(client, session):
    url = f"/api/sessions/{session}/system-prompt"

    frozen = client.get(url).json()["prompt"]
    client.put(block_url(session, "notes"), {"content": "Likes Dune."}, format="json")
    still = client.get(url).json()["prompt"]
    refreshed = client.post(f"{url}/refresh")
    after = client.get(url).json()["prompt"]

    assert "You keep the library." in frozen
    assert "Likes Dune." not in frozen
    assert still == frozen
    assert refreshed.status_code == 200
    assert "Likes Dune." in refreshed.json()["prompt"]
    assert after == refreshed.json()["prompt"]


# Forks


def test_a_fork_copies_the_branch_with_fresh_ids_into_a_new_session(client, session):
    chain(client, session, 4)
    client.post(
        f"/api/sessions/{session}/compactions",
        {"summary": "Two turns.", "fromMessageId": "m2", "toMessageId": "m3"},
        format="json",
    )

    response = client.post(
        f"/api/sessions/{session}/fork", {"atMessageId": "m4", "name": "Fork"}, format="json"
    )

    assert response.status_code == 201
    fork = response.json()
    assert fork.keys() == client.get(f"/api/sessions/{session}/").json().keys()
    assert (fork["parentSessionId"], fork["name"], fork["agentType"]) == (
        session,
        "Fork",
        "librarian",
    )
    copied = conversation(client, fork["sessionId"])["messages"]
    assert [m["content"] for m in copied] == ["say 1", "Two turns.", "say 4"]
    assert not {m["id"] for m in copied} & {"m1", "m2", "m3", "m4"}
    assert [m["parentId"] for m in copied] == [None, copied[0]["id"], copied[1]["id"]]
    assert get_session_store().get_message_count(session) == 4


def test_a_fork_at_a_message_the_session_lacks_answers_404_and_creates_nothing(
    client, session, owner
):
    response = client.post(f"/api/sessions/{session}/fork", {"atMessageId": "nope"}, "json")

    assert response.status_code == 404
    assert get_session_store().list_sessions(owner_id=owner.pk).total == 1


# Usage


def test_posted_usage_shows_in_the_sessions_usage(client, session):
    url = f"/api/sessions/{session}/usage"

    first = client.post(url, {"inputTokens": 100, "outputTokens": 20, "cost": 0.5}, "json")
    second = client.post(url, {"inputTokens": 10, "outputTokens": 2}, format="json")
    rollup = client.get(url).json()

    assert first.status_code == second.status_code == 204
    assert (rollup["tokens"]["prompt"], rollup["tokens"]["completion"]) == (110, 22)
    assert rollup["custom"] == {"cost": {"cost": 0.5}}


def test_the_largest_token_counts_are_recorded(client, session):
    largest = 2**30 - 1

    response = client.post(
        f"/api/sessions/{session}/usage",
        {"inputTokens": largest, "outputTokens": largest},
        format="json",
    )

    assert response.status_code == 204
    assert get_usage_store().get_rollup(session).tokens.total == 2 * largest


def test_usage_is_booked_under_the_sessions_model(client):
    session = create(client, model="gpt-x")

    client.post(f"/api/sessions/{session}/usage", {"inputTokens": 1, "outputTokens": 1}, "json")

    assert list(get_usage_store().get_rollup(session).tokens_by_model) == ["gpt-x"]


# Bad input


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("conversation", {"messages": []}, "messages"),
        ("conversation", {}, "messages"),
        ("conversation", {"messages": [{"role": "robot"}]}, "messages"),
        ("conversation", {"messages": [{"role": "user", "colour": "red"}]}, "messages"),
        ("conversation", {"messages": [{"role": "user", "content": 5}]}, "messages"),
        ("conversation", {"messages": [{"role": "user", "id": ""}]}, "messages"),
        ("conversation", {"messages": [{"role": "user", "parts": [{"text": "x"}]}]}, "messages"),
        (
            "conversation",
            {"messages": [{"role": "user", "parts": [{"type": "text", "bold": True}]}]},
            "messages",
        ),
        (
            "conversation",
            {"messages": [{"role": "user", "toolCalls": [{"name": "x"}]}]},
            "messages",
        ),
        ("conversation", {"messages": [{"role": "user"}], "parentId": ""}, "parentId"),
        ("conversation", {"messages": [{"role": "user"}], "extra": 1}, "extra"),
        ("conversation/delete", {"messageIds": "m1"}, "messageIds"),
        ("compactions", {"summary": "s", "fromMessageId": "m1"}, "toMessageId"),
        ("compact", {"leafId": 5}, "leafId"),
        ("context", {"label": "-bad"}, "label"),
        ("context", {"label": 215}, "label"),  # Not the text "215".
        ("context", {"label": "ok", "maxTokens": 0}, "maxTokens"),
        ("context", {"label": "ok", "maxTokens": "5"}, "maxTokens"),
        ("context/notes/append", {"content": None}, "content"),
        ("context/catalog/entries", {"title": "t"}, "content"),
        ("fork", {"atMessageId": "m1", "name": 3}, "name"),
        ("usage", {"inputTokens": -1, "outputTokens": 0}, "inputTokens"),
        ("usage", {"inputTokens": "5", "outputTokens": 0}, "inputTokens"),
        ("usage", {"inputTokens": 0, "outputTokens": 2**30}, "outputTokens"),
        ("usage", {"inputTokens": 1, "outputTokens": 1, "cost": True}, "cost"),
    ],
)
def test_bad_input_answers_400_naming_the_field_and_writes_nothing(
    client, session, owner, route, body, field
):
    chain(client, session, 1)

    response = client.post(f"/api/sessions/{session}/{route}", body, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid-input"
    assert field in response.json()["error"]["details"]
    assert get_session_store().get_message_count(session) == 1
    assert get_session_store().get_compactions(session) == []
    assert [b["label"] for b in client.get(block_url(session)).json()["blocks"]] == [
        "soul",
        "notes",
        "catalog",
    ]
    assert get_usage_store().get_rollup(session).entry_count == 0
    assert get_session_store().list_sessions(owner_id=owner.pk).total == 1


def test_a_nul_character_in_a_message_answers_400_and_writes_nothing(client, session):
    response = client.post(
        f"/api/sessions/{session}/conversation",
        {"messages": [{"role": "user", "content": "a\x00b"}]},
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid-input"
    assert get_session_store().get_message_count(session) == 0


# Session names, models and sources


def test_a_session_is_created_with_a_name_model_source_and_parent(client, session):
    response = client.post(
        "/api/sessions/",
        {
            "agentType": "librarian",
            "name": "Chat",
            "model": "gpt-x",
            "source": "web",
            "parentSessionId": session,
        },
        format="json",
    )

    body = response.json()
    assert response.status_code == 201
    assert (body["name"], body["model"], body["source"]) == ("Chat", "gpt-x", "web")
    assert body["parentSessionId"] == session
    listed = client.get("/api/sessions/", {"orderBy": "-updated_at"}).json()["results"]
    assert (listed[0]["sessionId"], listed[0]["name"]) == (body["sessionId"], "Chat")
    assert (listed[1]["name"], listed[1]["model"], listed[1]["source"]) == (None, None, None)


def test_a_parent_session_of_another_user_answers_404_and_creates_nothing(client, stranger):
    theirs = create(client_of(stranger))

    response = client.post(
        "/api/sessions/", {"agentType": "librarian", "parentSessionId": theirs}, format="json"
    )

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "session-not-found"
    assert client.get("/api/sessions/").json()["total"] == 0


def test_patch_renames_without_bumping_the_version(client, session):
    before = client.get(f"/api/sessions/{session}/").json()

    renamed = client.patch(f"/api/sessions/{session}/", {"name": "Books"}, format="json").json()
    both = client.patch(
        f"/api/sessions/{session}/", {"name": "Novels", "tags": ["x"]}, format="json"
    ).json()

    assert (renamed["name"], renamed["version"]) == ("Books", before["version"])
    assert (both["name"], both["tags"], both["version"]) == ("Novels", ["x"], before["version"] + 1)


def test_patch_while_a_step_runs_answers_409_and_renames_nothing(client, session):
    get_session_store().acquire_lease(session, "worker", ttl=30)

    response = client.patch(
        f"/api/sessions/{session}/", {"name": "Books", "tags": ["x"]}, format="json"
    )

    assert response.status_code == 409
    assert get_session_store().load_state(session).name is None


# Isolation and authentication

ROUTES = [
    ("get", "conversation", {}),
    ("post", "conversation", {"messages": [say("x1", "hi")]}),
    ("get", "conversation/m1", {}),
    ("put", "conversation/m1", {"role": "user", "content": "edited"}),
    ("delete", "conversation/m1", {}),
    ("get", "conversation/m1/branches", {}),
    ("post", "conversation/delete", {"messageIds": ["m1"]}),
    ("post", "conversation/clear", {}),
    ("get", "compactions", {}),
    ("post", "compactions", {"summary": "s", "fromMessageId": "m1", "toMessageId": "m1"}),
    ("post", "compact", {}),
    ("get", "context", {}),
    ("post", "context", {"label": "added"}),
    ("get", "context/notes", {}),
    ("put", "context/notes", {"content": "overwritten"}),
    ("delete", "context/notes", {}),
    ("post", "context/notes/append", {"content": "more"}),
    ("post", "context/catalog/entries", {"content": "entry"}),
    ("get", "context/catalog/search", {"q": "entry"}),
    ("get", "system-prompt", {}),
    ("post", "system-prompt/refresh", {}),
    ("post", "fork", {"atMessageId": "m1"}),
    ("post", "usage", {"inputTokens": 1, "outputTokens": 1}),
]


@pytest.mark.parametrize(("method", "route", "body"), ROUTES)
def test_another_users_session_answers_404_like_a_missing_one(owner, stranger, method, route, body):
    session = create(client_of(owner))
    append(client_of(owner), session, say("m1", "mine"))
    client = client_of(stranger)

    theirs = getattr(client, method)(f"/api/sessions/{session}/{route}", body, format="json")
    missing = getattr(client, method)(f"/api/sessions/missing/{route}", body, format="json")

    assert theirs.status_code == missing.status_code == 404
    assert theirs.content == missing.content.replace(b"missing", session.encode())
    assert get_session_store().get_message(session, "m1").content == "mine"
    assert get_session_store().get_message_count(session) == 1
    assert get_session_store().list_sessions(owner_id=owner.pk).total == 1
    assert get_usage_store().get_rollup(session).entry_count == 0
    owners_view = client_of(owner).get(block_url(session)).json()["blocks"]
    assert [(b["label"], b["content"]) for b in owners_view][:2] == [
        ("soul", "You keep the library."),
        ("notes", ""),
    ]
    assert len(owners_view) == 3


@pytest.mark.parametrize(("method", "route", "body"), ROUTES)
def test_anonymous_callers_are_refused(owner, method, route, body):
    session = create(client_of(owner))

    response = getattr(APIClient(), method)(f"/api/sessions/{session}/{route}", body, format="json")

    assert response.status_code in (401, 403)
    assert response.json()["error"]["code"] == "not-authenticated"
