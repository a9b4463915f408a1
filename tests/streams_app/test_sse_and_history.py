"""The SSE stream view and the history endpoint."""

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, override_settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from streams_app.backends import get_stream_manager
from tests.streams_app.writing import write


def sse_events(body: str) -> list[dict]:
    """Parse SSE text into events: `{"id": ..., "data": ...}`, comments as `{"comment": ...}`."""
    events = []
    for block in body.split("\n\n"):
        if block.startswith(":"):
            events.append({"comment": block[1:].strip()})
        elif block:
            fields = dict(line.split(": ", 1) for line in block.splitlines())
            events.append({"id": fields.get("id"), "data": json.loads(fields["data"])})
    return events


async def read_sse(response, timeout: float = 3) -> str:
    body = ""
    async with asyncio.timeout(timeout):
        async for part in response.streaming_content:
            body += part.decode()
    return body


def get_stream(user, session_id: str, **extra) -> tuple[object, str]:
    async def scenario():
        client = AsyncClient()
        if user is not None:
            await client.aforce_login(user)
        response = await client.get(f"/api/sessions/{session_id}/stream", **extra)
        body = await read_sse(response) if response.streaming else response.content.decode()
        return response, body

    return async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_sse_sends_chunks_with_sequence_ids_then_end(owner, owned_session):
    write(owned_session, *"abc", end={"ok": True})

    response, body = get_stream(owner, owned_session)

    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    assert response["X-Accel-Buffering"] == "no"
    events = sse_events(body)
    assert [(e["id"], e["data"]["type"]) for e in events] == [
        ("1", "chunk"),
        ("2", "chunk"),
        ("3", "chunk"),
        (None, "end"),
    ]
    assert events[0]["data"]["chunk"]["delta"] == "a"
    assert events[-1]["data"] == {"type": "end", "finalOutput": {"ok": True}}


@pytest.mark.django_db(transaction=True)
def test_sse_resumes_from_last_event_id_over_from_sequence(owner, owned_session):
    write(owned_session, *"abcde", end="done")

    _, by_query = get_stream(owner, owned_session, QUERY_STRING="fromSequence=3")
    _, by_header = get_stream(
        owner, owned_session, QUERY_STRING="fromSequence=1", headers={"Last-Event-ID": "4"}
    )

    assert [e["id"] for e in sse_events(by_query)] == ["4", "5", None]
    assert [e["id"] for e in sse_events(by_header)] == ["5", None]


@pytest.mark.django_db(transaction=True)
def test_sse_of_a_failed_stream_sends_fail(owner, owned_session):
    write(owned_session, "a", fail="LLM down")

    _, body = get_stream(owner, owned_session)

    assert [e["data"] for e in sse_events(body)] == [{"type": "fail", "error": "LLM down"}]


@pytest.mark.django_db(transaction=True)
def test_sse_sends_heartbeats_while_the_stream_is_quiet(owner, owned_session):
    write(owned_session, "a")

    async def scenario():
        client = AsyncClient()
        await client.aforce_login(owner)
        with override_settings(HELIX={"SSE_HEARTBEAT_SECONDS": 0.05}):
            response = await client.get(f"/api/sessions/{owned_session}/stream")
            parts = response.streaming_content
            first = (await anext(parts)).decode()
            idle = [(await anext(parts)).decode() for _ in range(2)]
            await get_stream_manager().aend_stream(owned_session, None)
            rest = await read_sse(response)
        return first, idle, rest

    first, idle, rest = async_to_sync(scenario)()
    assert sse_events(first)[0]["id"] == "1"
    assert idle == [": heartbeat\n\n"] * 2
    assert sse_events(rest)[-1]["data"]["type"] == "end"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("who", "session", "query", "status", "code"),
    [
        ("stranger", "chat-1", "", 404, "session-not-found"),
        ("owner", "no-such-session", "", 404, "session-not-found"),
        ("anonymous", "chat-1", "", 401, "not-authenticated"),
        ("owner", "chat-1", "fromSequence=soon", 400, "invalid-from-sequence"),
        ("owner", "chat-1", f"fromSequence={2**63}", 400, "invalid-from-sequence"),
    ],
)
def test_sse_refusals_are_json_errors(
    owner, stranger, owned_session, who, session, query, status, code
):
    user = {"owner": owner, "stranger": stranger, "anonymous": None}[who]

    response, body = get_stream(user, session, QUERY_STRING=query)

    assert response.status_code == status
    assert json.loads(body)["error"]["code"] == code


@pytest.mark.django_db(transaction=True)
def test_sse_accepts_an_api_token_of_the_owner_only(owner, stranger, owned_session):
    write(owned_session, "a", end={"ok": True})
    owners, strangers = (Token.objects.create(user=user).key for user in (owner, stranger))

    def with_token(key: str):
        return get_stream(None, owned_session, headers={"Authorization": f"Token {key}"})

    response, body = with_token(owners)
    refused, _ = with_token(strangers)
    forged, _ = with_token("not-a-key")

    assert response.status_code == 200
    assert [e["data"]["type"] for e in sse_events(body)] == ["chunk", "end"]
    assert (refused.status_code, forged.status_code) == (404, 401)


@pytest.mark.django_db
def test_history_pages_through_stored_chunks(owner, owned_session):
    write(owned_session, *"abcde")
    client = APIClient()
    client.force_authenticate(owner)

    first = client.get(f"/api/sessions/{owned_session}/history", {"limit": 2}).json()
    rest = client.get(f"/api/sessions/{owned_session}/history", {"fromSequence": 2}).json()

    assert [c["sequence"] for c in first["chunks"]] == [1, 2]
    assert first["chunks"][0]["chunk"]["delta"] == "a"
    assert (first["hasMore"], first["latestSequence"]) == (True, 5)
    assert ([c["sequence"] for c in rest["chunks"]], rest["hasMore"]) == ([3, 4, 5], False)


@pytest.mark.django_db
def test_history_of_a_stream_without_writer_is_empty(owner, owned_session):
    client = APIClient()
    client.force_authenticate(owner)

    response = client.get(f"/api/sessions/{owned_session}/history")

    assert response.json() == {"chunks": [], "hasMore": False, "latestSequence": 0}


@pytest.mark.django_db
def test_history_of_another_users_session_is_a_404_like_a_missing_one(
    owner, stranger, owned_session
):
    write(owned_session, "secret")
    client = APIClient()
    client.force_authenticate(stranger)

    theirs = client.get(f"/api/sessions/{owned_session}/history")
    missing = client.get("/api/sessions/no-such-session/history")

    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["error"]["code"] == missing.json()["error"]["code"] == "session-not-found"
    assert "secret" not in theirs.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query",
    [
        {"fromSequence": -1},
        {"fromSequence": 2**63},
        {"limit": 0},
        {"limit": 5000},
        {"limit": "x"},
        {"limit": ""},
    ],
)
def test_history_rejects_bad_parameters_with_a_json_error(owner, owned_session, query):
    client = APIClient()
    client.force_authenticate(owner)

    response = client.get(f"/api/sessions/{owned_session}/history", query)

    assert response.status_code == 400
    body = response.json()["error"]
    assert body["code"] == "invalid-input"
    assert set(body["details"]) <= {"fromSequence", "limit"}


@pytest.mark.django_db
def test_history_needs_authentication(owned_session):
    response = APIClient().get(f"/api/sessions/{owned_session}/history")

    assert response.status_code in (401, 403)
    assert response.json()["error"]["code"] == "not-authenticated"
