"""Conversations in flight: many runs whose model takes a second a step, on the production layout.

Daphne and the Celery workers of `bench.steps` (two a core) run as the Procfile starts them (a
threads pool; database connections from a pool), on PostgreSQL and Redis. For each size N, N
sessions each run `bench-waiter` (3 steps, each a model reply streamed over 1 s, then a tool
call; the last answers), all started at once, while a WebSocket client follows some of them.
The ideal is N steps per second: every step waiting on its model at the same time. Reported
beside it:

- steps/s against that ideal, and against the saturation figure of `bench.steps` (steps with
  an instant model, all the machine can do) measured on the same workers in the same run:
  with many steps in flight the machine is CPU-bound, and waiting steps must not slow it.
  Saturation has no client, so each size runs a second time with none, for that row: the
  waiting alone differs (the clients' cost shows between the two runs);
- the overhead per step, its wall time less the model's second (checkpoint to checkpoint);
- how long a chunk takes to reach a WebSocket client: the first delta of each step, and all;
- the most database connections open at once, against what the pools allow;
- the workers' resident memory, and what one step in flight adds to it;
- how long the N starts took, and the CPU time a step cost: the workers', Daphne's, this
  process's (its starts and clients) and the whole machine's, against the same at saturation.
  The ratio of steps/s to saturation follows the ratio of the whole machine's CPU per step;
- the same steps given at once (`bench-waiter-instant`: 3-step runs, the same deltas and tool
  call, no wait, no clients) on the same workers. Against them, steps in flight show what
  waiting and the clients cost; against saturation, they show that too and what the waiter's
  shorter runs and longer replies cost beside saturation's 10-step runs;
- what the machine allows with no Helix code: the raw floor's waiting chains (`bench.floor`:
  the same 3 steps of a model streaming 10 deltas over 1 s, each delta appended as it arrives,
  no connection held while waiting, started from the same threads; no clients) at each N, and
  its 10-hop chains at saturation, on workers set up as ours, after ours. Ours are held
  against the issue's targets and, beside them, against the same ratios of what the floor
  reaches: at N=100 80% of the floor's steps/s, from N=500 on 90% of the floor's own share of
  its saturation. No client follows the floor's chains: those rows take ours' runs with
  none either, like against like. The floor the targets take runs as ours do, a chain's hops
  in one task (ours go on within a time slice, in flight and at saturation); a share of
  saturation compares only designs that run alike, since a hop a step costs less of a
  waiting step's CPU than of an instant one's: a Helix that did just what the floor with no
  hop does would miss a target held to the floor with a hop a step. That floor, a task a
  hop, is measured too and shown beside, with no target.
  The machine's speed drifts within minutes, so saturation, ours' and the floor's, is measured
  again after each size, and each size is held to the mean of the figures around it.

Then fairness: one worker with few threads runs a run of 1,000 quick steps and, started just
after it, 100 one-step runs; the time each short run takes is compared with the same runs on
their own. The time slice (`HELIX["STEP_TIME_SLICE_SECONDS"]`) bounds how long the long run
holds a thread before its next step goes to the back of the queue.
"""

import asyncio
import contextlib
import itertools
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
from django.db import connection, connections

from agents_app.runs.services import agent_session_create, agent_start
from bench import agents
from bench.floor import FloorTables, floor_start
from bench.harness import Options, Row, Table, percentile_ms
from bench.live import Server, connect_websocket, daphne, follow_stream
from bench.raw import connect
from bench.scaleout import signed_in_owner
from bench.steps import (
    WORKER_APPLICATION_NAME,
    WORKER_POOL,
    WORKER_PROCESSES,
    Workers,
    floor_steps_per_second,
    steps_per_second,
    wait_until_ended,
    watching_runs,
    workers,
)
from bench.streams import DAPHNE_APPLICATION_NAME, DAPHNE_POOL, daphne_env
from sessions_app.models import Checkpoint, Run

