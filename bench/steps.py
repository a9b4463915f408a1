"""Agent steps per second on real Celery workers, against raw baselines in the same run.

`WORKER_PROCESSES` worker processes (two a core, as the README's production layout has them)
consume a queue of their own on the throwaway database and Redis. A run of the benchmark agent
(`bench.agents`) takes ten steps, each a Celery task that streams text, runs a tool and commits.
Runs start through `agent_start`, as the API starts them, and a run's time ends when its last
step has committed the run's end. The same workers run the raw floor (`bench.floor`): ten-hop
task chains doing a step's least SQL with psycopg, timed the same way, and, for reference, the
same ten hops run in one task each, as ours run a run's steps within a time slice: the floor
with no broker hop.
"""

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import connection

from agents_app.runs.services import agent_start
from bench import agents, settings_database_url
from bench.floor import FloorTables, floor_run, floor_step
from bench.harness import Options, Row, Table
from bench.raw import RawSessionStore, connect
from bench.stores import Stepper
from helix_project.celery import app
from sessions_app.models import Run

LEGEND = (
    "Agent steps: the benchmark agent's runs on Celery worker processes (two a core) over "
    "PostgreSQL and Redis, each step a task that streams text, runs one tool and commits; "
    "the raw floor is a bare task chain on the same workers doing a step's least SQL with "
    "psycopg (bench.floor); the raw commit is one raw psycopg step commit (the same SQL as "
    "ours) on one connection."
)
TITLE = "Agent steps on Celery workers vs raw baselines"
ROOT = Path(__file__).resolve().parents[1]
# Two a core of the 2-core machines it runs on: each runs its Python one thread at a time, so
# two keep a core busy while the other's threads wait on the database (README, "The production
# layout").
WORKER_PROCESSES = 4
# Connections per worker process (DATABASE_POOL_MAX_SIZE): 40 in all, as two of 20 had.
WORKER_POOL = 10
WORKER_APPLICATION_NAME = "helix-bench-worker"
CONCURRENT_SESSIONS = (1, 50)
# Ours over the raw floor in steps per second, at most: a step costs little beyond the floor.
FLOOR_RATIO_TARGETS = {1: 2.0, 50: 1.5}
READY_TIMEOUT = 60.0
RUN_TIMEOUT = 300.0
# The runs among some that have ended, and how: what the benchmarks watch them with.
_ENDED_RUNS = (
    f"SELECT id, status, error FROM {Run._meta.db_table} WHERE id = ANY(%s) AND status <> %s"
)
ROUNDS = 3


