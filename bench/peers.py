"""Peers: what a user would pick instead of Helix, on the same PostgreSQL in the same run.

Store level: LangGraph's `PostgresSaver` (`put` of a step's checkpoint, `get_tuple` of the
latest) against our step commit (`save_state_and_promote_staging`, as `bench.stores` times it)
and state load; the OpenAI Agents SDK's `SQLAlchemySession` (`add_items` of one item,
`get_items` of 100) against our `append_messages` of one message and `get_messages` of 100.
Each side times its own operation, and the sides alternate operation by operation, in rotating
order. The peers do less than we do (no version check, no staging, no sequence guarantee), so
a ratio above 1 is the price of those.

End to end: runs of `bench.agents.STEPS_PER_RUN` steps, each step a scripted model's instant
reply and, but for the last, one tool call, at 1 and at 50 concurrent runs: a LangGraph
`StateGraph` loop checkpointing every step (`PostgresSaver`, `durability="sync"`) and a DBOS
workflow whose model and tool calls are steps, each peer on a database of its own and on as
many processes as our steps' Celery workers (`bench.steps.WORKER_PROCESSES`), against our steps
per second on those workers as `bench.steps` runs them. One side runs at a time (all at once
would pass PostgreSQL's default `max_connections`), and the sides take turns, a round each, in
an order that rotates: the host's speed drifts within minutes, and so reaches every side alike.

The peers run in processes of their own, from their own virtualenv (`bench/requirements.txt`,
whose pins conflict with ours), driven by `bench/peer_side.py`.
"""

import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from django.db import connection
from psycopg import sql

from bench import agents, steps
from bench.harness import Options, Row, Table, interleave, percentile_ms
from bench.raw import connect
from bench.stores import Stepper, _Appender, _batch, _new_session, _store

LEGEND = (
    "Peers: LangGraph's PostgresSaver and the OpenAI Agents SDK's SQLAlchemySession on the same "
    "PostgreSQL, in their own virtualenv and process, against our store's step commit, state "
    "load, append and read, each side timing its own call, the sides alternating call by call; "
    "then whole runs: a LangGraph loop and a DBOS workflow on "
    f"{steps.WORKER_PROCESSES} processes against our runs on {steps.WORKER_PROCESSES} Celery "
    "workers, in steps per second."
)
PEERS_PYTHON = Path(__file__).resolve().parent / ".venv-peers" / "bin" / "python"
READ_MESSAGES = 100
# The end-to-end peers, each on its own database, as their columns name them.
RUN_PEERS = {"langgraph": "LangGraph", "dbos": "DBOS"}
OURS = "Helix"
SESSIONS = steps.CONCURRENT_SESSIONS
# Connections per peer process, as many as a Helix worker's pool holds.
PEER_POOL_SIZE = steps.WORKER_POOL
# Ours at 50 sessions over the best peer's, at least.
BEST_PEER_TARGET = 1.0


def run(options: Options, earlier: Iterable[Table] = ()) -> Iterator[Table]:
    """Yield our store's and our runs' tables against the peers', or say why they are missing.

    `earlier` holds the tables this run has measured so far: if the steps benchmark's is among
    them, its raw floor with no hop is set beside the best peer.
    """
    python = Path(os.environ.get("HELIX_BENCH_PEERS_PYTHON") or PEERS_PYTHON)
    if not python.exists():
        print(
            f"Peers skipped: no {python}. `make bench` installs bench/requirements.txt there "
            "(or set HELIX_BENCH_PEERS_PYTHON)."
        )
        return
    yield _store_table(python, options)
    earlier = list(earlier)
    hop_free = steps.measured_hop_free_rates(earlier)
    yield _runs_table(python, options, hop_free)


def _store_table(python: Path, options: Options) -> Table:
    """Time our store's operations against the store-level peers' on this run's database."""
    with _PeerProcess(python, "setup", url=_url(connection.settings_dict["NAME"])) as peer:
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
            mine, theirs = interleave([ours, partial(peer.call, operation)], options)
            rows.append(
                Row(
                    metric=f"{metric} p50",
                    orm=percentile_ms(mine, 50),
                    strict_raw=percentile_ms(theirs, 50),
                )
            )
    return Table(
        title=f"Helix store vs peers (p50 ms, {options.iterations} interleaved calls per side)",
        rows=rows,
        notes=[
            "commit vs LangGraph PostgresSaver.put; load vs PostgresSaver.get_tuple",
            "append 1 vs Agents SDK SQLAlchemySession.add_items; "
            f"read {READ_MESSAGES} vs SQLAlchemySession.get_items",
        ],
        columns=(OURS, "-", "peer"),
    )