LEGEND = (
    "In flight: N sessions each running 3 steps of a model that streams its reply over 1 s, "
    f"on Daphne and {WORKER_PROCESSES} Celery workers as the Procfile starts them (threads pool, "
    "pooled connections), PostgreSQL and Redis; the ideal is N steps/s. The saturation figure is "
    "bench.steps' (an instant model) on the same workers in the same run; the same steps at "
    "once are the waiter's runs with its replies given without the wait."
)
SIZES, QUICK_SIZES = (100, 500, 1000), (20,)
# Threads per worker process: every step in flight has one, with room to spare.
THREADS_PER_WORKER = 300
CLIENTS = 100  # WebSocket clients following runs, at most.
# Threads starting the runs: many users at once. Each start waits on the database most of its
# time, so a few threads would make this process, not Helix, what limits the rate at N=1000.
START_THREADS = 16
RUN_TIMEOUT = 600.0
IDEAL_SHARE_TARGET = 0.8  # At N=100: steps/s at least this share of the ideal.
SATURATION_SHARE_TARGET = 0.9  # At larger N: at least this share of the saturation figure.
SATURATION_SESSIONS = 50
# The waiter's steps given at once: as many steps as saturation's runs take.
AT_ONCE_SESSIONS = SATURATION_SESSIONS * agents.STEPS_PER_RUN // agents.WAITER_STEPS
# Fairness: one worker with few threads, one long run, many one-step runs.
FAIR_THREADS = 4
SHORT_RUNS, QUICK_SHORT_RUNS = 100, 20
MARATHON_STEPS, QUICK_MARATHON_STEPS = agents.MARATHON_STEPS, 200


def run(options: Options) -> Iterator[Table]:
    """Yield the in-flight table, then the fairness table."""
    owner, cookie = signed_in_owner()
    sizes = QUICK_SIZES if options.quick else SIZES
    # Each side first warms up its workers, and as many pooled connections as saturation uses
    # (each prepares its statements after a few runs of each), as bench.steps does.
    warming = 1 if options.quick else SATURATION_SESSIONS
    env = {**daphne_env(connection.settings_dict), "HELIX_AGENTS": "bench.agents"}
    threads = {"HELIX_WORKER_CONCURRENCY": str(THREADS_PER_WORKER)}
    with workers(**threads) as running, daphne(env) as server:
        steps_per_second(owner, warming)
        steps = SATURATION_SESSIONS * agents.STEPS_PER_RUN
        with _CpuMeter(running, server, steps) as saturation_cpu:
            saturation = steps_per_second(owner, SATURATION_SESSIONS)
        with _CpuMeter(running, server, AT_ONCE_SESSIONS * agents.WAITER_STEPS) as at_once_cpu:
            at_once = steps_per_second(
                owner,
                AT_ONCE_SESSIONS,
                agents.INSTANT_WAITER_AGENT_TYPE,
                steps=agents.WAITER_STEPS,
            )
        # Each size twice: followed by the clients, then with none, as saturation and the
        # floor's chains run, for the rows held to those.
        pairs, saturations = _between_saturations(
            saturation,
            sizes,
            lambda size: (
                _in_flight(owner, cookie, server, running, size),
                _in_flight(owner, cookie, server, running, size, followers=0),
            ),
            lambda: steps_per_second(owner, SATURATION_SESSIONS),
        )
        results = [followed for followed, _ in pairs]
        unfollowed = [quiet for _, quiet in pairs]
    # The floor on workers of its own, set up alike: with ours' pools open beside its own, the
    # connections would outgrow PostgreSQL's default `max_connections`. First with no hop, as
    # ours run, then with a hop a step.
    with (
        connect(connection.settings_dict, like_django=False) as raw,
        FloorTables(raw) as floor,
        workers(**threads) as running,
    ):
        floors, floor_saturations = _floor_sizes(floor, running, sizes, warming, hops=False)
        hop_floors, hop_saturations = _floor_sizes(floor, running, sizes, warming, hops=True)
    baselines = _Baselines(
        saturation_cpu, at_once, at_once_cpu, saturations, floor_saturations, hop_saturations
    )
    yield _table(results, unfollowed, floors, hop_floors, baselines, options)
    yield _fairness_table(owner, options)


