"""Reaping: `reap_expired_sessions` over 100,000 expired sessions against a raw batched delete.

Every round restores the same data set (each session with a finished run, two messages and a
stream of three chunks, all expired) from template tables, then one side clears it; the sides
take turns, in rotating order. Ours runs the service as `manage.py cleanup_expired_sessions`
does, in both modes: `--delete` (sessions and their streams go) and the default (sessions,
runs and streams fail). The raw side deletes with one hand-written statement per batch on
psycopg: `SELECT ... FOR UPDATE SKIP LOCKED` of a batch, the sessions (their rows below them
by cascade) and their streams (their chunks by cascade). Both sides use the same batch size.
Each of our batches is one transaction, so its duration bounds how long it holds its locks.
"""

import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import psycopg
from django.db import connection
from django.utils import timezone

from agents_app.operations.reaping import DEFAULT_BATCH_SIZE, ReapReport, reap_expired_sessions
from bench.harness import Options, Row, Table, percentile_ms
from bench.raw import connect
from sessions_app import models
from streams_app.models import Stream, StreamChunk

LEGEND = (
    "Reaping: reap_expired_sessions over expired sessions (each with a run, two messages and a "
    "stream of three chunks), in delete mode and in the default fail mode, against a raw "
    "batched delete on psycopg (one statement a batch, the same batch size), each side on the "
    "same data set restored before it, in rotating order. Lock p99 is the 99th percentile of "
    "our batch transactions' durations."
)
SESSIONS, QUICK_SESSIONS = 100_000, 5_000
ROUNDS, QUICK_ROUNDS = 3, 1
RATIO_TARGET = 3.0
LOCK_P99_TARGET_MS = 50.0
# Parents before children, so restoring never breaks a foreign key.
TABLES = (models.AgentSession, models.Run, models.Message, Stream, StreamChunk)

RAW_BATCH = """
WITH doomed AS (
    SELECT id, stream_id FROM sessions_app_agentsession
    WHERE expires_at <= now() ORDER BY expires_at, id LIMIT %s FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM sessions_app_agentsession USING doomed
    WHERE sessions_app_agentsession.id = doomed.id RETURNING doomed.stream_id
)
DELETE FROM streams_app_stream WHERE id IN (SELECT stream_id FROM gone)
"""


def run(options: Options) -> Iterator[Table]:
    """Yield the reaping table: seconds to clear the data set, and our batches' lock p99."""
    sessions = QUICK_SESSIONS if options.quick else SESSIONS
    rounds = QUICK_ROUNDS if options.quick else ROUNDS
    _build(sessions)
    try:
        with connect(connection.settings_dict, like_django=False) as raw:
            seconds: dict[str, list[float]] = {"delete": [], "fail": [], "raw": []}
            batches: dict[str, list[int]] = {"delete": [], "fail": []}
            sides: dict[str, Callable[[], float]] = {
                "delete": lambda: _ours(sessions, batches["delete"], delete=True),
                "fail": lambda: _ours(sessions, batches["fail"], delete=False),
                "raw": lambda: _raw(raw, sessions),
            }
            names = list(sides)
            for round_ in range(rounds):
                for name in names[round_ % 3 :] + names[: round_ % 3]:
                    _restore()
                    seconds[name].append(sides[name]())
            _restore_nothing()
    finally:
        _drop_templates()
    raw_best = min(seconds["raw"])
    rows = [
        Row(
            metric=f"{mode} s",
            orm=min(seconds[mode]),
            strict_raw=raw_best,
            target=RATIO_TARGET,
        )
        for mode in ("delete", "fail")
    ]
    rows += [
        Row(
            metric=f"{mode} lock",
            orm=percentile_ms(batches[mode], 99),
            target=LOCK_P99_TARGET_MS,
        )
        for mode in ("delete", "fail")
    ]
    yield Table(
        title=f"Reaping {sessions:,} expired sessions, batches of {DEFAULT_BATCH_SIZE} "
        f"(seconds, best of {rounds}; lock: p99 ms of a batch transaction)",
        rows=rows,
        notes=[
            "batch ms p50 / p99: "
            + ", ".join(
                f"{mode} {percentile_ms(ns, 50):.1f} / {percentile_ms(ns, 99):.1f}"
                for mode, ns in batches.items()
            ),
            "fail mode writes more than the raw delete (failed sessions, runs and streams stay)",
        ],
        columns=("ours", "-", "raw delete"),
    )


