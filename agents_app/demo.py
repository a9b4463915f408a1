"""Demo agents the embedded mode registers, each driven offline by a scripted model.

- `researcher` searches, then answers with structured output (a summary and its sources).
- `counter` keeps a counter in its state: each turn adds the number the user sends.
"""

import json

from pydantic import BaseModel, Field

from agents_app.definitions.agent import Agent, Tool
from agents_app.definitions.registry import get_registry
from agents_app.llm.base import AdapterContext, LLMRequest
from agents_app.llm.scripted import ScriptedToolCall, Turn, register_script
from sessions_app.stores.types import MessageRole

# A tiny offline corpus the search tool looks through.
CORPUS = {
    "django": "Django is a Python web framework that encourages rapid, clean development.",
    "celery": "Celery is a distributed task queue for Python, with retries and schedules.",
    "channels": "Django Channels adds WebSockets and other async protocols to Django.",
    "postgresql": "PostgreSQL is an open-source relational database with strong consistency.",
}


class SearchInput(BaseModel):
    query: str = Field(min_length=1, description="What to look for.")


class ResearchOutput(BaseModel):
    summary: str = Field(description="The answer, in a few sentences.")
    sources: list[str] = Field(description="The documents the answer rests on.")


def search(query: SearchInput, ctx) -> dict:
    """Return the corpus entries whose name appears in the query."""
    words = query.query.lower()
    hits = [{"source": name, "text": text} for name, text in CORPUS.items() if name in words]
    ctx.state.append("searches", query.query)
    return {"results": hits}


class AddInput(BaseModel):
    amount: int = Field(description="What to add to the counter.")


def add(arguments: AddInput, ctx) -> dict:
    """Add to the counter kept in the agent's state."""
    total = ctx.state.get("count", 0) + arguments.amount
    ctx.state["count"] = total
    return {"count": total}


researcher = Agent(
    name="researcher",
    description="Answers questions from a small offline corpus, citing its sources.",
    system_prompt="You are a careful research assistant. Search before you answer.",
    tools=[
        Tool(
            name="search",
            description="Search the corpus.",
            input_model=SearchInput,
            execute=search,
        )
    ],
    output_schema=ResearchOutput,
    initial_state={"searches": []},
    max_steps=5,
)

counter = Agent(
    name="counter",
    description="Keeps a running total of the numbers you send it.",
    system_prompt=lambda state: f"The counter stands at {state.get('count', 0)}.",
    tools=[
        Tool(
            name="add",
            description="Add to the counter.",
            input_model=AddInput,
            execute=add,
        )
    ],
    initial_state={"count": 0},
    max_steps=4,
)


def research_script(request: LLMRequest, context: AdapterContext) -> Turn:
    """Search once for the question, then answer from what the search returned."""
    last = request.messages[-1]
    if last.role == MessageRole.USER:
        return Turn(
            text="Let me look that up.",
            tool_calls=[ScriptedToolCall(name="search", arguments={"query": last.content})],
        )
    found = [name for name in CORPUS if name in last.content]
    summary = " ".join(CORPUS[name] for name in found) or "The corpus has nothing on that."
    return Turn(
        tool_calls=[
            ScriptedToolCall(name="final_output", arguments={"summary": summary, "sources": found})
        ]
    )


def counter_script(request: LLMRequest, context: AdapterContext) -> Turn:
    """Add the number in the user's message, then report the total."""
    last = request.messages[-1]
    if last.role == MessageRole.USER:
        digits = "".join(ch for ch in last.content if ch.isdigit() or ch == "-")
        amount = int(digits) if digits.strip("-") else 1
        return Turn(tool_calls=[ScriptedToolCall(name="add", arguments={"amount": amount})])
    return Turn(text=f"The counter is now {json.loads(last.content)['count']}.")


registry = get_registry()
for agent, script in ((researcher, research_script), (counter, counter_script)):
    registry.register(agent)
    register_script(agent.name, script)
