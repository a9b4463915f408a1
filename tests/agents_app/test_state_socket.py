"""Agent state sync over WebSocket (reference 004), driven through the whole ASGI application.

Clients connect to `/agents/{kebab agent}/{name}`; the frames are the reference's
(`cf_agent_identity`, `cf_agent_state`, `cf_agent_mcp_servers`, `cf_agent_state_error`, `rpc`).
The live tests at the end run two Daphne processes over PostgreSQL and Redis.
"""

import asyncio
import json
import random
import uuid

import pytest
import websockets
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client, override_settings
from rest_framework.authtoken.models import Token

from agents_app.definitions.agent import Agent
from agents_app.definitions.registry import AgentRegistry, kebab_case
from agents_app.live_state.agent_state import agent_state_get, merge_agent_state, state_group
from agents_app.live_state.consumer import NO_MCP_SERVERS
from agents_app.routing import state_socket_path
from helix_project.asgi import application
from sessions_app.stores import get_session_store
from tests.agents_app import state_agents
from tests.live import live_env
from tests.live_clients import Daphne
from tests.services import require

pytestmark = pytest.mark.django_db(transaction=True)

INITIAL = {"players": [], "score": 0, "status": "waiting"}
IDENTITY = "cf_agent_identity"
STATE = "cf_agent_state"
MCP = {"type": "cf_agent_mcp_servers", "mcp": NO_MCP_SERVERS}
LATENCY = 0.05  # How long a frame takes to reach a client in the concurrency test.


@pytest.fixture(autouse=True)
def _fresh_updates():
    state_agents.recorded_updates.clear()
    yield
    state_agents.recorded_updates.clear()


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


async def open_socket(
    user=None, agent: str = "game-agent", name: str = "room-1", *, pk: str | None = None
) -> WebsocketCommunicator:
    """Return a communicator for `user` (anonymous if None), not yet connected."""
    headers = [(b"origin", b"http://localhost")]
    if user is not None:
        cookie = await database_sync_to_async(session_cookie)(user)
        headers.append((b"cookie", cookie.encode()))
    path = state_socket_path(agent, name) + (f"?_pk={pk}" if pk else "")
    return WebsocketCommunicator(application, path, headers=headers)


async def join(user=None, agent="game-agent", name="room-1", *, pk=None) -> WebsocketCommunicator:
    """Connect and read the connect frames, up to the MCP servers frame."""
    socket = await open_socket(user, agent, name, pk=pk)
    connected, _ = await socket.connect()
    assert connected
    while (await socket.receive_json_from(3))["type"] != MCP["type"]:
        pass
    return socket


async def connect_frames(socket: WebsocketCommunicator) -> list[dict]:
    frames = []
    while not frames or frames[-1]["type"] != MCP["type"]:
        frames.append(await socket.receive_json_from(3))
    return frames


async def stored(name: str = "room-1"):
    return await database_sync_to_async(get_session_store().load_state)(name)


async def call(
    socket: WebsocketCommunicator, method: str, *args, others: list | None = None
) -> list[dict]:
    """Call `method` and return its replies, up to the one that ends the call; the other
    frames that came meanwhile go to `others`."""
    call_id = str(uuid.uuid4())
    await socket.send_json_to({"type": "rpc", "id": call_id, "method": method, "args": list(args)})
    replies = []
    while True:
        frame = await socket.receive_json_from(3)
        if frame["type"] != "rpc":
            if others is not None:
                others.append(frame)
            continue
        assert frame.pop("id") == call_id
        replies.append(frame)
        if not frame["success"] or frame["done"]:
            return replies


# Kebab-case agent names


@pytest.mark.parametrize(
    ("name", "kebab"),
    [
        ("GameAgent", "game-agent"),
        ("gameAgent", "game-agent"),
        ("game_agent", "game-agent"),
        ("game-agent", "game-agent"),
        ("MY_AGENT", "my-agent"),
        ("HTTPAgent", "h-t-t-p-agent"),  # As the reference's clients spell it.
        ("agent_", "agent"),
    ],
)
def test_kebab_case_follows_the_reference(name, kebab):
    assert kebab_case(name) == kebab


