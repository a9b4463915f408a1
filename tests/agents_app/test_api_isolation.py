"""Isolation: every operation of the generated schema on a session, and the stream routes, as a
second user with the first user's session id answers 404, exactly as for a missing id."""

import pytest
from asgiref.sync import async_to_sync
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from sessions_app.stores import get_session_store
from tests.streams_app.sockets import connect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("private_queue")]

# A valid body per operation that takes one, so a 404 cannot come from anything but the id.
BODIES = {
    "sessions_partial_update": {"tags": ["x"]},
    "sessions_start_create": {"agentType": "counter", "input": {"message": "Add 1"}},
    "sessions_resume_create": {"options": {"mode": "continue"}},
    "sessions_interrupt_create": {"reason": "r"},
    "sessions_abort_create": {"reason": "r"},
    "chat_submit_tool_result_create": {"toolCallId": "call-1", "result": "ok"},
    "sessions_search_retrieve": {"q": "hello"},  # A query, for a GET.
    "sessions_conversation_append": {"messages": [{"role": "user", "content": "hi"}]},
    "sessions_conversation_upsert": {"role": "user", "content": "hi"},
    "sessions_conversation_delete": {"messageIds": ["m-1"]},
    "sessions_compactions_create": {"summary": "s", "fromMessageId": "a", "toMessageId": "b"},
    "sessions_context_add": {"label": "notes"},
    "sessions_context_update": {"content": "c"},
    "sessions_context_append_create": {"content": "c"},
    "sessions_context_entries_create": {"content": "c"},
    "sessions_context_search_retrieve": {"q": "c"},  # A query, for a GET.
    "sessions_fork_create": {"atMessageId": "m-1"},
    "sessions_usage_create": {"inputTokens": 1, "outputTokens": 1},
    "sessions_mcp_servers_create": {"name": "tools", "url": "http://127.0.0.1:9/mcp"},
}
# Starting on an id nobody holds creates that session, so only the foreign id answers 404.
CREATES_WHEN_MISSING = {"sessions_start_create"}


def session_operations() -> list[tuple[str, str, str]]:
    """Return (path, method, operation id) of every operation on one session."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [
        (path, method, operation["operationId"])
        for path, item in schema["paths"].items()
        if "{session_id}" in path
        for method, operation in item.items()
    ]


def test_the_schema_has_the_session_operations():
    operations = {operation for _, _, operation in session_operations()}

    assert len(operations) >= 15
    assert set(BODIES) <= operations


def test_every_session_operation_answers_404_to_another_user(owner, stranger):
    get_session_store().create_session("theirs", agent_type="counter", owner_id=owner.pk)
    before = get_session_store().load_state("theirs")
    client = APIClient()
    client.force_authenticate(stranger)
    refused = []

    for path, method, operation in session_operations():
        call = getattr(client, method)
        body = BODIES.get(operation, {})
        free_id = f"free-{operation}"  # A fresh one each: starting on one creates it.
        theirs = call(path.replace("{session_id}", "theirs"), body, format="json")
        missing = call(path.replace("{session_id}", free_id), body, format="json")
        if theirs.status_code == 404:
            refused.append(operation)
        if operation not in CREATES_WHEN_MISSING:
            assert missing.status_code == 404, operation
            assert theirs.content == missing.content.replace(free_id.encode(), b"theirs")

    assert refused == [operation for _, _, operation in session_operations()]
    assert get_session_store().load_state("theirs") == before


def test_the_stream_routes_answer_404_to_another_user(owner, stranger):
    get_session_store().create_session("theirs", agent_type="counter", owner_id=owner.pk)
    client = APIClient()
    client.force_login(stranger)

    sse = client.get("/api/sessions/theirs/stream")
    missing = client.get("/api/sessions/nobodys/stream")

    async def websocket(session_id: str) -> tuple[bool, int]:
        return await (await connect(session_id, stranger)).connect()

    assert sse.status_code == missing.status_code == 404
    assert sse.content == missing.content.replace(b"nobodys", b"theirs")
    assert async_to_sync(websocket)("theirs") == async_to_sync(websocket)("nobodys")
    assert async_to_sync(websocket)("theirs") == (False, 1000)


def test_sending_to_another_users_chat_answers_404(owner, stranger):
    get_session_store().create_session("theirs", agent_type="counter", owner_id=owner.pk)
    client = APIClient()
    client.force_authenticate(stranger)
    message = {"id": "m-1", "role": "user", "parts": [{"type": "text", "text": "Add 1"}]}

    response = client.post("/api/chat", {"id": "theirs", "messages": [message]}, format="json")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "session-not-found"
    assert get_session_store().get_current_run("theirs") is None
