"""The peers' side of `bench.peers`, run in the peers' own virtualenv (bench/requirements.txt).

It reads one JSON command per line on stdin and answers each with one JSON line on stdout:
`{"ns": <nanoseconds the operation took>}`. Commands: `setup` (with `url`, the database's
`postgresql://` URL), then `put` and `get_tuple` (LangGraph's `PostgresSaver` on one thread),
and `add_items` and `get_items` (the OpenAI Agents SDK's `SQLAlchemySession` on one session).
It imports no Helix code: the peers run exactly as their users run them.
"""

import asyncio
import json
import sys
import time
import uuid
from typing import Any

from agents.extensions.memory import SQLAlchemySession
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg import Connection
from psycopg.rows import dict_row

# A step's worth of state: the channels a graph's checkpoint holds, about as large as ours.
STATE = {"counter": 0, "notes": ["x" * 40] * 5}
ITEM = {"role": "user", "content": "Tell me about the weather in Lisbon tomorrow, please."}
READ_ITEMS = 100


class Peers:
    """The two peers, set up on one database, each on its own connection."""

    def __init__(self, url: str) -> None:
        self.connection = Connection.connect(
            url, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
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


def main() -> None:
    """Answer commands until stdin closes."""
    peers = None
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "setup":
            peers = Peers(command["url"])
            print(json.dumps({"ns": 0}), flush=True)
            continue
        operation = getattr(peers, command["op"])
        started = time.perf_counter_ns()
        operation()
        print(json.dumps({"ns": time.perf_counter_ns() - started}), flush=True)


if __name__ == "__main__":
    main()