def test_find_by_kebab_prefers_the_exact_name_and_knows_factories():
    registry = AgentRegistry()
    registry.register(Agent(name="GameAgent"))
    registry.register(Agent(name="game-agent"))
    registry.register_factory("ChatBot", lambda context: Agent(name="ChatBot"))

    assert registry.find_by_kebab("game-agent") == "game-agent"
    registry.unregister("game-agent")
    assert registry.find_by_kebab("game-agent") == "GameAgent"
    assert registry.find_by_kebab("chat-bot") == "ChatBot"
    assert registry.find_by_kebab("GameAgent") is None
    assert registry.find_by_kebab("nothing") is None


# Connecting


async def test_connect_sends_identity_then_state_then_mcp_servers(owner):
    socket = await open_socket(owner)
    connected, _ = await socket.connect()

    frames = await connect_frames(socket)

    assert connected
    assert frames == [
        {"type": IDENTITY, "name": "room-1", "agent": "game-agent"},
        {"type": STATE, "state": INITIAL},
        MCP,
    ]
    assert await socket.receive_nothing(0.2)
    session = await stored()
    assert (session.agent_type, session.owner_id, session.custom_state) == (
        "GameAgent",
        owner.pk,
        INITIAL,
    )
    await socket.disconnect()


async def test_an_agent_without_initial_state_sends_no_state_on_connect(owner):
    socket = await open_socket(owner, "notes-agent", "notebook")
    await socket.connect()

    frames = await connect_frames(socket)

    assert frames == [{"type": IDENTITY, "name": "notebook", "agent": "notes-agent"}, MCP]
    assert (await stored("notebook")).custom_state is None
    await socket.disconnect()


async def test_a_client_connecting_after_updates_gets_the_current_state(owner):
    first = await join(owner, "notes-agent", "notebook")
    for n in range(3):
        await first.send_json_to({"type": STATE, "state": {"n": n}})
    await call(first, "nothing")  # Answered after the writes before it were handled.

    late = await open_socket(owner, "notes-agent", "notebook")
    await late.connect()

    assert (await connect_frames(late))[1] == {"type": STATE, "state": {"n": 2}}
    await first.disconnect()
    await late.disconnect()


@pytest.mark.parametrize(
    ("who", "agent", "name"),
    [
        ("stranger", "game-agent", "room-1"),  # Another user's session.
        ("anonymous", "game-agent", "room-1"),
        ("anonymous", "game-agent", "fresh"),  # The agent admits no anonymous client.
        ("owner", "no-such-agent", "room-1"),
        ("owner", "notes-agent", "room-1"),  # The owner's session is of another agent.
        ("owner", "GameAgent", "room-1"),  # Agents are named in kebab case.
    ],
)
async def test_refusals_happen_before_accept_and_look_alike(owner, stranger, who, agent, name):
    await (await join(owner)).disconnect()  # room-1 is the owner's.
    user = {"owner": owner, "stranger": stranger, "anonymous": None}[who]
    socket = await open_socket(user, agent, name)

    connected, code = await socket.connect()

    assert (connected, code) == (False, 1000)
    assert await stored("fresh") is None
    assert (await stored()).custom_state == INITIAL


async def test_anonymous_clients_may_open_an_agent_that_allows_them(owner):
    socket = await open_socket(None, "public-board", "lobby")
    connected, _ = await socket.connect()

    frames = await connect_frames(socket)
    await socket.send_json_to({"type": STATE, "state": {"posts": ["hi"]}})

    assert connected
    assert frames[:2] == [
        {"type": IDENTITY, "name": "lobby", "agent": "public-board"},
        {"type": STATE, "state": {"posts": []}},
    ]
    # The board makes anonymous connections readonly.
    assert await socket.receive_json_from(3) == {
        "type": "cf_agent_state_error",
        "error": "Connection is readonly",
    }
    assert (await stored("lobby")).owner_id is None
    again = await join(None, "public-board", "lobby")  # Another anonymous client.
    signed_in = await open_socket(owner, "public-board", "lobby")
    assert await signed_in.connect() == (False, 1000)  # Not the owner's: no one owns it.
    await socket.disconnect()
    await again.disconnect()


