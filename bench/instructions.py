"""Instructions a run costs the process that takes it, counted by valgrind: ours against the floor.

The host's speed drifts by a fifth within minutes, which hides a change worth a few percent of
a step's CPU in any timing. Instructions do not drift: callgrind counts every instruction a
process runs, its threads' too (the chunk flusher, the doorbell's sender), whatever else the
machine does (one process counted twice: two parts in a hundred thousand apart; this
benchmark's figures, from one run to the next, a percent or two). Each side
(`bench.counted`) runs in a process of its own under callgrind, once with a few sessions' runs
and once with more: it starts them all, marks the count, then takes them all. The differences
between the two processes, over the extra runs, are what a start and a run's steps cost,
without the interpreter's start or Django's set-up.

A run is the in-flight benchmark's, with its replies given at once: ours, a start
(`agent_start`) and 3 steps of `bench-waiter-instant` (a reply of ten deltas and a tool call
each, but the last), taken in one thread; the floor's, its start and its 3 waiting hops with no
wait (`bench.floor`: a claim, a history read, ten appends and a commit each), in one thread.
Not counted: PostgreSQL's and Redis's work, the kernel's, and a worker's Celery layer around a
task. Valgrind runs the interpreter some fifty times slower; the counts do not change with it.
"""

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection

from agents_app.runs.services import agent_session_create
from bench import agents, counted
from bench.floor import FloorTables
from bench.harness import Options, Row, Table
from bench.raw import connect
from bench.scaleout import signed_in_owner
from bench.steps import own_queue
from bench.streams import daphne_env

LEGEND = (
    "Instructions: what a run (its start and 3 steps, replies given at once) costs the process "
    "that takes it, counted by valgrind's callgrind in one thread; the raw floor's run of the "
    "same 3 steps likewise. PostgreSQL's and Redis's work is not counted."
)
# Runs before those counted, in both processes of a side: each connection prepares a statement
# after psycopg's 5 uses of it, and the counted runs should find theirs prepared.
WARM_RUNS = 6
COUNTED_RUNS, QUICK_COUNTED_RUNS = 30, 4
_TOTALS = re.compile(r"^totals: (\d+)$", re.M)


def run(options: Options) -> Iterator[Table]:
    """Yield the table of instructions a start and a step cost, ours against the floor's."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("Instructions skipped: no valgrind on this machine.")
        return
    extra = QUICK_COUNTED_RUNS if options.quick else COUNTED_RUNS
    owner, _ = signed_in_owner()
    with (
        connect(connection.settings_dict, like_django=False) as raw,
        FloorTables(raw) as floor,
        own_queue("bench-counted") as queue,  # The starts' step tasks; no worker reads it.
    ):
        ours = _per_run(valgrind, "ours", owner, extra, queue, lambda n: _sessions(owner, n))
        theirs = _per_run(valgrind, "floor", owner, extra, queue, floor.new_sessions)
    steps = agents.WAITER_STEPS
    rows = [
        Row(metric="M instructions per start", orm=ours[0] / 1e6, strict_raw=theirs[0] / 1e6),
        Row(
            metric="M instructions per step",
            orm=ours[1] / steps / 1e6,
            strict_raw=theirs[1] / steps / 1e6,
        ),
        Row(metric="M instructions per run", orm=sum(ours) / 1e6, strict_raw=sum(theirs) / 1e6),
    ]
    yield Table(
        title="Instructions a run costs its process, counted",
        rows=rows,
        notes=[
            f"A run: its start, then its {steps} steps, in one thread. Each figure is the "
            f"difference between a process that took {WARM_RUNS} runs and one that took "
            f"{WARM_RUNS + extra}, over the {extra} more (callgrind's count of the process, "
            "its threads included).",
        ],
        columns=("Helix", "-", "raw floor"),
    )


def count_instructions(valgrind: str, command: list[str], env: dict[str, str]) -> list[int]:
    """Return how many instructions `command` ran, counted by callgrind, in parts: before each
    call it made to `counted.MARK`, and after the last. Raise if it failed."""
    with tempfile.TemporaryDirectory(prefix="helix-bench-callgrind-") as folder:
        out = Path(folder) / "callgrind.out"
        done = subprocess.run(
            [
                valgrind,
                "--tool=callgrind",
                "--cache-sim=no",
                f"--dump-before={counted.MARK}",
                f"--callgrind-out-file={out}",
                *command,
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{command} failed under valgrind:\n{done.stderr[-3000:]}")
        # The parts' dumps are numbered in order; the last part is the file without a number.
        dumps = sorted(out.parent.glob(f"{out.name}.*"), key=lambda path: int(path.suffix[1:]))
        return [_total(dump) for dump in [*dumps, out]]


def _total(dump: Path) -> int:
    """Return the count a callgrind dump holds."""
    found = _TOTALS.search(dump.read_text())
    if found is None:
        raise RuntimeError(f"No count in callgrind's dump {dump}")
    return int(found.group(1))


def _per_run(
    valgrind: str,
    side: str,
    owner: AbstractBaseUser,
    extra: int,
    queue: str,
    sessions: Callable[[int], list[str]],
) -> tuple[float, float]:
    """Return the instructions a start and a run's steps of `side` cost: two processes at once,
    the second taking `extra` more runs than the first."""
    env = {
        **daphne_env(connection.settings_dict),
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "HELIX_AGENTS": "bench.agents",
        "PGAPPNAME": "helix-bench-counted",
    }
    with tempfile.TemporaryDirectory(prefix="helix-bench-counted-") as folder:
        commands = []
        for total in (WARM_RUNS, WARM_RUNS + extra):
            ids = Path(folder) / f"{side}-{total}"
            ids.write_text("\n".join(sessions(total)))
            commands.append([sys.executable, "-m", "bench.counted", side, str(owner.pk), str(ids)])
        with ThreadPoolExecutor(max_workers=2) as pool:
            few, many = pool.map(
                lambda command: count_instructions(valgrind, command, env), commands
            )
    if len(few) != 2 or len(many) != 2:
        raise RuntimeError(f"Expected the starts' and the runs' counts, got {few} and {many}")
    (few_starts, few_runs), (many_starts, many_runs) = few, many
    return (many_starts - few_starts) / extra, (many_runs - few_runs) / extra


def _sessions(owner: AbstractBaseUser, count: int) -> list[str]:
    """Make `count` sessions of the waiter's instant steps for `owner`; return their ids."""
    return [
        agent_session_create(user=owner, agent_type=agents.INSTANT_WAITER_AGENT_TYPE).session_id
        for _ in range(count)
    ]