def run(options: Options) -> Iterator[Table]:
    """Yield the table of steps per second at each concurrency and the per-step overhead."""
    owner = bench_owner()
    rounds = 1 if options.quick else ROUNDS
    # Each side first warms up the workers' imports, and as many pooled connections (each
    # preparing its statements after a few runs of each) as the most sessions use; a quick
    # run warms up the imports only.
    warming = 1 if options.quick else max(CONCURRENT_SESSIONS)
    with (
        connect(connection.settings_dict, like_django=False) as raw,
        FloorTables(raw) as floor,
        workers() as running,
    ):
        commit = Stepper(RawSessionStore(raw, executemany=True).save_state_and_promote_staging)
        steps_per_second(owner, warming)
        floor_steps_per_second(floor, warming)
        floor_steps_per_second(floor, warming, hops=False)
        rates: dict[int, list[float]] = {sessions: [] for sessions in CONCURRENT_SESSIONS}
        floor_rates: dict[int, list[float]] = {sessions: [] for sessions in CONCURRENT_SESSIONS}
        hop_free_rates: dict[int, list[float]] = {s: [] for s in CONCURRENT_SESSIONS}
        raw_ms: list[float] = []
        for _ in range(rounds):  # Ours and the raw sides take turns, as the machine drifts.
            for sessions in CONCURRENT_SESSIONS:
                rates[sessions].append(steps_per_second(owner, sessions))
                floor_rates[sessions].append(floor_steps_per_second(floor, sessions))
                hop_free_rates[sessions].append(floor_steps_per_second(floor, sessions, hops=False))
                raw_ms.append(_raw_commit_ms(commit, agents.STEPS_PER_RUN * sessions))
        worker_log = _tail(running.logs)
    raw_ms.sort()
    raw_commit_ms = raw_ms[len(raw_ms) // 2]
    median = {sessions: statistics.median(rates[sessions]) for sessions in rates}
    floor_median = {sessions: statistics.median(floor_rates[sessions]) for sessions in rates}
    hop_free_median = {s: statistics.median(hop_free_rates[s]) for s in rates}
    at_one = median[1]
    rows = [
        Row(
            metric=_rate_metric(sessions),
            orm=median[sessions],
            lenient_raw=1000 / raw_commit_ms,
            strict_raw=floor_median[sessions],
            higher_is_better=True,
            target=FLOOR_RATIO_TARGETS.get(sessions),
            precision=0,
        )
        for sessions in CONCURRENT_SESSIONS
    ]
    rows += [
        Row(
            metric=_hop_free_metric(sessions),
            orm=median[sessions],
            strict_raw=hop_free_median[sessions],
            higher_is_better=True,
            precision=0,
        )
        for sessions in CONCURRENT_SESSIONS
    ]
    rows.append(Row(metric="ms per step", orm=1000 / at_one, strict_raw=raw_commit_ms, precision=1))
    notes = [
        "Rows: steps per second at 1 and 50 concurrent sessions against raw commits per second "
        "on one connection and against the raw floor's, which the targets hold against; the "
        "same against the raw floor with no broker hop (each chain's hops in one task, as ours "
        "run a run's steps within a time slice), for reference, with no target; the latency of "
        "one step of one session against one raw commit.",
        f"Median of {rounds} round(s) per concurrency, after a round of {warming} session(s) "
        f"on each side to warm up; every round, ours: {_every_round(rates)}"
        f"; raw floor: {_every_round(floor_rates)}; with no hop: {_every_round(hop_free_rates)}",
        f"Each run takes {agents.STEPS_PER_RUN} steps; {WORKER_PROCESSES} worker processes "
        "started as the Procfile starts them (a threads pool; connections from a pool).",
    ]
    if worker_log:
        notes.append("Worker log tail:\n" + worker_log)
    yield Table(
        title=TITLE,
        rows=rows,
        notes=notes,
        columns=("Helix", "raw commit", "raw floor"),
    )


def bench_owner():
    """Return the user the benchmark's runs belong to."""
    return get_user_model().objects.get_or_create(username="bench-steps")[0]


def measured_hop_free_rates(tables: Iterable[Table]) -> dict[int, float] | None:
    """Return the raw floor's steps per second with no broker hop from this run's steps table."""
    rows = _rows(tables)
    if rows is None:
        return None
    return {s: rows[_hop_free_metric(s)].strict_raw for s in CONCURRENT_SESSIONS}


def _rows(tables: Iterable[Table]) -> dict[str, Row] | None:
    """Return the rows of this run's steps table by metric, if it has one."""
    for table in tables:
        if table.title == TITLE:
            return {row.metric: row for row in table.rows}
    return None


def _rate_metric(sessions: int) -> str:
    """Return the name of the row of steps per second at `sessions` concurrent sessions."""
    return f"steps/s, {sessions}"


def _every_round(rates: dict[int, list[float]]) -> str:
    """Return every round's steps per second at each concurrency, for a table's notes."""
    return "; ".join(f"{s}: " + ", ".join(f"{r:.0f}" for r in by) for s, by in rates.items())


def _hop_free_metric(sessions: int) -> str:
    """Return the name of the row of ours against the raw floor with no broker hop."""
    return f"steps/s, {sessions}, vs no hop"


def steps_per_second(
    owner, sessions: int, agent_type: str = agents.AGENT_TYPE, steps: int = agents.STEPS_PER_RUN
) -> float:
    """Start `sessions` runs at once and return the steps per second until all have ended.

    The runs are of `agent_type`, whose runs take `steps` steps: the benchmark agent's by default.
    """

    def start() -> list[str]:
        return [
            agent_start(user=owner, agent_type=agent_type, message="Check the list.").run_id
            for _ in range(sessions)
        ]

    with watching_runs() as ended_among:
        return timed(start, ended_among, steps_per_run=steps)


def floor_steps_per_second(floor: FloorTables, sessions: int, *, hops: bool = True) -> float:
    """Start `sessions` raw floor chains at once and return their steps per second.

    Each hop is a task that enqueues the next; with `hops=False` one task runs all of its
    chain's hops, as ours run a run's steps within a time slice.
    """
    ids = floor.new_sessions(sessions)

    def start() -> list[str]:
        for session_id in ids:
            if hops:
                floor_step.delay(session_id, 1, agents.STEPS_PER_RUN)
            else:
                floor_run.delay(session_id, agents.STEPS_PER_RUN)
        return ids

    return timed(start, floor.ended_among)


def timed(
    start: Callable[[], list[str]],
    ended_among: Callable[[list[str]], list[str]],
    *,
    steps_per_run: int = agents.STEPS_PER_RUN,
) -> float:
    """Call `start`, which returns what it started, wait until each has ended (`wait_until_ended`)
    and return the steps per second."""
    started = time.perf_counter()
    ids = start()
    wait_until_ended(ids, ended_among)
    return len(ids) * steps_per_run / (time.perf_counter() - started)


@contextlib.contextmanager
def watching_runs() -> Iterator[Callable[[list[str]], list[str]]]:
    """Yield the look `wait_until_ended` takes at our runs, on a raw connection of its own, as
    the floor's chains are looked at: it returns those of the runs given that have ended, and
    raises if one failed."""
    with connect(connection.settings_dict, like_django=False) as database:

        def ended_among(run_ids: list[str]) -> list[str]:
            rows = database.execute(_ENDED_RUNS, [run_ids, Run.Status.RUNNING.value]).fetchall()
            failed = sorted(
                {str(error) for _, status, error in rows if status == Run.Status.FAILED}
            )
            if failed:
                raise RuntimeError(f"Benchmark runs failed: {failed[:3]}; see the worker log.")
            return [run_id for run_id, _, _ in rows]

        yield ended_among


def wait_until_ended(
    ids: list[str],
    ended_among: Callable[[list[str]], list[str]],
    *,
    timeout: float = RUN_TIMEOUT,
) -> None:
    """Return once `ended_among` has named each of `ids` (our runs, or the floor's chains) as
    ended; raise if they take longer than `timeout` seconds.

    Each look asks only after those still going, and looks more often as they get fewer: the
    last one's end is seen within about 5 ms, and a thousand are not read a hundred times a
    second. Ours and the floor's are watched alike, so that neither pays more than the other
    for being watched.
    """
    deadline = time.monotonic() + timeout
    going = set(ids)
    while going := going - set(ended_among(list(going))):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(going)} runs did not end within {timeout:.0f} s")
        time.sleep(0.005 + len(going) / 10_000)