async def test_a_token_authenticates_without_an_origin(owner):
    token = await database_sync_to_async(Token.objects.create)(user=owner)
    socket = WebsocketCommunicator(
        application,
        state_socket_path("game-agent", "room-1"),
        headers=[(b"authorization", f"Token {token.key}".encode())],
    )

    connected, _ = await socket.connect()

    assert connected
    assert (await connect_frames(socket))[0]["type"] == IDENTITY
    await socket.disconnect()


async def test_the_connection_id_is_the_pk_query_parameter_else_the_channel_name(owner):
    named = await join(owner, pk="tab-7")
    unnamed = await join(owner)

    mine = (await call(named, "whoami"))[0]["result"]
    other = (await call(unnamed, "whoami"))[0]["result"]

    assert mine == {"session": "room-1", "connection": "tab-7", "readonly": False}
    assert other["connection"] not in ("", "tab-7")
    await named.disconnect()
    await unnamed.disconnect()


# Writing the state


async def test_an_update_reaches_the_other_client_and_not_the_writer(owner):
    writer = await join(owner, pk="writer")
    reader = await join(owner, pk="reader")
    state = {"players": ["ann"], "score": 3, "status": "playing"}

    await writer.send_json_to({"type": STATE, "state": state})

    assert await reader.receive_json_from(3) == {"type": STATE, "state": state}
    assert await writer.receive_nothing(0.3)
    assert (await stored()).custom_state == state
    async with asyncio.timeout(3):
        while not state_agents.recorded_updates:
            await asyncio.sleep(0.01)
    assert state_agents.recorded_updates == [(state, "writer")]
    await writer.disconnect()
    await reader.disconnect()


async def test_a_rejected_update_gets_the_exact_error_and_stores_nothing(owner):
    writer = await join(owner)
    reader = await join(owner)
    before = await stored()

    await writer.send_json_to({"type": STATE, "state": {**INITIAL, "score": -1}})

    assert await writer.receive_json_from(3) == {
        "type": "cf_agent_state_error",
        "error": "State update rejected",
    }
    after = await stored()
    assert (after.custom_state, after.version) == (INITIAL, before.version)
    assert await reader.receive_nothing(0.3)
    assert state_agents.recorded_updates == []
    await writer.disconnect()
    await reader.disconnect()


async def test_a_readonly_connection_gets_the_exact_error_and_still_watches(owner):
    watcher = await join(owner, pk="watch-1")
    writer = await join(owner)
    before = await stored()

    await watcher.send_json_to({"type": STATE, "state": {**INITIAL, "score": 5}})

    assert await watcher.receive_json_from(3) == {
        "type": "cf_agent_state_error",
        "error": "Connection is readonly",
    }
    assert (await stored()).version == before.version
    await writer.send_json_to({"type": STATE, "state": {**INITIAL, "score": 6}})
    assert await watcher.receive_json_from(3) == {"type": STATE, "state": {**INITIAL, "score": 6}}
    await watcher.disconnect()
    await writer.disconnect()


async def test_a_state_over_the_size_limit_gets_the_size_error(owner):
    writer = await join(owner)
    state = {"players": ["x" * 100], "score": 0, "status": "waiting"}
    size = len(json.dumps(state, separators=(",", ":")).encode())

    with override_settings(HELIX={**settings.HELIX, "MAX_AGENT_STATE_BYTES": 64}):
        await writer.send_json_to({"type": STATE, "state": state})
        error = await writer.receive_json_from(3)

    assert error == {
        "type": "cf_agent_state_error",
        "error": f"State is {size} bytes; the limit is 64.",
    }
    assert (await stored()).custom_state == INITIAL
    await writer.disconnect()


