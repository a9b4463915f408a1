"""The raw floor of an agent step: a bare Celery task chain whose hops run a step's least SQL.

Each hop is what any durable, streaming step on Celery must do at the least, written with
psycopg on tables of its own: take the session's lease and read its state, read the history,
append five stream chunks (each its own statement, as deltas arrive), then commit two
messages, the state, a checkpoint and two usage rows in one transaction that frees the lease,
and enqueue the next hop. No Django, no validation, no model or tool, no notifications: what
our step costs beyond this is our own overhead.

The waiting floor is the same chain for steps whose model streams its reply over a while, as
the in-flight benchmark's does: a start commits the user's message and enqueues the first hop;
each hop appends one chunk per delta as it arrives, on its own deadline, and holds no
connection while it waits (a thousand hops in flight share the pool).

`floor_run` and `floor_waiting_run` run every hop of a chain in one task, with no broker hop
between them, as our steps go on within a time slice: the floor of a step that needs no
hand-over.

The workers import this module (`--include`); `FloorTables` creates and drops the tables.
"""

import json
import threading
import time
import uuid
from typing import Any

import psycopg
from celery import shared_task
from django.db import connection
from psycopg_pool import ConnectionPool

CHUNKS_PER_STEP = 5
DELTAS_PER_REPLY = 10  # The waiting floor's: one every tenth of the model's time.
_TABLES = ("bench_floor_session", "bench_floor_message", "bench_floor_chunk", "bench_floor_other")
_SCHEMA = """
CREATE TABLE bench_floor_session (
    id text PRIMARY KEY, version integer NOT NULL, lease_holder text NOT NULL,
    lease_expires_at timestamptz, message_count integer NOT NULL, last_sequence integer NOT NULL,
    state jsonb NOT NULL, done boolean NOT NULL);
CREATE TABLE bench_floor_message (
    session_id text NOT NULL, sequence integer NOT NULL, role text NOT NULL, content text NOT NULL,
    PRIMARY KEY (session_id, sequence));
CREATE TABLE bench_floor_chunk (
    session_id text NOT NULL, sequence integer NOT NULL, chunk jsonb NOT NULL,
    PRIMARY KEY (session_id, sequence));
CREATE TABLE bench_floor_other (
    id bigserial PRIMARY KEY, session_id text NOT NULL, kind text NOT NULL, body jsonb NOT NULL);
"""
_CLAIM = (
    "UPDATE bench_floor_session SET version = version + 1, lease_holder = %s, "
    "lease_expires_at = now() + interval '60 seconds' "
    "WHERE id = %s AND (lease_holder = '' OR lease_expires_at <= now()) RETURNING state"
)
_HISTORY = "SELECT role, content FROM bench_floor_message WHERE session_id = %s ORDER BY sequence"
_APPEND = (
    "WITH reserved AS (UPDATE bench_floor_session SET last_sequence = last_sequence + 1 "
    "WHERE id = %s RETURNING last_sequence) "
    "INSERT INTO bench_floor_chunk SELECT %s, last_sequence, %s FROM reserved"
)
_START = (
    "WITH counted AS (UPDATE bench_floor_session SET message_count = message_count + 1 "
    "WHERE id = %s RETURNING message_count) "
    "INSERT INTO bench_floor_message SELECT %s, message_count, 'user', %s FROM counted"
)
_LOCK = "SELECT version, message_count FROM bench_floor_session WHERE id = %s FOR UPDATE"
_MESSAGES = "INSERT INTO bench_floor_message VALUES (%s, %s, %s, %s), (%s, %s, %s, %s)"
_STATE = (
    "UPDATE bench_floor_session SET version = %s, message_count = %s, state = %s, "
    "lease_holder = '', lease_expires_at = NULL, done = %s WHERE id = %s"
)
_OTHER = (
    "INSERT INTO bench_floor_other (session_id, kind, body) "
    "VALUES (%s, 'checkpoint', %s), (%s, 'usage', %s), (%s, 'usage', %s)"
)

_pool: ConnectionPool | None = None
_pool_lock = threading.Lock()