def _between_saturations[Measured](
    first: float,
    sizes: Sequence[int],
    measure: Callable[[int], Measured],
    saturate: Callable[[], float],
) -> tuple[list[Measured], list[float]]:
    """Measure each size, then saturation again; return what each size measured, and the
    saturation figures: `first`, then the one after each size.

    The machine's speed drifts, by half within minutes at times: a size is held to the
    saturation measured around it (`_around`), not to one measured minutes before.
    """
    measured, figures = [], [first]
    for size in sizes:
        measured.append(measure(size))
        figures.append(saturate())
    return measured, figures


def _floor_sizes(
    floor: FloorTables, running: Workers, sizes: Sequence[int], warming: int, *, hops: bool
) -> tuple[list["FloorInFlight"], list[float]]:
    """Warm the floor up, then measure its waiting chains at each size between its saturations
    (`_between_saturations`); with `hops=False` a chain's hops run in one task, as ours run."""
    floor_steps_per_second(floor, warming, hops=hops)  # This process's pool warms up too.
    _floor_in_flight(floor, running, START_THREADS, model_seconds=0, hops=hops)
    return _between_saturations(
        floor_steps_per_second(floor, SATURATION_SESSIONS, hops=hops),
        sizes,
        lambda size: _floor_in_flight(floor, running, size, hops=hops),
        lambda: floor_steps_per_second(floor, SATURATION_SESSIONS, hops=hops),
    )


def _around(figures: list[float]) -> list[float]:
    """Return, per size, the mean of the saturation figures measured just before and after it."""
    return [(before + after) / 2 for before, after in itertools.pairwise(figures)]


@dataclass
class _Baselines:
    """What workers do with nothing to wait on: saturation, the waiter's steps at once, and
    the raw floor's saturation. Saturation figures are measured first and after each size."""

    saturation_cpu: "_CpuMeter"  # Of ours' first saturation figure.
    at_once: float
    at_once_cpu: "_CpuMeter"
    saturations: list[float]
    # The raw floor's 10-hop chains, as many sessions: all hops in one task, as ours run; and
    # a task a hop.
    floor_saturations: list[float]
    hop_floor_saturations: list[float]


@dataclass
class InFlight:
    """What one size's run measured."""

    size: int
    steps_per_second: float
    overheads_ms: list[float]
    first_delta_ns: list[int]
    delta_ns: list[int]
    peak_connections: int
    idle_rss_kb: list[int]
    peak_rss_kb: list[int]
    resumes: int
    starting_seconds: float
    cpu: "_CpuMeter"


def _in_flight(
    owner, cookie: str, server: Server, running: Workers, size: int, followers: int = CLIENTS
) -> InFlight:
    """Start `size` waiter runs at once, follow `followers` of them over WebSocket; return what
    was measured."""
    session_ids = [
        agent_session_create(user=owner, agent_type=agents.WAITER_AGENT_TYPE).session_id
        for _ in range(size)
    ]
    followed = session_ids[:followers]
    cpu = _CpuMeter(running, server, size * agents.WAITER_STEPS)
    with _Sampler(running) as sampler:
        idle = sampler.rss_kb()
        clients, starting, elapsed = asyncio.run(
            _run_and_follow(owner, cookie, server, session_ids, followed, cpu)
        )
    run_ids = list(Run.objects.filter(session_id__in=session_ids).values_list("id", flat=True))
    return InFlight(
        size=size,
        steps_per_second=size * agents.WAITER_STEPS / elapsed,
        overheads_ms=_overheads_ms(run_ids),
        first_delta_ns=[ns for client in clients for ns in client.first_deltas],
        delta_ns=[ns for client in clients for ns in client.deltas],
        peak_connections=sampler.peak_connections,
        idle_rss_kb=idle,
        peak_rss_kb=sampler.peak_rss_kb,
        resumes=sum(client.resumed for client in clients),
        starting_seconds=starting,
        cpu=cpu,
    )