async def test_a_write_while_a_step_runs_gets_the_busy_error(owner):
    writer = await join(owner)
    await database_sync_to_async(get_session_store().acquire_lease)("room-1", "worker-1", 60)

    await writer.send_json_to({"type": STATE, "state": {**INITIAL, "score": 1}})

    assert await writer.receive_json_from(3) == {
        "type": "cf_agent_state_error",
        "error": "A step of session 'room-1' is running; try again when it has committed.",
    }
    assert (await stored()).custom_state == INITIAL
    await writer.disconnect()


async def test_a_writer_sent_other_states_gets_its_write_back_to_end_on_the_stored_one(owner):
    first = await join(owner)
    second = await join(owner)
    await first.send_json_to({"type": STATE, "state": {**INITIAL, "score": 1}})
    assert (await second.receive_json_from(3))["state"]["score"] == 1

    # `second` was sent another state: a frame of it may reach the client after its write.
    await second.send_json_to({"type": STATE, "state": {**INITIAL, "score": 2}})

    assert await second.receive_json_from(3) == {"type": STATE, "state": {**INITIAL, "score": 2}}
    assert await first.receive_json_from(3) == {"type": STATE, "state": {**INITIAL, "score": 2}}
    await first.disconnect()
    await second.disconnect()


async def test_a_late_ring_never_moves_a_client_back(owner):
    socket = await join(owner)
    version = (await stored()).version
    layer = get_channel_layer()

    for ring_version, state in ((version, "same"), (version - 1, "older"), (version + 1, "newer")):
        ring = {"type": "agent.state", "state": {"v": state}, "version": ring_version}
        await layer.group_send(state_group("room-1"), {**ring, "exclude": None})

    assert await socket.receive_json_from(3) == {"type": STATE, "state": {"v": "newer"}}
    assert await socket.receive_nothing(0.3)
    await socket.disconnect()


async def test_a_state_written_by_the_server_reaches_every_client(owner):
    first = await join(owner)
    second = await join(owner)

    await database_sync_to_async(merge_agent_state)("room-1", {"status": "finished"})

    expected = {"type": STATE, "state": {**INITIAL, "status": "finished"}}
    assert await first.receive_json_from(3) == expected
    assert await second.receive_json_from(3) == expected
    async with asyncio.timeout(3):
        while not state_agents.recorded_updates:
            await asyncio.sleep(0.01)
    assert state_agents.recorded_updates == [(expected["state"], "server")]
    await first.disconnect()
    await second.disconnect()


async def test_frames_outside_the_protocol_get_error_frames_and_the_socket_stays_usable(owner):
    socket = await join(owner)
    deep = "[" * 100_000 + "]" * 100_000

    sent = [
        ("not json", "invalid-json"),
        ('{"type": "cf_agent_state", "state": NaN}', "invalid-json"),
        ('{"type": "cf_agent_state", "state": {"score": 1e400}}', "invalid-json"),
        ('{"type": "cf_agent_state", "state": ' + deep + "}", "invalid-json"),
        (b"\x00\x01", "invalid-frame"),
        ('{"type": "cf_agent_state", "state": {"note": "a\\u0000b"}}', "invalid-frame"),
        ('{"type": "cf_agent_state", "state": {"note\\ud800": 1}}', "invalid-frame"),
        ('{"type": "rpc", "id": "1", "method": "double", "args": ["\\udfff"]}', "invalid-frame"),
        ("[1, 2]", "invalid-frame"),
        ('{"type": 7}', "invalid-frame"),
        ('{"type": "cf_agent_state"}', "invalid-frame"),  # No state.
        ('{"type": "rpc", "id": "1", "method": "whoami"}', "invalid-frame"),  # No args.
        ('{"type": "ping"}', "unknown-type"),
        ('{"type": "something-else"}', "unknown-type"),
    ]
    for frame, code in sent:
        if isinstance(frame, bytes):
            await socket.send_to(bytes_data=frame)
        else:
            await socket.send_to(text_data=frame)
        answer = await socket.receive_json_from(3)
        assert answer.keys() == {"type", "code", "message"}, frame[:60]
        assert (answer["type"], answer["code"]) == ("error", code), frame[:60]

    assert (await call(socket, "double", 4)) == [
        {"type": "rpc", "success": True, "result": 8, "done": True}
    ]
    assert (await stored()).custom_state == INITIAL
    await socket.disconnect()


