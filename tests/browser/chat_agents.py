"""Agents the chat page's browser tests talk to, each played by the offline scripted model.

Daphne and the Celery worker of those tests import this module (`HELIX_AGENTS`).
"""

import re

from pydantic import BaseModel

from agents_app.definitions.agent import Agent, Tool
from agents_app.definitions.registry import get_registry
from agents_app.llm.base import LLMError
from agents_app.llm.scripted import ScriptedToolCall, Turn, register_script, sequence_script
from agents_app.llm.scripted import turn_step as step_of
from sessions_app.stores import get_session_store
from sessions_app.stores.types import MessageRole

# Long and slow enough (40 pieces, 0.08 s apart) to reload the page while it streams.
STORY = " ".join(f"w{n}" for n in range(120))
# Slower still, so that an interrupt lands while it streams.
SPEECH = " ".join(f"s{n}" for n in range(120))
RESUMED = "Picking up where I stopped: done."
RETRIED = "Second time lucky."


class Transfer(BaseModel):
    amount: int


class Question(BaseModel):
    question: str


class Amount(BaseModel):
    amount: int


def transfer(order: Transfer, ctx) -> dict:
    return {"sent": order.amount}


def add(amount: Amount, ctx) -> dict:
    ctx.state["count"] = ctx.state.get("count", 0) + amount.amount
    return {"count": ctx.state["count"]}


def last_tool_result(request) -> str:
    return [m.content for m in request.messages if m.role == MessageRole.TOOL][-1]


def story_script(request, context) -> Turn:
    """Tell the story, preceded by what the user said; at once if that starts with "quick"."""
    said = [m.content for m in request.messages if m.role == MessageRole.USER][-1]
    return Turn(text=f"You said {said}. {STORY}", delay=0 if said.startswith("quick") else 0.08)


def approver_script(request, context) -> Turn:
    """Ask to send 7 coins; once the call is answered, say what came of it."""
    if step_of(request) == 0:
        return Turn(tool_calls=[ScriptedToolCall(name="transfer", arguments={"amount": 7})])
    return Turn(text=f"Transfer result: {last_tool_result(request)}")


def counter_script(request, context) -> Turn:
    """Ask the person for an amount, add it to the count in the state, then report the count."""
    match step_of(request):
        case 0:
            ask = ScriptedToolCall(name="ask_amount", arguments={"question": "How many?"})
            return Turn(tool_calls=[ask])
        case 1:
            amount = int(re.search(r"-?\d+", last_tool_result(request)).group())
            return Turn(tool_calls=[ScriptedToolCall(name="add", arguments={"amount": amount})])
        case _:
            return Turn(text=f"Counted: {last_tool_result(request)}")


def flaky_script(request, context) -> Turn:
    """Fail for good in a session's first run; answer in any later one (a retry)."""
    if get_session_store().get_current_run(context.session_id).turn == 1:
        return Turn(error=LLMError("The model is down.", retryable=False))
    return Turn(text=RETRIED)


CHAT_AGENTS = [
    (Agent(name="chat-talker"), story_script),
    (
        Agent(
            name="chat-approver",
            tools=[
                Tool(
                    name="transfer",
                    description="Send coins; a person approves each transfer.",
                    input_model=Transfer,
                    execute=transfer,
                    needs_approval=True,
                )
            ],
        ),
        approver_script,
    ),
    # The first reply streams slowly; a resumed run (one reply in) finishes at once.
    (
        Agent(name="chat-speaker"),
        sequence_script(Turn(text=SPEECH, delay=0.1), Turn(text=RESUMED)),
    ),
    (Agent(name="chat-flaky"), flaky_script),
    (
        Agent(
            name="chat-counter",
            initial_state={"count": 0},
            tools=[
                Tool(
                    name="ask_amount",
                    description="Ask the person how much to add.",
                    input_model=Question,
                    client=True,
                ),
                Tool(name="add", description="Add to the count.", input_model=Amount, execute=add),
            ],
        ),
        counter_script,
    ),
]

registry = get_registry()
for agent, script in CHAT_AGENTS:
    if not registry.has(agent.name):
        registry.register(agent)
    register_script(agent.name, script)
