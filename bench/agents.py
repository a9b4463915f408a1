"""The agent the steps benchmark runs: each run takes `STEPS_PER_RUN` steps of the scripted model.

Every step but the last streams a short sentence and calls one tool that writes the state; the
last one answers, which completes the run. The workers import this module (`HELIX_AGENTS`).
"""

from pydantic import BaseModel

from agents_app.definitions import Agent, Tool
from agents_app.llm.scripted import ScriptedToolCall, Turn, register_script, turn_step
from agents_app.registry import get_registry

AGENT_TYPE = "bench-stepper"
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

get_registry().register(stepper)
register_script(AGENT_TYPE, script)
