"""The benchmarks' agents; the workers and Daphne processes import this module (`HELIX_AGENTS`).

The steps benchmark runs `bench-stepper`: each run takes `STEPS_PER_RUN` steps of the scripted
model, every one but the last streaming a short sentence and calling one tool that writes the
state (an idempotent tool: it keeps no call records, as it needs none); the last one answers,
which completes the run. The state benchmark writes the state of `bench-state` to its signed-in
clients. The in-flight benchmark runs `bench-waiter`, whose model takes `MODEL_SECONDS` to
stream each reply, as a real model would, over `WAITER_STEPS` steps, and
`bench-waiter-instant`, which gives the same replies at once, to tell what waiting costs from
what the steps' shape does; and, for fairness, `bench-marathon`, a run of `MARATHON_STEPS`
quick steps, beside runs of `bench-once`.
"""

import dataclasses
import os

from pydantic import BaseModel

from agents_app.definitions.agent import Agent, Tool
from agents_app.definitions.registry import get_registry
from agents_app.definitions.state_sync import StateSync
from agents_app.llm.scripted import (
    WORDS_PER_DELTA,
    ScriptedToolCall,
    Turn,
    register_script,
    turn_step,
)

AGENT_TYPE = "bench-stepper"
STATE_AGENT_TYPE = "bench-state"
STEPS_PER_RUN = 10
WAITER_AGENT_TYPE = "bench-waiter"
WAITER_STEPS = 3
MODEL_SECONDS = 1.0
WAITER_DELTAS = 10  # Per reply, one every MODEL_SECONDS / WAITER_DELTAS.
INSTANT_WAITER_AGENT_TYPE = "bench-waiter-instant"
MARATHON_AGENT_TYPE = "bench-marathon"
# The fairness benchmark's workers set it (smaller in its quick run).
MARATHON_STEPS = int(os.environ.get("HELIX_MARATHON_STEPS", "1000"))
ONCE_AGENT_TYPE = "bench-once"


class Tick(BaseModel):
    item: int


def tick(arguments: Tick, ctx) -> dict:
    """Count the item in the state."""
    ctx.state["ticks"] = ctx.state.get("ticks", 0) + 1
    return {"checked": arguments.item}


def script(request, context) -> Turn:
    """Check one item per step, then answer."""
    step = turn_step(request)
    if step == STEPS_PER_RUN - 1:
        return Turn(text="Every item is checked.")
    return Turn(
        text=f"Checking item {step} of the list now.",
        tool_calls=[ScriptedToolCall(name="tick", arguments={"item": step})],
    )


def waiter_script(request, context) -> Turn:
    """Stream a reply over MODEL_SECONDS; call the tool until the last step, then answer."""
    step = turn_step(request)
    text = " ".join(f"word{n}" for n in range(WAITER_DELTAS * WORDS_PER_DELTA))
    delay = MODEL_SECONDS / WAITER_DELTAS
    if step == WAITER_STEPS - 1:
        return Turn(text=text, delay=delay)
    return Turn(
        text=text,
        delay=delay,
        tool_calls=[ScriptedToolCall(name="tick", arguments={"item": step})],
    )


def instant_waiter_script(request, context) -> Turn:
    """Give the waiter's reply at once."""
    return dataclasses.replace(waiter_script(request, context), delay=0)


def once_script(request, context) -> Turn:
    """Answer at once: a run of one step."""
    return Turn(text="Done at once.")


def marathon_script(request, context) -> Turn:
    """Check one item per step, quickly, MARATHON_STEPS times over; then answer."""
    step = turn_step(request)
    if step == MARATHON_STEPS - 1:
        return Turn(text="Done.")
    return Turn(text="Next.", tool_calls=[ScriptedToolCall(name="tick", arguments={"item": step})])


# Its only effects are its result and the state it writes, both committed with the step.
TICK = Tool(
    name="tick", description="Check one item.", input_model=Tick, execute=tick, idempotent=True
)


def ticker(name: str, description: str, max_steps: int) -> Agent:
    """Return an agent that checks items with `tick`, for at most `max_steps` steps a run."""
    return Agent(
        name=name,
        description=description,
        tools=[TICK],
        initial_state={"ticks": 0},
        max_steps=max_steps,
    )


stepper = ticker(AGENT_TYPE, "Takes a fixed number of steps, for the benchmark.", STEPS_PER_RUN)
waiter = ticker(
    WAITER_AGENT_TYPE, "Waits on a slow model every step, for the benchmark.", WAITER_STEPS
)
instant_waiter = ticker(
    INSTANT_WAITER_AGENT_TYPE,
    "Gives the waiter's replies at once, for the benchmark.",
    WAITER_STEPS,
)
marathon = ticker(
    MARATHON_AGENT_TYPE, "Takes a great many quick steps, for the benchmark.", MARATHON_STEPS
)

# Its clients follow the state; only the server writes it.
board = Agent(
    name=STATE_AGENT_TYPE,
    description="Holds the state the benchmark writes to its clients.",
    initial_state={"round": 0},
    state_sync=StateSync(readonly_connection=lambda connection: True),
)

once = Agent(name=ONCE_AGENT_TYPE, description="Answers in one step, for the benchmark.")
for agent in (stepper, board, waiter, instant_waiter, marathon, once):
    get_registry().register(agent)
register_script(AGENT_TYPE, script)
register_script(WAITER_AGENT_TYPE, waiter_script)
register_script(INSTANT_WAITER_AGENT_TYPE, instant_waiter_script)
register_script(MARATHON_AGENT_TYPE, marathon_script)
register_script(ONCE_AGENT_TYPE, once_script)