# RPC


async def test_rpc_calls_a_sync_method_whose_server_write_reaches_every_client(owner):
    caller = await join(owner)
    other = await join(owner)

    early: list[dict] = []  # The write may reach the caller before the call's reply.
    replies = await call(caller, "add_player", "ann", others=early)

    assert replies == [{"type": "rpc", "success": True, "result": ["ann"], "done": True}]
    expected = {"type": STATE, "state": {**INITIAL, "players": ["ann"]}}
    assert await other.receive_json_from(3) == expected
    written = early or [await caller.receive_json_from(3)]
    assert written == [expected]  # Written by the server: to all.
    await caller.disconnect()
    await other.disconnect()


async def test_rpc_calls_async_methods(owner):
    socket = await join(owner)

    assert await call(socket, "double", 21) == [
        {"type": "rpc", "success": True, "result": 42, "done": True}
    ]
    assert await call(socket, "score") == [
        {"type": "rpc", "success": True, "result": 0, "done": True}
    ]
    await socket.disconnect()


@pytest.mark.parametrize(
    ("method", "args", "error"),
    [
        ("fail", [], "no luck"),
        ("double", [], "double() missing 1 required positional argument: 'number'"),
        ("secret", [], "Method secret is not callable"),
        ("nothing", [], "Method nothing is not callable"),
        ("__init__", [], "Method __init__ is not callable"),
    ],
)
async def test_rpc_errors_answer_with_the_message(owner, method, args, error):
    socket = await join(owner)

    assert await call(socket, method, *args) == [{"type": "rpc", "success": False, "error": error}]
    await socket.disconnect()


async def test_rpc_results_must_be_json(owner):
    socket = await join(owner)

    [reply] = await call(socket, "not_json")

    assert reply["success"] is False
    assert reply["error"].startswith("The result of not_json must be JSON-serializable")
    await socket.disconnect()


async def test_rpc_set_state_is_refused_on_a_readonly_connection(owner):
    socket = await join(owner, pk="watch-2")

    replies = await call(socket, "add_player", "ann")

    assert replies == [{"type": "rpc", "success": False, "error": "Connection is readonly"}]
    assert (await stored()).custom_state == INITIAL
    await socket.disconnect()


async def test_a_streaming_method_sends_each_item_then_what_it_returns(owner):
    socket = await join(owner)

    assert await call(socket, "count", 3) == [
        {"type": "rpc", "success": True, "result": 1, "done": False},
        {"type": "rpc", "success": True, "result": 2, "done": False},
        {"type": "rpc", "success": True, "result": 3, "done": False},
        {"type": "rpc", "success": True, "result": {"counted": 3}, "done": True},
    ]
    await socket.disconnect()


async def test_an_async_streaming_method_ends_with_null(owner):
    socket = await join(owner)

    assert await call(socket, "count_async", 2) == [
        {"type": "rpc", "success": True, "result": {"n": 1}, "done": False},
        {"type": "rpc", "success": True, "result": {"n": 2}, "done": False},
        {"type": "rpc", "success": True, "result": None, "done": True},
    ]
    await socket.disconnect()


