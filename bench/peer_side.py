"""The peers' side of `bench.peers`, run in the peers' own virtualenv (bench/requirements.txt).

It reads one JSON command per line on stdin and answers each with one JSON line on stdout:
`{"ns": <nanoseconds the command took>}`. The first command sets the process up for one peer:

- `setup` (with `url`, the database's `postgresql://` URL): the store-level peers. Then `put`
  and `get_tuple` (LangGraph's `PostgresSaver` on one thread), and `add_items` and `get_items`
  (the OpenAI Agents SDK's `SQLAlchemySession` on one session).
- `setup_langgraph` or `setup_dbos` (with `url`, the peer's own database, `steps`, the steps of
  a run, and `pool_size`, its connections at most): an end-to-end peer, the LangGraph loop or
  the DBOS workflow. Then `runs` (with `runs`: that many runs at once, answered when all have
  ended) and `reset` (which empties the peer's tables).

It imports no Helix code: the peers run exactly as their users run them.
"""

import asyncio
import json
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agents.extensions.memory import SQLAlchemySession
from dbos import DBOS
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from psycopg import Connection
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

# A step's worth of state: the channels a graph's checkpoint holds, about as large as ours.
STATE = {"counter": 0, "notes": ["x" * 40] * 5}
ITEM = {"role": "user", "content": "Tell me about the weather in Lisbon tomorrow, please."}
READ_ITEMS = 100
PROMPT = "Check the list."
# Connection settings PostgresSaver requires.
SAVER_CONNECTION = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}


class StorePeers:
    """The two store-level peers, set up on one database, each on its own connection."""

    def __init__(self, url: str) -> None:
        self.connection = Connection.connect(url, **SAVER_CONNECTION)
        self.saver = PostgresSaver(self.connection)
        self.saver.setup()
        self.config: dict[str, Any] = {
            "configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}
        }
        self.step = 0
        self.loop = asyncio.new_event_loop()
        self.session = SQLAlchemySession.from_url(
            uuid.uuid4().hex,
            url=url.replace("postgresql://", "postgresql+asyncpg://", 1),
            create_tables=True,
        )
        self.reader = SQLAlchemySession(
            uuid.uuid4().hex, engine=self.session._engine, create_tables=True
        )
        self.loop.run_until_complete(self.reader.add_items([ITEM] * READ_ITEMS))

    def put(self) -> None:
        """Save the thread's next checkpoint, every channel new, as a graph's step does."""
        self.step += 1
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {**STATE, "counter": self.step}
        versions = {channel: str(self.step) for channel in checkpoint["channel_values"]}
        checkpoint["channel_versions"] = versions
        self.config = self.saver.put(
            self.config, checkpoint, {"source": "loop", "step": self.step}, versions
        )

    def get_tuple(self) -> None:
        """Load the thread's latest checkpoint."""
        if self.saver.get_tuple(self.config) is None:
            raise RuntimeError("no checkpoint")

    def add_items(self) -> None:
        """Append one item to the session."""
        self.loop.run_until_complete(self.session.add_items([ITEM]))

    def get_items(self) -> None:
        """Read the reading session's items."""
        items = self.loop.run_until_complete(self.reader.get_items(limit=READ_ITEMS))
        if len(items) != READ_ITEMS:
            raise RuntimeError(f"read {len(items)} items")

    def close(self) -> None:
        """Close the connections."""
        self.loop.run_until_complete(self.session._engine.dispose())
        self.connection.close()


def scripted_model(step: int, steps: int) -> dict[str, Any]:
    """Return the model's reply at once: a sentence and one tool call a step, then the answer."""
    if step == steps - 1:
        return {"content": "Every item is checked.", "tool_calls": []}
    return {
        "content": f"Checking item {step} of the list now.",
        "tool_calls": [{"name": "tick", "args": {"item": step}, "id": f"call_{step}"}],
    }


def tick(item: int) -> dict[str, int]:
    """The tool: check one item."""
    return {"checked": item}


class LoopState(MessagesState):
    """The graph's state: the conversation, and the items the tool has checked."""

    ticks: int


