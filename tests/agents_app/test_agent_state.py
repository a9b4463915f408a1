"""Live agent state: validated writes, versions, rings on the channel layer, the Celery helpers."""

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from agents_app.definitions.agent import Agent
from agents_app.definitions.registry import get_registry
from agents_app.definitions.state_sync import SERVER, Connection, StateSync
from agents_app.live_state.agent_state import (
    StateRejected,
    StateTooLarge,
    agent_state_get,
    merge_agent_state,
    reset_agent_state,
    set_agent_state,
    state_group,
    update_agent_state,
)
from agents_app.runs import services
from sessions_app.errors import SessionBusy
from sessions_app.stores import get_session_store
from streams_app.backends.doorbell import bell
from tests.agents_app.runs import finished
from tests.services import require

UPDATES: list[tuple] = []


def no_negative_score(state, source) -> None:
    if state is not None and state.get("score", 0) < 0:
        raise ValueError("score cannot be negative")


def record_update(state, source) -> None:
    UPDATES.append((state, source))
    if state and state.get("explode"):
        raise RuntimeError("the hook failed")


AGENTS = [
    Agent(
        name="scoreboard",
        initial_state={"score": 0, "players": []},
        state_sync=StateSync(
            validate_state_change=no_negative_score, on_state_update=record_update
        ),
    ),
    Agent(name="stateless"),
]
for agent in AGENTS:
    if not get_registry().has(agent.name):
        get_registry().register(agent)


@pytest.fixture(autouse=True)
def _forget_updates():
    UPDATES.clear()


def session(agent_type: str = "scoreboard", **fields) -> str:
    return get_session_store().create_session(agent_type=agent_type, **fields).session_id


def stored(session_id: str):
    state = get_session_store().load_state(session_id)
    return state.custom_state, state.version


@pytest.mark.django_db
def test_the_initial_state_is_stored_on_first_access_only():
    session_id = session()
    _, version = stored(session_id)

    first = agent_state_get(session_id)
    again = agent_state_get(session_id)

    assert first.state == {"score": 0, "players": []}
    assert first.version == again.version == version + 1
    assert stored(session_id) == (first.state, version + 1)


@pytest.mark.django_db
def test_an_agent_without_initial_state_has_none_until_set():
    session_id = session("stateless")
    _, version = stored(session_id)

    assert agent_state_get(session_id).state is None
    assert stored(session_id) == (None, version)
    assert set_agent_state(session_id, {"a": 1}).state == {"a": 1}


@pytest.mark.django_db(transaction=True)
def test_a_write_bumps_the_version_and_calls_on_state_update_with_its_source():
    session_id = session()
    _, version = stored(session_id)
    client = Connection(id="conn-1", user_id=None)

    written = set_agent_state(session_id, {"score": 3}, source=client)
    set_agent_state(session_id, {"score": 4})

    assert written.version == version + 1
    assert stored(session_id) == ({"score": 4}, version + 2)
    assert [({"score": 3}, client), ({"score": 4}, SERVER)] == UPDATES


@pytest.mark.django_db
def test_a_rejected_state_is_not_stored():
    session_id = session()
    before = stored(session_id)

    with pytest.raises(StateRejected) as caught:
        set_agent_state(session_id, {"score": -1})

    assert caught.value.message == "State update rejected"
    assert stored(session_id) == before
    assert UPDATES == []


@pytest.mark.django_db
def test_a_state_past_the_size_limit_is_refused(settings):
    settings.HELIX = {**settings.HELIX, "MAX_AGENT_STATE_BYTES": 100}
    session_id = session()
    before = stored(session_id)

    with pytest.raises(StateTooLarge) as caught:
        set_agent_state(session_id, {"players": ["x" * 100]})

    assert caught.value.details["limit"] == 100
    assert stored(session_id) == before


@pytest.mark.django_db
def test_a_state_holding_a_nul_is_refused_alike_on_both_databases():
    """PostgreSQL refused it with a database error, where SQLite stored it."""
    session_id = session("stateless")
    before = stored(session_id)

    for state in ({"note": "a\x00b"}, {"a\x00b": 1}, {"notes": [{"deep": "\x00"}]}):
        with pytest.raises(ValueError, match="The state holds a NUL character, which no database"):
            set_agent_state(session_id, state)
    with pytest.raises(ValueError, match="a NUL character"):
        merge_agent_state(session_id, {"note": "\x00"})

    assert stored(session_id) == before
    assert UPDATES == []


@pytest.mark.django_db
def test_a_write_waits_for_the_running_step():
    session_id = session()
    get_session_store().acquire_lease(session_id, "worker-1", 30)

    with pytest.raises(SessionBusy):
        set_agent_state(session_id, {"score": 1})


@pytest.mark.django_db(transaction=True)
def test_a_failing_on_state_update_leaves_the_write_standing():
    session_id = session()

    set_agent_state(session_id, {"explode": True})

    assert stored(session_id)[0] == {"explode": True}
    assert len(UPDATES) == 1


@pytest.mark.django_db(transaction=True)
def test_the_celery_helpers_replace_merge_and_reset():
    session_id = session()

    update_agent_state(session_id, {"score": 5, "players": ["ada"]})
    merge_agent_state(session_id, {"score": 6})
    assert stored(session_id)[0] == {"score": 6, "players": ["ada"]}
    merge_agent_state(session_id, {"score": 6})  # Run twice, as a retried task would.
    assert stored(session_id)[0] == {"score": 6, "players": ["ada"]}

    reset_agent_state(session_id)
    assert stored(session_id)[0] == {"score": 0, "players": []}


@pytest.mark.django_db(transaction=True)
def test_concurrent_merges_lose_nothing():
    session_id = session()
    agent_state_get(session_id)

    def merge(n: int) -> None:
        merge_agent_state(session_id, {f"key{n}": n})

    threads = [threading.Thread(target=merge, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    state = stored(session_id)[0]
    assert {key: state[key] for key in state if key.startswith("key")} == {
        f"key{n}": n for n in range(12)
    }


async def ring_received(session_id: str, write) -> dict:
    """Subscribe to the session's state group, make `write`, and return the ring."""
    layer = get_channel_layer()
    bell.adopt(asyncio.get_running_loop())
    channel = await layer.new_channel()
    await layer.group_add(state_group(session_id), channel)
    await sync_to_async(write)()
    return await asyncio.wait_for(layer.receive(channel), timeout=10)


@pytest.mark.django_db(transaction=True)
async def test_a_committed_write_rings_the_state_group_naming_its_writer():
    session_id = await sync_to_async(session)()
    client = Connection(id="conn-7", user_id=None)

    ring = await ring_received(
        session_id, lambda: set_agent_state(session_id, {"score": 9}, source=client)
    )

    _, version = await sync_to_async(stored)(session_id)
    assert ring == {
        "type": "agent.state",
        "state": {"score": 9},
        "version": version,
        "exclude": "conn-7",
    }


@pytest.mark.django_db(transaction=True)
def test_tool_writes_of_a_run_ring_the_state_group(worker, owner):
    require("redis")  # The worker rings from its own process: the layer must span processes.

    async def watch() -> dict:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(state_group("s-1"), channel)
        await sync_to_async(services.agent_start)(
            user=owner, agent_type="notetaker", session_id="s-1", message="Go"
        )
        return await asyncio.wait_for(layer.receive(channel), timeout=30)

    ring = asyncio.run(watch())

    finished("s-1")
    assert ring["exclude"] is None
    assert ring["state"]["notes"]