@dataclass
class FloorInFlight:
    """What the raw floor's waiting chains measured at one size."""

    steps_per_second: float
    starting_seconds: float
    cpu: "_CpuMeter"


def _floor_in_flight(
    floor: FloorTables,
    running: Workers,
    size: int,
    model_seconds: float = agents.MODEL_SECONDS,
    *,
    hops: bool,
) -> FloorInFlight:
    """Start `size` raw waiting chains as ours start, wait for all to end; return the figures.

    With `hops=False` a chain's hops run in one task, as ours go on within a time slice.
    """
    session_ids = floor.new_sessions(size)
    with _CpuMeter(running, None, size * agents.WAITER_STEPS) as cpu:
        began = time.perf_counter()
        _from_start_threads(
            lambda session_id: floor_start(
                session_id, agents.WAITER_STEPS, model_seconds, hops=hops
            ),
            session_ids,
        )
        starting = time.perf_counter() - began
        wait_until_ended(session_ids, floor.ended_among, timeout=RUN_TIMEOUT)
        elapsed = time.perf_counter() - began
    return FloorInFlight(size * agents.WAITER_STEPS / elapsed, starting, cpu)


@dataclass
class _Client:
    """A WebSocket client and what it measured: each delta's and each step's first delta's delay."""

    url: str
    deltas: list[int] = field(default_factory=list)
    first_deltas: list[int] = field(default_factory=list)
    seen_steps: set[int] = field(default_factory=set)
    resumed: int = 0

    def take(self, event: dict[str, Any], arrived: int) -> bool:
        """Record a text delta's delay; return whether the event ended the stream."""
        if event["type"] != "chunk":
            return True
        chunk = event["chunk"]
        if chunk["type"] == "text_delta":
            delay = arrived - chunk["timestamp"] * 10**6
            self.deltas.append(delay)
            if chunk["step"] not in self.seen_steps:
                self.seen_steps.add(chunk["step"])
                self.first_deltas.append(delay)
        return False


async def _run_and_follow(
    owner,
    cookie: str,
    server: Server,
    session_ids: list[str],
    followed: list[str],
    cpu: "_CpuMeter",
) -> tuple[list[_Client], float, float]:
    """Connect the clients, start every run, wait for all to end; `cpu` measures the runs.

    Return the clients, the seconds the starts took and the seconds until every run ended.
    """
    clients = [_Client(server.websocket_url(s)) for s in followed]
    sockets = await asyncio.gather(
        *(connect_websocket(server, f"{client.url}?fromSequence=0", cookie) for client in clients)
    )
    following = asyncio.gather(
        *(_follow(server, cookie, s, c) for s, c in zip(sockets, clients, strict=True))
    )
    with cpu:
        started = time.perf_counter()
        run_ids = await asyncio.to_thread(_start_all, owner, session_ids)
        starting = time.perf_counter() - started
        await asyncio.to_thread(_wait_for_runs, run_ids)
        elapsed = time.perf_counter() - started
    await asyncio.wait_for(following, 60)
    return clients, starting, elapsed


async def _follow(server: Server, cookie: str, socket: Any, client: _Client) -> None:
    """Record when each delta arrives, less when it was written, until the stream ends."""
    client.resumed = await follow_stream(
        server, client.url, cookie, client.take, clock=time.time_ns, socket=socket
    )