def _runs_table(python: Path, options: Options, hop_free: dict[int, float] | None) -> Table:
    """Tabulate our steps per second against the peers', the sides taking turns.

    `hop_free` is the raw floor's with no broker hop from this run's steps benchmark, if it
    ran: what a step's least SQL allows on this machine, beside the best peer's.
    """
    rounds = 1 if options.quick else steps.ROUNDS
    rates = _rates(python, rounds)
    median = {name: {n: statistics.median(r) for n, r in by.items()} for name, by in rates.items()}
    ours = median.pop(OURS)
    langgraph, dbos = (median[name] for name in RUN_PEERS.values())
    most = max(SESSIONS)
    best = max(RUN_PEERS.values(), key=lambda name: median[name][most])
    rows = [
        Row(
            metric=f"steps/s, {sessions}",
            orm=ours[sessions],
            lenient_raw=langgraph[sessions],
            strict_raw=dbos[sessions],
            higher_is_better=True,
            precision=0,
        )
        for sessions in SESSIONS
    ]
    rows.append(
        Row(
            metric="ms per step",
            orm=1000 / ours[1],
            lenient_raw=1000 / langgraph[1],
            strict_raw=1000 / dbos[1],
            precision=1,
        )
    )
    rows.append(
        Row(
            metric=f"ours/best {most}",
            orm=ours[most] / median[best][most],
            higher_is_better=True,
            target=BEST_PEER_TARGET,
        )
    )
    floor_note = []
    if hop_free is not None:
        rows.append(
            Row(
                metric=f"no-hop floor/best {most}",
                orm=hop_free[most] / median[best][most],
                higher_is_better=True,
            )
        )
        floor_note.append(
            f"The raw floor with no broker hop (bench.steps, this run: a step's least SQL, every "
            f"step of a run in one task, no stream notices): {hop_free[most]:.0f} steps/s at "
            f"{most} runs; the last row is it over the best peer's: what the machine allows a "
            "step doing the least ours must, beside what the peer does."
        )
    every_round = "; ".join(
        f"{name}: " + ", ".join(f"{n}: " + "/".join(f"{r:.0f}" for r in by[n]) for n in SESSIONS)
        for name, by in rates.items()
    )
    return Table(
        title=f"Helix runs vs peers end to end (steps/s, {agents.STEPS_PER_RUN}-step runs)",
        rows=rows,
        notes=[
            "Rows: steps per second at 1 and 50 concurrent runs (each ratio our slowdown vs the "
            "peer left of it); the latency of one step of one run alone; ours at 50 runs over the "
            f"best peer's ({best}), which the target holds against.",
            f"Helix: {steps.WORKER_PROCESSES} Celery workers as bench.steps runs them. Peers: "
            f"{steps.WORKER_PROCESSES} processes sharing the runs, each run on a thread of its "
            f"own, at most {PEER_POOL_SIZE} connections per process. One side at a time, the "
            "sides taking turns a round each, in an order that rotates round by round.",
            "LangGraph: a StateGraph node per step, looping while the model calls a tool, "
            'PostgresSaver with durability="sync". DBOS: a workflow whose model and tool calls '
            "are @DBOS.step()s. Each on its own database, emptied before each measurement.",
            f"Median of {rounds} round(s) per concurrency; every round, {every_round}.",
            *floor_note,
        ],
        columns=(OURS, *RUN_PEERS.values()),
    )


