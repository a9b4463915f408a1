"""The WebSocket stream consumer, driven through the whole ASGI application."""

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from helix_project.asgi import application
from streams_app.backends import get_stream_manager
from streams_app.routing import websocket_path
from tests.streams_app.sockets import connect
from tests.streams_app.writing import text, write

from .conftest import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


async def receive_events(communicator: WebsocketCommunicator, timeout: float = 3) -> list[dict]:
    """Return every event until the socket closes, unpacking batch frames."""
    events = []
    while True:
        message = await communicator.receive_output(timeout)
        if message["type"] == "websocket.close":
            events.append({"closed": message.get("code")})
            return events
        frame = json.loads(message["text"])
        events.extend(frame["events"] if frame["type"] == "batch" else [frame])


async def test_owner_receives_the_replay_in_one_frame_then_end_and_close_1000(owner, owned_session):
    await database_sync_to_async(write)(owned_session, *"abc", end={"ok": True})
    communicator = await connect(owned_session, owner)

    connected, _ = await communicator.connect()
    first = json.loads((await communicator.receive_output(3))["text"])
    rest = await receive_events(communicator)

    assert connected
    assert first["type"] == "batch"
    events = first["events"] + rest
    assert [e["sequence"] for e in events if e.get("type") == "chunk"] == [1, 2, 3]
    assert events[0]["chunk"]["delta"] == "a"
    assert events[-2:] == [{"type": "end", "finalOutput": {"ok": True}}, {"closed": 1000}]


async def test_from_sequence_resumes_after_the_given_chunk(owner, owned_session):
    await database_sync_to_async(write)(owned_session, *"abcd", end="done")
    communicator = await connect(owned_session, owner, "fromSequence=2")

    await communicator.connect()
    events = await receive_events(communicator)

    assert [e.get("sequence") for e in events] == [3, 4, None, None]


async def test_chunks_written_after_connecting_arrive_live(owner, owned_session):
    await database_sync_to_async(write)(owned_session, "a")
    communicator = await connect(owned_session, owner)
    await communicator.connect()
    assert json.loads((await communicator.receive_output(3))["text"])["sequence"] == 1

    manager = get_stream_manager()
    writer = await database_sync_to_async(manager.create_writer)(owned_session, "r", "researcher")
    for label in "bc":
        await database_sync_to_async(writer.write)(text(label))
        live = json.loads((await communicator.receive_output(3))["text"])
        assert (live["type"], live["chunk"]["delta"]) == ("chunk", label)
    await database_sync_to_async(manager.end_stream)(owned_session, None)

    assert await receive_events(communicator) == [
        {"type": "end", "finalOutput": None},
        {"closed": 1000},
    ]


async def test_a_failing_stream_sends_fail_and_closes_1011(owner, owned_session):
    await database_sync_to_async(write)(owned_session, "a", fail="LLM down")
    communicator = await connect(owned_session, owner)

    await communicator.connect()
    events = await receive_events(communicator)

    assert events == [{"type": "fail", "error": "LLM down"}, {"closed": 1011}]