def _start_all(owner, session_ids: list[str]) -> list[str]:
    """Start a waiter run on every session; return the runs' ids."""

    def start(session_id: str) -> str:
        try:
            return agent_start(
                user=owner,
                agent_type=agents.WAITER_AGENT_TYPE,
                message="Take your time.",
                session_id=session_id,
            ).run_id
        finally:
            connections.close_all()

    return _from_start_threads(start, session_ids)


def _from_start_threads[Started](
    start: Callable[[str], Started], session_ids: list[str]
) -> list[Started]:
    """Call `start` for every session from `START_THREADS` threads, as many users would."""
    with ThreadPoolExecutor(max_workers=START_THREADS) as pool:
        return list(pool.map(start, session_ids))


def _wait_for_runs(run_ids: list[str]) -> None:
    """Return once every run ended; raise if one failed or they take too long."""
    with watching_runs() as ended_among:
        wait_until_ended(run_ids, ended_among, timeout=RUN_TIMEOUT)


def _overheads_ms(run_ids: list[str]) -> list[float]:
    """Return each step's wall time less the model's, from the runs' checkpoints."""
    times: dict[str, list[float]] = {}
    rows = Checkpoint.objects.filter(run_id__in=run_ids).order_by("run_id", "step_count")
    for run_id, created_at in rows.values_list("run_id", "created_at"):
        times.setdefault(run_id, []).append(created_at.timestamp())
    return [
        (after - before - agents.MODEL_SECONDS) * 1000
        for stamps in times.values()
        for before, after in itertools.pairwise(stamps)
    ]


class _Sampler:
    """A thread sampling the database's connections and the workers' memory until it stops."""

    def __init__(self, running: Workers) -> None:
        self.pids = [process.pid for process in running.processes]
        self.peak_connections = 0
        self.peak_rss_kb = [0] * len(self.pids)
        self._stop = threading.Event()
        self._database = connect(connection.settings_dict, like_django=False)
        self._name = connection.settings_dict["NAME"]

    def __enter__(self) -> "_Sampler":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self._database.close()

    def rss_kb(self) -> list[int]:
        """Return each worker's resident memory now, in kB."""
        return [_rss_kb(pid) for pid in self.pids]

    def _run(self) -> None:
        # Helix's own: the workers' and Daphne's, not the benchmark's (its polls, its starts).
        count = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = %s AND application_name = ANY(%s)"
        )
        names = [WORKER_APPLICATION_NAME, DAPHNE_APPLICATION_NAME]
        while not self._stop.wait(0.1):
            with contextlib.suppress(psycopg.Error):
                (open_now,) = self._database.execute(count, [self._name, names]).fetchone()
                self.peak_connections = max(self.peak_connections, open_now)
            self.peak_rss_kb = [
                max(a, b) for a, b in zip(self.peak_rss_kb, self.rss_kb(), strict=True)
            ]


class _CpuMeter:
    """The CPU time a block took, per step it ran: the workers', Daphne's (if any), this
    process's, PostgreSQL's and Redis's (their processes on this machine), all.

    Steps per second move with whatever else the machine runs (its virtual CPUs are shared);
    the CPU a step costs moves less, so it is what tells two designs apart. The whole machine's
    time leaves out what the hypervisor took (steal). PostgreSQL's is that of its processes
    (the server and a backend per connection) that live through the block or start in it: the
    pools keep theirs open, and a backend that ends within the block leaves its time out.
    """

    def __init__(self, running: Workers, server: Server | None, steps: int) -> None:
        self.pids = {"workers": [p.pid for p in running.processes]}
        if server is not None:
            self.pids["Daphne"] = [server.pid]
        self.steps = steps

    def __enter__(self) -> "_CpuMeter":
        self._began = self._now()
        return self

    def __exit__(self, *exc_info) -> None:
        ended = self._now()
        self._spent = {name: _spent(self._began[name], ended[name]) for name in ended}

    def __str__(self) -> str:
        parts = ", ".join(f"{name} {s * 1000 / self.steps:.1f}" for name, s in self._spent.items())
        return f"CPU ms per step: {parts}"

    def _now(self) -> dict[str, dict[int, float]]:
        """Return, per name, the CPU seconds each of its processes has taken (pid 0: one
        figure for all)."""
        tick = os.sysconf("SC_CLK_TCK")
        times = {
            name: {pid: _cpu_ticks(pid) / tick for pid in pids} for name, pids in self.pids.items()
        }
        own = os.times()
        times["benchmark"] = {0: own.user + own.system}
        for name, command in (("PostgreSQL", "postgres"), ("Redis", "redis-server")):
            times[name] = {pid: ticks / tick for pid, ticks in _ticks_of_running(command).items()}
        with open("/proc/stat") as stat:
            user, nice, system, _idle, _iowait, irq, softirq = map(
                int, stat.readline().split()[1:8]
            )
        times["machine"] = {0: (user + nice + system + irq + softirq) / tick}
        return times