def _connections() -> ConnectionPool:
    """Return this process's pool of raw connections, as large as our steps' (the threads
    pool runs many hops at once; a connection each would outgrow `max_connections`)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            settings = connection.settings_dict
            size = settings["OPTIONS"].get("pool", {}).get("max_size", 20)
            _pool = ConnectionPool(
                kwargs={"autocommit": True},
                min_size=1,
                max_size=size,
                open=True,
                conninfo=psycopg.conninfo.make_conninfo(
                    host=settings["HOST"] or None,
                    port=settings["PORT"] or None,
                    user=settings["USER"] or None,
                    password=settings["PASSWORD"] or None,
                    dbname=settings["NAME"],
                ),
            )
        return _pool


def _close_connections() -> None:
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.close()
            _pool = None


@shared_task(acks_late=True, reject_on_worker_lost=True)
def floor_step(session_id: str, step: int, steps: int) -> None:
    """Run hop `step` of `steps` of the session, then enqueue the next one."""
    with _connections().connection() as database:
        _hop(database, session_id, step, steps)
    if step < steps:
        floor_step.delay(session_id, step + 1, steps)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def floor_run(session_id: str, steps: int) -> None:
    """Run every hop of the session's chain in this one task: no broker hop between them."""
    with _connections().connection() as database:
        for step in range(1, steps + 1):
            _hop(database, session_id, step, steps)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def floor_waiting_step(session_id: str, step: int, steps: int, model_seconds: float) -> None:
    """Run hop `step` of `steps`, its model streaming over `model_seconds`; enqueue the next."""
    _waiting_hop(session_id, step, steps, model_seconds)
    if step < steps:
        floor_waiting_step.delay(session_id, step + 1, steps, model_seconds)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def floor_waiting_run(session_id: str, steps: int, model_seconds: float) -> None:
    """Run every waiting hop of the session's chain in this one task: no broker hop between them."""
    for step in range(1, steps + 1):
        _waiting_hop(session_id, step, steps, model_seconds)


def floor_start(session_id: str, steps: int, model_seconds: float, *, hops: bool) -> None:
    """Start a waiting chain as a run starts: commit the user's message, enqueue the first hop
    (with `hops=False`, a task that runs them all)."""
    with _connections().connection() as database:
        database.execute(_START, [session_id, session_id, "Take your time."])
    if hops:
        floor_waiting_step.delay(session_id, 1, steps, model_seconds)
    else:
        floor_waiting_run.delay(session_id, steps, model_seconds)


def _waiting_hop(session_id: str, step: int, steps: int, model_seconds: float) -> None:
    """Run hop `step` of `steps`: each delta appended as it arrives, no connection held between."""
    with _connections().connection() as database:
        state, history = _claim(database, session_id)
    began = time.monotonic()
    for n in range(DELTAS_PER_REPLY):
        due = began + (n + 1) * model_seconds / DELTAS_PER_REPLY
        time.sleep(max(0.0, due - time.monotonic()))
        with _connections().connection() as database:
            _append(database, session_id, step, n)
    with _connections().connection() as database:
        _commit(database, session_id, step, steps, state, history)


def _hop(database: psycopg.Connection, session_id: str, step: int, steps: int) -> None:
    state, history = _claim(database, session_id)
    for n in range(CHUNKS_PER_STEP):
        _append(database, session_id, step, n)
    _commit(database, session_id, step, steps, state, history)


def _claim(database: psycopg.Connection, session_id: str) -> tuple[dict, list]:
    """Take the session's lease; return its state and its history."""
    (state,) = database.execute(_CLAIM, [uuid.uuid4().hex, session_id]).fetchone()
    return state, database.execute(_HISTORY, [session_id]).fetchall()


def _append(database: psycopg.Connection, session_id: str, step: int, n: int) -> None:
    chunk = {"type": "text_delta", "step": step, "delta": f"word {n} "}
    database.execute(_APPEND, [session_id, session_id, json.dumps(chunk)])


def _commit(
    database: psycopg.Connection,
    session_id: str,
    step: int,
    steps: int,
    state: dict,
    history: list,
) -> None:
    """Commit the step's messages, state, checkpoint and usage; free the lease."""
    state = {**state, "ticks": state.get("ticks", 0) + 1, "seen": len(history)}
    with database.transaction():
        version, count = database.execute(_LOCK, [session_id]).fetchone()
        reply = [session_id, count + 1, "assistant", f"Step {step}."]
        result = [session_id, count + 2, "tool", json.dumps({"checked": step})]
        database.execute(_MESSAGES, [*reply, *result])
        database.execute(
            _STATE, [version + 1, count + 2, json.dumps(state), step == steps, session_id]
        )
        checkpoint = json.dumps({"step": step, "state": state})
        usage = json.dumps({"tokens": 10})
        database.execute(_OTHER, [session_id, checkpoint, session_id, usage, session_id, usage])


class FloorTables:
    """The floor's tables on a raw connection: created on entry, dropped on exit."""

    def __init__(self, database: psycopg.Connection) -> None:
        self.database = database

    def __enter__(self) -> "FloorTables":
        self._drop()
        self.database.execute(_SCHEMA)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._drop()
        _close_connections()  # Opened here if this process started waiting chains.

    def new_sessions(self, count: int) -> list[str]:
        """Insert `count` fresh sessions; return their ids."""
        ids = [uuid.uuid4().hex for _ in range(count)]
        with self.database.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO bench_floor_session VALUES (%s, 0, '', NULL, 0, 0, '{}', false)",
                [[session_id] for session_id in ids],
            )
        return ids

    def ended_among(self, ids: list[str]) -> list[str]:
        """Return those of the sessions that have taken their last step."""
        sql = "SELECT id FROM bench_floor_session WHERE id = ANY(%s) AND done"
        return [session_id for (session_id,) in self.database.execute(sql, [ids])]

    def _drop(self) -> None:
        self.database.execute(f"DROP TABLE IF EXISTS {', '.join(_TABLES)}")
