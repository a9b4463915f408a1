"""Peers: what a user would pick instead of Helix, on the same PostgreSQL in the same run.

LangGraph's `PostgresSaver` (`put` of a step's checkpoint, `get_tuple` of the latest) against
our step commit (`save_state_and_promote_staging`, as `bench.stores` times it) and state load;
the OpenAI Agents SDK's `SQLAlchemySession` (`add_items` of one item, `get_items` of 100)
against our `append_messages` of one message and `get_messages` of 100. The peers run in a
process of their own, from their own virtualenv (`bench/requirements.txt`, whose pins conflict
with ours), driven by `bench/peer_side.py`; each side times its own operation, and the sides
alternate operation by operation, in rotating order. The peers do less than we do (no version
check, no staging, no sequence guarantee), so a ratio above 1 is the price of those.
"""

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from django.db import connection

from bench.harness import Options, Row, Table, interleave, percentile_ms
from bench.stores import Stepper, _Appender, _batch, _new_session, _store

LEGEND = (
    "Peers: LangGraph's PostgresSaver and the OpenAI Agents SDK's SQLAlchemySession on the same "
    "PostgreSQL, in their own virtualenv and process, against our store's step commit, state "
    "load, append and read; each side times its own call, the sides alternating call by call."
)
PEERS_PYTHON = Path(__file__).resolve().parent / ".venv-peers" / "bin" / "python"
READ_MESSAGES = 100


def run(options: Options) -> Iterator[Table]:
    """Yield the table of our operations against the peers', or say why the peers are missing."""
    python = Path(os.environ.get("HELIX_BENCH_PEERS_PYTHON") or PEERS_PYTHON)
    if not python.exists():
        print(
            f"Peers skipped: no {python}. `make bench` installs bench/requirements.txt there "
            "(or set HELIX_BENCH_PEERS_PYTHON)."
        )
        return
    with _PeerProcess(python) as peer:
        reading = _new_session().session_id
        _store.append_messages(reading, _batch(READ_MESSAGES))
        loading = _new_session().session_id
        pairs: list[tuple[str, Callable[[], int], str]] = [
            ("commit", Stepper(_store.save_state_and_promote_staging), "put"),
            ("load", partial(_timed, _store.load_state, loading), "get_tuple"),
            ("append 1", _Appender(_store.append_messages, _batch(1)), "add_items"),
            (
                f"read {READ_MESSAGES}",
                partial(_timed, _store.get_messages, reading, limit=READ_MESSAGES),
                "get_items",
            ),
        ]
        rows = []
        for metric, ours, operation in pairs:
            mine, theirs = interleave([ours, partial(peer.time, operation)], options)
            rows.append(
                Row(
                    metric=f"{metric} p50",
                    orm=percentile_ms(mine, 50),
                    strict_raw=percentile_ms(theirs, 50),
                )
            )
    yield Table(
        title=f"Helix store vs peers (p50 ms, {options.iterations} interleaved calls per side)",
        rows=rows,
        notes=[
            "commit vs LangGraph PostgresSaver.put; load vs PostgresSaver.get_tuple",
            "append 1 vs Agents SDK SQLAlchemySession.add_items; "
            f"read {READ_MESSAGES} vs SQLAlchemySession.get_items",
        ],
        columns=("Helix", "-", "peer"),
    )


def _timed(call: Callable[..., object], *args: object, **kwargs: object) -> int:
    """Call `call` once; return the nanoseconds it took."""
    started = time.perf_counter_ns()
    call(*args, **kwargs)
    return time.perf_counter_ns() - started


class _PeerProcess:
    """`bench/peer_side.py` in the peers' virtualenv, set up on this run's database."""

    def __init__(self, python: Path) -> None:
        script = Path(__file__).resolve().parent / "peer_side.py"
        # -P: our bench/agents.py must not shadow the Agents SDK's `agents` package.
        self.process = subprocess.Popen(
            [str(python), "-P", str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def __enter__(self) -> "_PeerProcess":
        database = connection.settings_dict
        credentials = database["USER"] + (
            f":{database['PASSWORD']}" if database["PASSWORD"] else ""
        )
        url = (
            f"postgresql://{credentials}@{database['HOST'] or 'localhost'}:"
            f"{database['PORT'] or 5432}/{database['NAME']}"
        )
        self._send({"op": "setup", "url": url})
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)

    def time(self, operation: str) -> int:
        """Have the peer run `operation` once; return the nanoseconds it measured."""
        return self._send({"op": operation})

    def _send(self, command: dict[str, str]) -> int:
        """Send one command and return the peer's answer."""
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the peer process died on {command['op']!r}")
        return json.loads(answer)["ns"]