def _spent(began: dict[int, float], ended: dict[int, float]) -> float:
    """Return the CPU seconds taken between two readings by the processes alive at the end."""
    return sum(seconds - began.get(pid, 0.0) for pid, seconds in ended.items())


def _ticks_of_running(command: str) -> dict[int, int]:
    """Return the CPU time (`_cpu_ticks`) of each of this machine's processes running `command`;
    one that ends while it is read is left out."""
    ticks = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry.name}/comm") as comm:
                if comm.read().strip() == command:
                    ticks[int(entry.name)] = _cpu_ticks(int(entry.name))
    return ticks


def _cpu_ticks(pid: int) -> int:
    """Return the CPU time a process has taken, user and system, in clock ticks."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _against_the_ideal(size: int, options: Options) -> bool:
    """Return whether steps/s at `size` are held to the ideal (else to saturation)."""
    return size <= 100 or options.quick


def _table(
    results: list[InFlight],
    unfollowed: list[InFlight],
    floors: list[FloorInFlight],
    hop_floors: list[FloorInFlight],
    baselines: _Baselines,
    options: Options,
) -> Table:
    """Return the in-flight table; `floors` ran as ours run (no hop), `hop_floors` a task a hop."""
    rows: list[Row] = []
    notes = []
    allowed = WORKER_PROCESSES * WORKER_POOL + DAPHNE_POOL
    for result, quiet, floor, hop_floor, saturation, floor_saturation, hop_saturation in zip(
        results,
        unfollowed,
        floors,
        hop_floors,
        _around(baselines.saturations),
        _around(baselines.floor_saturations),
        _around(baselines.hop_floor_saturations),
        strict=True,
    ):
        n = result.size
        if _against_the_ideal(n, options):
            rows += [
                Row(
                    metric=f"N={n}: share of the ideal {n} steps/s",
                    orm=result.steps_per_second / n,
                    higher_is_better=True,
                    target=IDEAL_SHARE_TARGET,
                ),
                Row(
                    metric=f"N={n}: steps/s vs the raw floor's, neither followed",
                    orm=quiet.steps_per_second,
                    strict_raw=floor.steps_per_second,
                    higher_is_better=True,
                    target=1 / IDEAL_SHARE_TARGET,
                    precision=0,
                ),
            ]
        else:
            rows += [
                Row(
                    metric=f"N={n}: steps/s vs saturation, no client",
                    orm=quiet.steps_per_second,
                    lenient_raw=baselines.at_once,
                    strict_raw=saturation,
                    higher_is_better=True,
                    target=1 / SATURATION_SHARE_TARGET,
                    precision=0,
                ),
                Row(
                    metric=f"N={n}: share of saturation vs the raw floor's, neither followed",
                    orm=quiet.steps_per_second / saturation,
                    strict_raw=floor.steps_per_second / floor_saturation,
                    higher_is_better=True,
                    target=1 / SATURATION_SHARE_TARGET,
                ),
                Row(
                    metric=f"N={n}: steps/s vs the raw floor's, neither followed",
                    orm=quiet.steps_per_second,
                    strict_raw=floor.steps_per_second,
                    higher_is_better=True,
                    precision=0,
                ),
                # For reference: the floor with a hop a step, whose saturation is lower.
                Row(
                    metric=f"N={n}: share of saturation vs the floor's with a hop a step",
                    orm=quiet.steps_per_second / saturation,
                    strict_raw=hop_floor.steps_per_second / hop_saturation,
                    higher_is_better=True,
                ),
            ]
        in_flight_per_worker = n / WORKER_PROCESSES
        per_step_kb = statistics.mean(
            (peak - idle) / in_flight_per_worker
            for peak, idle in zip(result.peak_rss_kb, result.idle_rss_kb, strict=True)
        )
        rows += [
            Row(
                metric=f"N={n}: steps/s, clients following",
                orm=result.steps_per_second,
                precision=0,
            ),
            Row(metric=f"N={n}: overhead p50 ms", orm=_quantile(result.overheads_ms, 0.5)),
            Row(metric=f"N={n}: overhead p99 ms", orm=_quantile(result.overheads_ms, 0.99)),
            Row(metric=f"N={n}: first delta p50 ms", orm=percentile_ms(result.first_delta_ns, 50)),
            Row(metric=f"N={n}: first delta p99 ms", orm=percentile_ms(result.first_delta_ns, 99)),
            Row(metric=f"N={n}: every delta p99 ms", orm=percentile_ms(result.delta_ns, 99)),
            Row(
                metric=f"N={n}: peak database connections",
                orm=result.peak_connections,
                target=allowed,
                precision=0,
            ),
        ]
        notes.append(
            f"N={n}: workers' resident memory idle {', '.join(_mb(k) for k in result.idle_rss_kb)}"
            f", peak {', '.join(_mb(k) for k in result.peak_rss_kb)}; about {per_step_kb:.0f} kB "
            f"per step in flight; {result.steps_per_second:.1f} steps/s (saturation around it: "
            f"{saturation:.0f}); "
            f"{result.resumes} client reconnections; the starts took "
            f"{result.starting_seconds:.2f} s; {result.cpu}. "
            + _floor_note("The raw floor (no hop)", n, floor, floor_saturation)
            + " "
            + _floor_note("With a hop a step", n, hop_floor, hop_saturation)
        )
        notes.append(
            f"N={n} with no client following: {quiet.steps_per_second:.1f} steps/s; "
            f"the starts took {quiet.starting_seconds:.2f} s; {quiet.cpu}"
        )
    notes += [
        f"Saturation (bench.steps, {SATURATION_SESSIONS} sessions, an instant model): "
        f"{baselines.saturations[0]:.0f} steps/s on the same workers; {baselines.saturation_cpu}. "
        f"Then after each size: {_figures(baselines.saturations[1:])} steps/s. A size is held "
        "to the mean of the figures just before and after it, as the floor's sizes to its own.",
        f"The same steps at once ({AT_ONCE_SESSIONS} sessions of "
        f"{agents.INSTANT_WAITER_AGENT_TYPE}, the waiter's {agents.WAITER_STEPS}-step runs "
        f"without the wait): {baselines.at_once:.0f} steps/s; {baselines.at_once_cpu}. The "
        "middle ratio, these over steps in flight with no client, is what waiting costs.",
        f"The raw floor's saturation (bench.floor's 10-hop chains, {SATURATION_SESSIONS} "
        f"sessions), each chain's hops in one task as ours run: "
        f"{_figures(baselines.floor_saturations)} steps/s (first, then after each size); with "
        f"a task a hop: {_figures(baselines.hop_floor_saturations)}; on workers set up as ours, "
        "started after ours. Its waiting chains have no clients; the rows against it hold "
        "ours to the issue's ratios of what the floor reaches, the floor run as ours run (a "
        "share of saturation compares designs that run alike). Each size runs twice, followed "
        "by the clients, then with none: the rows held to a figure measured with no client "
        "(saturation, the same steps at once, the floor) take the second.",
        f"Connections allowed: {WORKER_PROCESSES} workers x {WORKER_POOL} + Daphne "
        f"{DAPHNE_POOL} = {allowed}; the benchmark's own are not counted.",
        f"Workers: {WORKER_PROCESSES} processes, HELIX_WORKER_CONCURRENCY={THREADS_PER_WORKER}; "
        f"{CLIENTS} WebSocket clients at most; overhead = step wall time less the model's "
        f"{agents.MODEL_SECONDS:.0f} s, checkpoint to checkpoint (queueing included).",
    ]
    return Table(
        title="Conversations in flight",
        rows=rows,
        notes=notes,
        columns=("Helix", "same steps at once", "saturation"),
    )


def _floor_note(name: str, n: int, floor: FloorInFlight, saturation: float) -> str:
    """Return a floor's figures at size `n`, its saturation around it given."""
    return (
        f"{name}: {floor.steps_per_second:.1f} steps/s ({floor.steps_per_second / n:.2f} of "
        f"the ideal, {floor.steps_per_second / saturation:.2f} of its saturation, "
        f"{saturation:.0f} around it); its starts took {floor.starting_seconds:.2f} s; "
        f"{floor.cpu}."
    )