def loop_graph(saver: PostgresSaver, steps: int) -> Any:
    """Compile the agent loop: one node a step, looping while the model calls a tool."""

    def agent(state: LoopState) -> dict[str, Any]:
        step = sum(isinstance(message, AIMessage) for message in state["messages"])
        reply = scripted_model(step, steps)
        calls = reply["tool_calls"]
        results = [
            ToolMessage(json.dumps(tick(**call["args"])), tool_call_id=call["id"]) for call in calls
        ]
        return {
            "messages": [AIMessage(**reply), *results],
            "ticks": state.get("ticks", 0) + len(calls),
        }

    def route(state: LoopState) -> str:
        return "agent" if isinstance(state["messages"][-1], ToolMessage) else END

    graph = StateGraph(LoopState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["agent", END])
    return graph.compile(checkpointer=saver)


@DBOS.step()
def model_step(step: int, steps: int) -> dict[str, Any]:
    """Call the scripted model, durably."""
    return scripted_model(step, steps)


@DBOS.step()
def tool_step(item: int) -> dict[str, int]:
    """Call the tool, durably."""
    return tick(item)


@DBOS.workflow()
def agent_loop(prompt: str, steps: int) -> int:
    """Run the agent loop, each model and tool call a step; return the steps taken."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    step = 0
    while True:
        reply = model_step(step, steps)
        messages.append({"role": "assistant", **reply})
        step += 1
        if not reply["tool_calls"]:
            return step
        for call in reply["tool_calls"]:
            result = tool_step(**call["args"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


class LangGraphRuns:
    """The LangGraph loop on its own database, checkpointing every step."""

    def __init__(self, url: str, steps: int, pool_size: int) -> None:
        self.steps = steps
        self.pool = ConnectionPool(url, min_size=1, max_size=pool_size, kwargs=SAVER_CONNECTION)
        saver = PostgresSaver(self.pool)
        saver.setup()
        self.graph = loop_graph(saver, steps)

    def runs(self, runs: int) -> None:
        """Run `runs` graph runs at once, each on a thread of its own."""
        with ThreadPoolExecutor(max_workers=runs) as threads:
            for taken in threads.map(lambda _: self._run(), range(runs)):
                if taken != self.steps:
                    raise RuntimeError(f"a LangGraph run took {taken} steps")

    def reset(self) -> None:
        """Empty the checkpointer's tables of earlier runs."""
        with self.pool.connection() as connection:
            connection.execute("TRUNCATE checkpoints, checkpoint_blobs, checkpoint_writes")

    def close(self) -> None:
        """Close the pool."""
        self.pool.close()

    def _run(self) -> int:
        """Run the graph once; return the steps it took."""
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        state = self.graph.invoke({"messages": [HumanMessage(PROMPT)]}, config, durability="sync")
        return sum(isinstance(message, AIMessage) for message in state["messages"])


class DBOSRuns:
    """The DBOS workflow, with DBOS's system database on its own database."""

    def __init__(self, url: str, steps: int, pool_size: int) -> None:
        self.steps = steps
        self.url = url
        DBOS(
            config={
                "name": "helix-bench-peers",
                "system_database_url": url,
                "sys_db_pool_size": pool_size,
                "executor_id": f"helix-bench-{os.getpid()}",
                "log_level": "WARNING",
            }
        )
        DBOS.launch()

    def runs(self, runs: int) -> None:
        """Start `runs` workflows at once and wait for each to end."""
        handles = [DBOS.start_workflow(agent_loop, PROMPT, self.steps) for _ in range(runs)]
        for handle in handles:
            if (taken := handle.get_result()) != self.steps:
                raise RuntimeError(f"a DBOS workflow took {taken} steps")

    def reset(self) -> None:
        """Empty DBOS's tables of earlier workflows."""
        with Connection.connect(self.url, autocommit=True) as connection:
            connection.execute(
                "TRUNCATE dbos.workflow_status, dbos.workflow_input, dbos.workflow_output, "
                "dbos.operation_outputs CASCADE"
            )

    def close(self) -> None:
        """Shut DBOS down."""
        DBOS.destroy()


SETUPS = {"setup": StorePeers, "setup_langgraph": LangGraphRuns, "setup_dbos": DBOSRuns}


def main() -> None:
    """Answer commands until stdin closes."""
    answers = sys.stdout
    sys.stdout = sys.stderr  # Whatever the peers print must not garble the answers.
    peers = None
    try:
        for line in sys.stdin:
            arguments = json.loads(line)
            operation = arguments.pop("op")
            started = time.perf_counter_ns()
            if operation in SETUPS:
                peers = SETUPS[operation](**arguments)
            else:
                getattr(peers, operation)(**arguments)
            print(json.dumps({"ns": time.perf_counter_ns() - started}), file=answers, flush=True)
    finally:
        if peers is not None:
            peers.close()


if __name__ == "__main__":
    main()