def _rates(python: Path, rounds: int) -> dict[str, dict[int, list[float]]]:
    """Return each side's steps per second at each concurrency, every round's, by column name.

    One side at a time, started afresh for each round: the connections of all at once would
    pass PostgreSQL's default `max_connections`. Each round every side takes a turn, and the
    side that went first goes last in the next, so that a drift of the host's speed reaches
    the sides alike rather than whichever ran last.
    """
    sides: dict[str, Callable[[], AbstractContextManager[Callable[[int], float]]]] = {
        OURS: _ours,
        **{name: partial(_peer, python, peer) for peer, name in RUN_PEERS.items()},
    }
    rates = {name: {sessions: [] for sessions in SESSIONS} for name in sides}
    order = list(sides)
    for _ in range(rounds):
        for name in order:
            with sides[name]() as steps_per_second:
                steps_per_second(max(SESSIONS))  # Warm up imports, connections and pools.
                for sessions in SESSIONS:
                    rates[name][sessions].append(steps_per_second(sessions))
        order.append(order.pop(0))
    return rates


@contextmanager
def _ours() -> Iterator[Callable[[int], float]]:
    """Run our workers as bench.steps does; yield what measures our steps per second."""
    with steps.workers():
        yield partial(steps.steps_per_second, steps.bench_owner())


@contextmanager
def _peer(python: Path, peer: str) -> Iterator[Callable[[int], float]]:
    """Run the peer's processes; yield what measures its steps per second."""
    url = _url(_peer_database(peer))
    with ExitStack() as stack:
        # One after the other: the first creates the peer's tables.
        processes = [
            stack.enter_context(
                _PeerProcess(
                    python,
                    f"setup_{peer}",
                    url=url,
                    steps=agents.STEPS_PER_RUN,
                    pool_size=PEER_POOL_SIZE,
                )
            )
            for _ in range(steps.WORKER_PROCESSES)
        ]
        yield partial(_peer_steps_per_second, processes)
        processes[0].call("reset")  # Leave the peer's database empty.


def _peer_steps_per_second(processes: list["_PeerProcess"], sessions: int) -> float:
    """Have the processes share `sessions` runs at once; return the steps per second."""
    processes[0].call("reset")
    shares = [
        (sessions // len(processes)) + (index < sessions % len(processes))
        for index in range(len(processes))
    ]
    busy = [(process, share) for process, share in zip(processes, shares, strict=True) if share]
    started = time.perf_counter()
    for process, share in busy:
        process.send("runs", runs=share)
    for process, _ in busy:
        process.answer()
    return sessions * agents.STEPS_PER_RUN / (time.perf_counter() - started)


def _peer_database(peer: str) -> str:
    """Create the peer's own database on this run's server unless it exists; return its name."""
    name = f"helix_bench_peers_{peer}"
    with (
        connect({**connection.settings_dict, "NAME": "postgres"}, like_django=False) as admin,
        suppress(psycopg.errors.DuplicateDatabase),
    ):
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name


def _url(name: str) -> str:
    """Return the `postgresql://` URL of database `name` on this run's server."""
    database = connection.settings_dict
    credentials = database["USER"] + (f":{database['PASSWORD']}" if database["PASSWORD"] else "")
    return (
        f"postgresql://{credentials}@{database['HOST'] or 'localhost'}:"
        f"{database['PORT'] or 5432}/{name}"
    )


def _timed(call: Callable[..., object], *args: object, **kwargs: object) -> int:
    """Call `call` once; return the nanoseconds it took."""
    started = time.perf_counter_ns()
    call(*args, **kwargs)
    return time.perf_counter_ns() - started


class _PeerProcess:
    """`bench/peer_side.py` in the peers' virtualenv, set up by one command."""

    def __init__(self, python: Path, setup: str, **arguments: Any) -> None:
        script = Path(__file__).resolve().parent / "peer_side.py"
        self.setup = (setup, arguments)
        # -P: our bench/agents.py must not shadow the Agents SDK's `agents` package.
        self.process = subprocess.Popen(
            [str(python), "-P", str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def __enter__(self) -> "_PeerProcess":
        operation, arguments = self.setup
        self.call(operation, **arguments)
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)

    def call(self, operation: str, **arguments: Any) -> int:
        """Send one command and return the nanoseconds the peer says it took."""
        self.send(operation, **arguments)
        return self.answer()

    def send(self, operation: str, **arguments: Any) -> None:
        """Send one command without waiting for its answer."""
        self.operation = operation
        self.process.stdin.write(json.dumps({"op": operation, **arguments}) + "\n")
        self.process.stdin.flush()

    def answer(self) -> int:
        """Return the answer to the command last sent."""
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the peer process died on {self.operation!r}")
        return json.loads(answer)["ns"]