def _raw_commit_ms(commit: Stepper, count: int) -> float:
    """Return the median milliseconds of `count` raw step commits."""
    timings = sorted(commit() for _ in range(count))
    return timings[len(timings) // 2] / 1e6


@dataclass(frozen=True)
class Workers:
    """The benchmark's running worker processes and their logs."""

    processes: list[subprocess.Popen]
    logs: list[Path]


@contextlib.contextmanager
def own_queue(prefix: str) -> Iterator[str]:
    """Yield the name of a broker queue of the block's own; delete the queue after, with what
    is left in it (RabbitMQ would keep it for ever, Redis its messages)."""
    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        with app.connection_for_write() as broker:
            # Declared first, as Celery declares a queue it sends to: Redis' transport deletes
            # only the queues its connection has declared, and the block's may be another
            # process's.
            queue = app.amqp.queues.new_missing(name)(broker.default_channel)
            queue.declare()
            queue.delete()


@contextlib.contextmanager
def workers(count: int = WORKER_PROCESSES, **env: str) -> Iterator[Workers]:
    """Run `count` worker processes on a queue of their own until the block exits.

    They are started as the Procfile starts them, with `env` over the benchmark's environment.
    """
    with (
        own_queue("bench") as queue,
        tempfile.TemporaryDirectory(prefix="helix-bench-workers-") as folder,
    ):
        env = {
            **os.environ,
            "DATABASE_URL": settings_database_url(connection.settings_dict),
            "CELERY_TASK_DEFAULT_QUEUE": queue,
            "HELIX_AGENTS": "bench.agents",
            "DEBUG": "false",
            "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only-secret"),
            # PostgreSQL names the workers' connections so (`pg_stat_activity.application_name`).
            "PGAPPNAME": WORKER_APPLICATION_NAME,
            "DATABASE_POOL_MAX_SIZE": str(WORKER_POOL),
            **env,
        }
        previous_queue = app.conf.task_default_queue
        app.conf.task_default_queue = queue  # Where this process sends the steps.
        logs = [Path(folder) / f"worker-{n}.log" for n in range(count)]
        names = [f"{queue}-{n}@bench" for n in range(count)]
        workers: list[subprocess.Popen] = []
        try:  # Inside: a worker that fails to start leaves none of those before it running.
            for name, log in zip(names, logs, strict=True):
                workers.append(_start_worker(name, log, env))
            _wait_ready(workers, names, logs)
            yield Workers(workers, logs)
        finally:
            app.conf.task_default_queue = previous_queue
            for worker in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.pid, signal.SIGTERM)
            for worker in workers:
                try:
                    worker.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(worker.pid, signal.SIGKILL)
                    worker.wait()


def _start_worker(hostname: str, log: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start a worker as the Procfile's `worker` line does, with the floor's tasks too."""
    with log.open("wb") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "helix_project", "worker",
             "--include", "bench.floor", "--loglevel", "WARNING",
             "--without-mingle", "--without-gossip", "--hostname", hostname],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def _wait_ready(workers: list[subprocess.Popen], names: list[str], logs: list[Path]) -> None:
    """Return once every worker answers a ping."""
    deadline = time.monotonic() + READY_TIMEOUT
    while len(app.control.ping(destination=names, timeout=0.5)) < len(names):
        if any(worker.poll() is not None for worker in workers) or time.monotonic() > deadline:
            raise RuntimeError("A benchmark worker did not start:\n" + _tail(logs, errors=False))


def _tail(logs: list[Path], lines: int = 10, *, errors: bool = True) -> str:
    """Return the last lines of each worker log (of those with warnings in it, if `errors`)."""
    tails = []
    for log in logs:
        text = log.read_text(errors="replace").splitlines()
        if not errors or any("ERROR" in line or "WARNING" in line for line in text):
            tails += [f"--- {log.name}", *text[-lines:]]
    return "\n".join(tails)
