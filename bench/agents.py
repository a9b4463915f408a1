"""The benchmarks' agents; the workers and Daphne processes import this module (`HELIX_AGENTS`).

The steps benchmark runs `bench-stepper`: each run takes `STEPS_PER_RUN` steps of the scripted
model, every one but the last streaming a short sentence and calling one tool that writes the
state; the last one answers, which completes the run. The state benchmark writes the state of
`bench-state` to its signed-in clients.
"""

from pydantic import BaseModel

from agents_app.definitions import Agent, Tool
from agents_app.llm.scripted import ScriptedToolCall, Turn, register_script, turn_step
from agents_app.registry import get_registry
from agents_app.state_sync import StateSync

AGENT_TYPE = "bench-stepper"
STATE_AGENT_TYPE = "bench-state"
STEPS_PER_RUN = 10


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


stepper = Agent(
    name=AGENT_TYPE,
    description="Takes a fixed number of steps, for the benchmark.",
    tools=[Tool(name="tick", description="Check one item.", input_model=Tick, execute=tick)],
    initial_state={"ticks": 0},
    max_steps=STEPS_PER_RUN,
)

# Its clients follow the state; only the server writes it.
board = Agent(
    name=STATE_AGENT_TYPE,
    description="Holds the state the benchmark writes to its clients.",
    initial_state={"round": 0},
    state_sync=StateSync(readonly_connection=lambda connection: True),
)

get_registry().register(stepper)
get_registry().register(board)
register_script(AGENT_TYPE, script)