def _ours(sessions: int, batch_ns: list[int], *, delete: bool) -> float:
    """Reap every expired session with the service; record each batch's duration."""
    last = time.perf_counter_ns()

    def batch_done(report: ReapReport) -> None:
        nonlocal last
        now = time.perf_counter_ns()
        batch_ns.append(now - last)
        last = now

    started = time.perf_counter()
    report = reap_expired_sessions(delete=delete, progress=batch_done)
    elapsed = time.perf_counter() - started
    if len(report.reaped) != sessions:
        raise RuntimeError(f"reaped {len(report.reaped)} of {sessions} expired sessions")
    return elapsed


def _raw(raw: psycopg.Connection, sessions: int) -> float:
    """Delete every expired session and its stream by hand, a batch per statement."""
    started = time.perf_counter()
    deleted = 0
    while True:
        with raw.transaction(), raw.cursor() as cursor:
            cursor.execute(RAW_BATCH, [DEFAULT_BATCH_SIZE])
            if not cursor.rowcount:
                break
            deleted += cursor.rowcount
    elapsed = time.perf_counter() - started
    if deleted != sessions:
        raise RuntimeError(f"the raw delete took {deleted} of {sessions} expired sessions")
    return elapsed


def _build(sessions: int) -> None:
    """Create the data set once with the ORM, then keep a copy of each table to restore from."""
    expired = timezone.now() - timedelta(days=1)
    for first in range(0, sessions, 5_000):
        ids = [f"reap-{n:07}" for n in range(first, min(first + 5_000, sessions))]
        models.AgentSession.objects.bulk_create(
            models.AgentSession(id=i, agent_type="bench", stream_id=f"st-{i}", expires_at=expired)
            for i in ids
        )
        models.Run.objects.bulk_create(
            models.Run(id=f"run-{i}", session_id=i, turn=1, status="completed") for i in ids
        )
        models.Message.objects.bulk_create(
            models.Message(id=f"m{n}-{i}", session_id=i, sequence=n, role=role, content="hello")
            for i in ids
            for n, role in ((1, "user"), (2, "assistant"))
        )
        Stream.objects.bulk_create(Stream(id=f"st-{i}", agent_type="bench") for i in ids)
        StreamChunk.objects.bulk_create(
            StreamChunk(
                stream_id=f"st-{i}", sequence=n, step=1, type="text_delta", chunk={"delta": "x"}
            )
            for i in ids
            for n in (1, 2, 3)
        )
    with connection.cursor() as cursor:
        for model in TABLES:
            table = model._meta.db_table
            cursor.execute(
                f"CREATE UNLOGGED TABLE bench_{table} AS SELECT {_columns(model)} FROM {table}"
            )
        cursor.execute("ANALYZE")


def _restore() -> None:
    """Empty the tables, then fill them from the copies."""
    _restore_nothing()
    with connection.cursor() as cursor:
        for model in TABLES:
            table, columns = model._meta.db_table, _columns(model)
            cursor.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM bench_{table}")


def _restore_nothing() -> None:
    """Empty the tables the data set fills."""
    tables = ", ".join(model._meta.db_table for model in TABLES)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {tables} CASCADE")


def _drop_templates() -> None:
    """Drop the copies."""
    with connection.cursor() as cursor:
        for model in TABLES:
            cursor.execute(f"DROP TABLE IF EXISTS bench_{model._meta.db_table}")


def _columns(model: type) -> str:
    """Return the model's column names, for a copy that leaves out generated columns."""
    return ", ".join(f'"{field.column}"' for field in model._meta.concrete_fields)