def _fairness_table(owner, options: Options) -> Table:
    """Time short runs alone, then beside a long run, on one worker with few threads."""
    shorts = QUICK_SHORT_RUNS if options.quick else SHORT_RUNS
    steps = QUICK_MARATHON_STEPS if options.quick else MARATHON_STEPS
    with workers(1, HELIX_WORKER_CONCURRENCY=str(FAIR_THREADS), HELIX_MARATHON_STEPS=str(steps)):
        steps_per_second(owner, 1)
        alone = _short_runs_ms(owner, shorts)
        marathon = agent_start(
            user=owner, agent_type=agents.MARATHON_AGENT_TYPE, message="Go on and on."
        )
        time.sleep(1.0)  # It is under way, holding a thread, when the short runs start.
        beside = _short_runs_ms(owner, shorts)
        _wait_for_runs([marathon.run_id])
    p99_alone, p99_beside = _quantile(alone, 0.99), _quantile(beside, 0.99)
    return Table(
        title="Fairness: one-step runs beside a long run",
        rows=[
            Row(metric="short run p50 ms, alone", orm=_quantile(alone, 0.5)),
            Row(metric="short run p99 ms, alone", orm=p99_alone),
            Row(metric="short run p50 ms, beside the long run", orm=_quantile(beside, 0.5)),
            Row(metric="short run p99 ms, beside the long run", orm=p99_beside),
        ],
        notes=[
            f"One worker with {FAIR_THREADS} threads; {shorts} runs of one step started at once, "
            f"alone, then 1 s after a run of {steps} quick steps began. A short run's time is "
            "from its start to its end (run records).",
        ],
        columns=("Helix", "-", "-"),
    )


def _short_runs_ms(owner, count: int) -> list[float]:
    """Start `count` one-step runs at once; return each one's milliseconds to its end."""
    run_ids = [
        agent_start(user=owner, agent_type=agents.ONCE_AGENT_TYPE, message="Once.").run_id
        for _ in range(count)
    ]
    _wait_for_runs(run_ids)
    rows = Run.objects.filter(pk__in=run_ids).values_list("started_at", "completed_at")
    return [(done - began).total_seconds() * 1000 for began, done in rows]


def _quantile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def _figures(values: list[float]) -> str:
    return ", ".join(f"{value:.0f}" for value in values)


def _mb(kb: int) -> str:
    return f"{kb / 1024:.0f} MB"
