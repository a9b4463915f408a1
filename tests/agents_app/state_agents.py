"""Agents whose state clients share over `/agents/{agent}/{name}` (reference 004).

Daphne processes of the live tests import this module too (`HELIX_AGENTS`).
"""

import asyncio

from agents_app.definitions.agent import Agent
from agents_app.definitions.registry import get_registry
from agents_app.definitions.state_sync import SERVER, Connection, StateSync, callable_method

# Every `on_state_update` call of the game, as (state, "server" or the writer's connection id).
recorded_updates: list[tuple[dict | None, str]] = []


def no_negative_score(state: dict | None, source) -> None:
    if state is not None and state.get("score", 0) < 0:
        raise ValueError("score cannot be negative")


def record_update(state: dict | None, source) -> None:
    recorded_updates.append((state, SERVER if source == SERVER else source.id))


def watching(connection: Connection) -> bool:
    """A client that connects as `watch-...` only watches."""
    return connection.id.startswith("watch-")


@callable_method
def add_player(ctx, name: str) -> list[str]:
    state = ctx.state
    players = [*state["players"], name]
    ctx.set_state({**state, "players": players})
    return players


@callable_method
def whoami(ctx) -> dict:
    return {
        "session": ctx.session_id,
        "connection": ctx.connection.id,
        "readonly": ctx.connection.readonly,
    }


@callable_method
async def double(ctx, number: int) -> int:
    await asyncio.sleep(0)
    return number * 2


@callable_method
async def score(ctx) -> int:
    return (await ctx.astate())["score"]


@callable_method
def fail(ctx) -> None:
    raise ValueError("no luck")


@callable_method
def not_json(ctx) -> object:
    return object()


@callable_method(streaming=True)
def count(ctx, up_to: int):
    yield from range(1, up_to + 1)
    return {"counted": up_to}


@callable_method(streaming=True)
async def count_async(ctx, up_to: int):
    for number in range(1, up_to + 1):
        await asyncio.sleep(0)
        yield {"n": number}


@callable_method(streaming=True)
def count_then_fail(ctx):
    yield 1
    raise RuntimeError("stream broke")


def secret(ctx) -> str:
    """Not among the game's callables: clients may not call it."""
    return "secret"


game = Agent(
    name="GameAgent",
    initial_state={"players": [], "score": 0, "status": "waiting"},
    state_sync=StateSync(
        validate_state_change=no_negative_score,
        on_state_update=record_update,
        readonly_connection=watching,
        callables=[
            add_player,
            whoami,
            double,
            score,
            fail,
            not_json,
            count,
            count_async,
            count_then_fail,
        ],
    ),
)
# No initial state: clients get no state until one is written.
notes = Agent(name="notes_agent")
# Open to anonymous clients, who may only watch.
board = Agent(
    name="PublicBoard",
    initial_state={"posts": []},
    state_sync=StateSync(
        allow_anonymous=True,
        readonly_connection=lambda connection: connection.user_id is None,
    ),
)

registry = get_registry()
for agent in (game, notes, board):
    if not registry.has(agent.name):
        registry.register(agent)