async def test_a_streaming_method_that_raises_ends_with_its_error(owner):
    socket = await join(owner)

    assert await call(socket, "count_then_fail") == [
        {"type": "rpc", "success": True, "result": 1, "done": False},
        {"type": "rpc", "success": False, "error": "stream broke"},
    ]
    await socket.disconnect()


# Concurrency


async def test_concurrent_updates_leave_every_client_on_the_same_stored_state(owner):
    """10 clients write 10 states each at once; each keeps its view as the reference client
    does (its own write, then each frame it gets), frames arriving LATENCY after they are sent.
    """
    clients = [await join(owner, pk=f"client-{n}") for n in range(10)]
    version = (await stored()).version
    views: list[dict] = [INITIAL] * len(clients)
    sent: list[dict] = []

    async def write(n: int) -> None:
        for k in range(10):
            state = {"players": [f"p{n}"], "score": n * 10 + k, "status": "playing"}
            sent.append(state)
            views[n] = state  # The client's own view, as the reference client keeps it.
            await clients[n].send_json_to({"type": STATE, "state": state})
            await asyncio.sleep(random.random() / 10)

    async def read(n: int) -> None:
        while True:
            frame = await clients[n].receive_json_from(5)
            assert frame["type"] == STATE, frame
            # A frame reaches the client a while after it is sent, as over a network.
            asyncio.get_running_loop().call_later(LATENCY, views.__setitem__, n, frame["state"])

    readers = [asyncio.create_task(read(n)) for n in range(len(clients))]
    await asyncio.gather(*(write(n) for n in range(len(clients))))
    async with asyncio.timeout(30):
        while (await stored()).version < version + 100:
            await asyncio.sleep(0.05)
    await asyncio.sleep(1)  # Let the last frames arrive.
    for reader in readers:
        assert not reader.done(), reader.exception()
        reader.cancel()

    final = await stored()
    assert final.version == version + 100
    assert final.custom_state in sent
    assert views == [final.custom_state] * len(clients)
    assert (await database_sync_to_async(agent_state_get)("room-1")).state == final.custom_state
    for client in clients:
        await client.disconnect()


# Live: two Daphne processes over PostgreSQL and Redis


@pytest.fixture
def daphnes(tmp_path):
    require("postgres")
    require("redis")
    env = live_env(tmp_path, HELIX_AGENTS="agents_app.demo,tests.agents_app.state_agents")
    servers = [Daphne(env, tmp_path / f"daphne-{n}.log") for n in range(2)]
    for server in servers:
        server.start()
    yield servers
    for server in servers:
        server.stop()


async def live_socket(daphne: Daphne, token: str, pk: str):
    url = f"ws://127.0.0.1:{daphne.port}/agents/game-agent/arena?_pk={pk}"
    socket = await websockets.connect(url, additional_headers={"Authorization": f"Token {token}"})
    frames = [json.loads(await asyncio.wait_for(socket.recv(), 10)) for _ in range(3)]
    assert [frame["type"] for frame in frames] == [IDENTITY, STATE, MCP["type"]]
    return socket


async def next_state(socket) -> dict:
    frame = json.loads(await asyncio.wait_for(socket.recv(), 10))
    assert frame["type"] == STATE, frame
    return frame["state"]


async def test_live_updates_cross_daphne_processes(daphnes, owner):
    token = (await database_sync_to_async(Token.objects.create)(user=owner)).key
    first = await live_socket(daphnes[0], token, "first")
    second = await live_socket(daphnes[1], token, "second")
    try:
        state = {"players": ["ann"], "score": 1, "status": "playing"}
        await first.send(json.dumps({"type": STATE, "state": state}))
        assert await next_state(second) == state

        # Written by a third process, as a Celery task would.
        await database_sync_to_async(merge_agent_state)("arena", {"status": "finished"})
        finished = {**state, "status": "finished"}
        assert await next_state(first) == finished
        assert await next_state(second) == finished
        assert (await stored("arena")).custom_state == finished
    finally:
        await first.close()
        await second.close()