async def test_ping_is_answered_with_pong(owner, owned_session):
    communicator = await connect(owned_session, owner)
    await communicator.connect()

    await communicator.send_json_to({"type": "ping"})

    assert await communicator.receive_json_from(3) == {"type": "pong"}
    await communicator.disconnect()


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (b"\x00\x01", "invalid-frame"),
        ("not json", "invalid-json"),
        ('{"type": "ping", "at": NaN}', "invalid-json"),
        ('{"type": "ping", "at": 1e400}', "invalid-json"),
        ('{"type": "ping", "at": ' + "[" * 100_000 + "]" * 100_000 + "}", "invalid-json"),
        ('["ping"]', "invalid-frame"),
        ('{"kind": "ping"}', "invalid-frame"),
        ('{"type": "subscribe"}', "unknown-type"),
        ('{"type": "ping", "at": "\\u0000"}', "invalid-frame"),
    ],
    ids=[
        *("binary", "not-json", "nan", "huge-number", "deep", "array", "no-type", "unknown-type"),
        "nul",
    ],
)
async def test_a_bad_frame_gets_an_error_frame_and_the_socket_still_answers_pings(
    owner, owned_session, frame, code
):
    communicator = await connect(owned_session, owner)
    await communicator.connect()

    if isinstance(frame, bytes):
        await communicator.send_to(bytes_data=frame)
    else:
        await communicator.send_to(text_data=frame)
    answer = await communicator.receive_json_from(3)
    await communicator.send_json_to({"type": "ping"})

    assert answer.keys() == {"type", "code", "message"}
    assert (answer["type"], answer["code"]) == ("error", code)
    assert await communicator.receive_json_from(3) == {"type": "pong"}
    await communicator.disconnect()


@pytest.mark.parametrize(
    ("who", "session", "query"),
    [
        ("stranger", "chat-1", ""),
        ("anonymous", "chat-1", ""),
        ("owner", "no-such-session", ""),
        ("owner", "chat-1", "fromSequence=-3"),
    ],
)
async def test_refusals_happen_before_accept_and_look_alike(
    owner, stranger, owned_session, who, session, query
):
    user = {"owner": owner, "stranger": stranger, "anonymous": None}[who]
    communicator = await connect(session, user, query)

    connected, code = await communicator.connect()

    assert (connected, code) == (False, 1000)


async def test_a_long_replay_is_batched_into_few_frames(owner, owned_session):
    await database_sync_to_async(write)(owned_session, *(str(n) for n in range(10_000)), end="done")
    communicator = await connect(owned_session, owner)
    await communicator.connect()

    frames = []
    while True:
        message = await communicator.receive_output(10)
        if message["type"] == "websocket.close":
            break
        frames.append(json.loads(message["text"]))

    events = [
        e for frame in frames for e in (frame["events"] if frame["type"] == "batch" else [frame])
    ]
    assert [e["sequence"] for e in events if e["type"] == "chunk"] == list(range(1, 10_001))
    assert len(frames) <= 20


async def test_a_token_authenticates_a_websocket_without_an_origin(owner, owned_session):
    token = await database_sync_to_async(Token.objects.create)(user=owner)
    await database_sync_to_async(write)(owned_session, "a", end="done")
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{owned_session}/stream",
        headers=[(b"authorization", f"Token {token.key}".encode())],
    )

    connected, _ = await communicator.connect()
    events = await receive_events(communicator)

    assert connected
    assert [e.get("sequence") for e in events] == [1, None, None]


@pytest.mark.parametrize("key", ["not-a-token", "stranger"])
async def test_a_bad_or_foreign_token_is_refused_like_a_missing_session(
    owner, stranger, owned_session, key
):
    if key == "stranger":
        key = (await database_sync_to_async(Token.objects.create)(user=stranger)).key
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{owned_session}/stream",
        headers=[(b"authorization", f"Token {key}".encode())],
    )

    connected, code = await communicator.connect()

    assert (connected, code) == (False, 1000)  # Refused before accept, as a missing session is.


async def test_a_session_cookie_from_a_foreign_origin_is_refused(owner, owned_session):
    cookie = await database_sync_to_async(session_cookie)(owner)
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{owned_session}/stream",
        headers=[(b"origin", b"http://evil.example"), (b"cookie", cookie.encode())],
    )

    connected, _ = await communicator.connect()

    assert not connected


async def test_the_advertised_websocket_path_is_the_route(owner, owned_session):
    communicator = WebsocketCommunicator(
        application,
        websocket_path(owned_session),
        headers=[
            (b"origin", b"http://localhost"),
            (b"cookie", (await database_sync_to_async(session_cookie)(owner)).encode()),
        ],
    )

    connected, _ = await communicator.connect()

    assert connected
    await communicator.disconnect()
