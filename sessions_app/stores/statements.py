"""Written-out SQL for the store's hottest paths: the step commit, the claim, tool call records,
a run's start (the session's load, its current run, the run's creation) and end.

Where the ORM can express a statement, it is mostly the one the ORM compiles for the same query,
letter for letter, built once per database from the models' metadata; a step then pays for its
database work and not for compiling a dozen queries, which the benchmark (bench/) measured
costing more than that work. A run's start reads its session (with the interrupt flag) and its
current run in the columns the store converts itself, as the claim returns them. The others do
in one round trip what the ORM would do in several: the claim (`claim_step`, PostgreSQL only)
takes a step lease and reads the session, its interrupt flag and its current run; the
commit's lock reads the session's interrupt flag and last message beside its row, and its
writes, which read nothing back, go to PostgreSQL together
(`sessions_app.connections.pipelined`); a batch of tool call records, lease renewals or
interrupt flags is one statement. The naming helpers serve the stream append's statements
too."""

import functools
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model

from sessions_app import models
from sessions_app.connections import kept_cursor

CHECKPOINT_COLUMNS = (
    "id",
    "session",
    "run_id",
    "step_id",
    "step_count",
    "message_count",
    "stream_sequence",
    "state",
    "created_at",
    "timings",
)
# The current run's fields a step claim returns, each as the column `run_<name>`.
CLAIMED_RUN_FIELDS = (
    "id",
    "turn",
    "status",
    "step_count",
    "error",
    "metadata",
    "started_at",
    "completed_at",
)

# The fields of a compaction its read returns.
COMPACTION_FIELDS = tuple(field.name for field in models.Compaction._meta.concrete_fields)
# The fields a new run's INSERT sets, in its parameters' order.
NEW_RUN_FIELDS = tuple(field.name for field in models.Run._meta.concrete_fields)
# The fields of a queued run its taking returns.
QUEUED_RUN_FIELDS = ("run_id", "session", "input", "queued_at")


@dataclass(frozen=True)
class Statements:
    # Locks a session's row; returns its version, message count, lease holder and history
    # revision, the reason and time of its interrupt flag (nulls without one), and the id and
    # sequence of its last message.
    lock_for_commit: str
    # Returns the id and sequence of a session's last message.
    last_message: str
    # Inserts a checkpoint of CHECKPOINT_COLUMNS.
    insert_checkpoint: str
    # Sets status and checkpoint of a session's changes staged by one step.
    promote_staged: str
    # Both in one statement, `promote_staged`'s parameters first (PostgreSQL only: a
    # data-modifying WITH).
    promote_staged_and_insert_checkpoint: str | None
    # Takes a free or expired step lease (PostgreSQL only; `claim_step` composes it elsewhere).
    claim_step: str | None
    # Reads a session's compactions (COMPACTION_FIELDS) in the order they were added.
    compactions: str
    # Sets a begun tool call's outcome.
    finish_tool_call: str
    # Drops a step's tool call records.
    forget_tool_calls: str
    # Sets a run's status, completed at, step count and error (each kept if null) and merges
    # into its metadata (PostgreSQL only); parameters in that order, then the run id. Returns
    # its session id, then CLAIMED_RUN_FIELDS.
    update_run_status: str | None
    # Deletes a session's oldest queued run (PostgreSQL only); returns its QUEUED_RUN_FIELDS.
    take_queued_run: str | None
    # Reads a session's row with its interrupt flag's reason and time (`flag_reason`,
    # `flag_set_at`, nulls without one).
    load_session: str
    # Reads a session's current run (the latest turn): its session id, then CLAIMED_RUN_FIELDS.
    current_run: str
    # Drops a session's interrupt flag.
    clear_interrupt_flag: str
    # Locks a session's row; returns its id.
    lock_session: str
    # Inserts a run (PostgreSQL only) unless its id or turn is taken. Parameters: per field of
    # NEW_RUN_FIELDS its value, but the turn: a turn, or null for the session's next, then the
    # session id again. Returns its session id, then CLAIMED_RUN_FIELDS; no row if taken.
    create_run: str | None

    def begin_tool_calls(self, count: int) -> str | None:
        """Return the statement recording `count` begun tool calls of one session's step.

        Parameters: the session id, then step id, tool call id and time per call. It inserts
        what is not recorded yet and returns one row counting the sessions found (0 or 1).
        PostgreSQL only: elsewhere the store composes it.
        """
        return _begin_tool_calls(self.vendor, count)

    def renew_leases(self, count: int) -> str:
        """Return the renewal of `count` leases in one statement.

        Parameters: the new expiry, then session id and holder per lease. It returns the ids
        of the sessions whose holder still held the lease.
        """
        return _renew_leases(count)

    def interrupt_flags(self, session_ids: list[str]) -> tuple[str, list[Any]]:
        """Return the read of the sessions' interrupt flags in one statement, and its
        parameters (on PostgreSQL one, their list: the same statement for any number). It
        returns the session id, reason and time of each flag found."""
        if self.vendor == "postgresql":
            return _interrupt_flags("= ANY(%s)"), [session_ids]
        return _interrupt_flags(f"IN ({', '.join(['%s'] * len(session_ids))})"), session_ids

    vendor: str


def quote(name: str) -> str:
    """Return an identifier quoted for the default database."""
    return connections[DEFAULT_DB_ALIAS].ops.quote_name(name)


def table(model: type[Model]) -> str:
    """Return a model's table name, quoted."""
    return quote(model._meta.db_table)


def column(model: type[Model], name: str) -> str:
    """Return the quoted column of a model's field."""
    return quote(model._meta.get_field(name).column)


def qualified(model: type[Model], name: str) -> str:
    """Return the quoted column of a model's field, qualified by its table, as the ORM does."""
    return f"{table(model)}.{column(model, name)}"


@functools.cache
def statements(vendor: str) -> Statements:
    """Return the statements in the dialect of the `vendor` database."""
    database = connections[DEFAULT_DB_ALIAS]
    session, message, staged = models.AgentSession, models.Message, models.StagedChange
    record, compaction = models.ToolCallRecord, models.Compaction
    flag, run = models.InterruptFlag, models.Run
    for_update_of_session = (
        f" FOR UPDATE OF {table(session)}" if database.features.has_select_for_update_of else ""
    )
    checkpoint_columns = ", ".join(column(models.Checkpoint, c) for c in CHECKPOINT_COLUMNS)
    insert_checkpoint = (
        f"INSERT INTO {table(models.Checkpoint)} ({checkpoint_columns}) "
        f"VALUES ({', '.join(['%s'] * len(CHECKPOINT_COLUMNS))})"
    )
    promote_staged = (
        f"UPDATE {table(staged)} SET {column(staged, 'status')} = %s, "
        f"{column(staged, 'checkpoint_id')} = %s WHERE ({qualified(staged, 'session')} = %s "
        f"AND {qualified(staged, 'status')} = %s AND {qualified(staged, 'step_id')} = %s)"
    )
    return Statements(
        lock_for_commit=(
            f"SELECT {qualified(session, 'version')} AS {quote('version')}, "
            f"{qualified(session, 'message_count')} AS {quote('message_count')}, "
            f"{qualified(session, 'lease_holder')} AS {quote('lease_holder')}, "
            f"{qualified(session, 'history_revision')} AS {quote('history_revision')}, "
            f"{_flag_columns()}, last.{column(message, 'id')}, last.{column(message, 'sequence')} "
            f"FROM {table(session)} {_flag_join(qualified(session, 'id'))} "
            f"LEFT JOIN (SELECT {column(message, 'id')}, "
            f"{column(message, 'sequence')} FROM {table(message)} "
            f"WHERE {column(message, 'session')} = %s "
            f"ORDER BY {column(message, 'sequence')} DESC LIMIT 1) AS last ON TRUE "
            f"WHERE {qualified(session, 'id')} = %s{for_update_of_session}"
        ),
        last_message=(
            f"SELECT {qualified(message, 'id')} AS {quote('id')}, "
            f"{qualified(message, 'sequence')} AS {quote('sequence')} FROM {table(message)} "
            f"WHERE {qualified(message, 'session')} = %s ORDER BY 2 DESC LIMIT 1"
        ),
        insert_checkpoint=insert_checkpoint,
        promote_staged=promote_staged,
        promote_staged_and_insert_checkpoint=(
            f"WITH promoted AS ({promote_staged}) {insert_checkpoint}"
            if vendor == "postgresql"
            else None
        ),
        claim_step=_claim_step() if vendor == "postgresql" else None,
        compactions=(
            f"SELECT {', '.join(column(compaction, name) for name in COMPACTION_FIELDS)} "
            f"FROM {table(compaction)} WHERE {column(compaction, 'session')} = %s "
            f"ORDER BY {column(compaction, 'created_at')}, {column(compaction, 'id')}"
        ),
        finish_tool_call=(
            f"UPDATE {table(record)} SET {column(record, 'outcome')} = %s "
            f"WHERE {column(record, 'session')} = %s AND {column(record, 'step_id')} = %s "
            f"AND {column(record, 'tool_call_id')} = %s"
        ),
        forget_tool_calls=(
            f"DELETE FROM {table(record)} WHERE {column(record, 'session')} = %s "
            f"AND {column(record, 'step_id')} = %s"
        ),
        update_run_status=_update_run_status() if vendor == "postgresql" else None,
        take_queued_run=_take_queued_run() if vendor == "postgresql" else None,
        load_session=(
            f"SELECT {table(session)}.*, {_flag_columns()} FROM {table(session)} "
            f"{_flag_join(qualified(session, 'id'))} WHERE {qualified(session, 'id')} = %s"
        ),
        current_run=(
            f"SELECT {_returned_run_columns()} FROM {table(run)} "
            f"WHERE {column(run, 'session')} = %s ORDER BY {column(run, 'turn')} DESC LIMIT 1"
        ),
        clear_interrupt_flag=f"DELETE FROM {table(flag)} WHERE {column(flag, 'session')} = %s",
        lock_session=(
            f"SELECT {qualified(session, 'id')} FROM {table(session)} "
            f"WHERE {qualified(session, 'id')} = %s{for_update_of_session}"
        ),
        create_run=_create_run() if vendor == "postgresql" else None,
        vendor=vendor,
    )


def _returned_run_columns() -> str:
    """Return the columns a statement returns a run as: its session id, then CLAIMED_RUN_FIELDS."""
    return ", ".join(column(models.Run, name) for name in ("session", *CLAIMED_RUN_FIELDS))


def _create_run() -> str:
    run = models.Run
    turn, session_id = column(run, "turn"), column(run, "session")
    values = ", ".join(
        f"COALESCE(%s, MAX({turn}) + 1, 1)" if name == "turn" else "%s" for name in NEW_RUN_FIELDS
    )
    return (
        f"INSERT INTO {table(run)} ({', '.join(column(run, name) for name in NEW_RUN_FIELDS)}) "
        f"SELECT {values} FROM {table(run)} WHERE {session_id} = %s "
        f"ON CONFLICT DO NOTHING RETURNING {_returned_run_columns()}"
    )


def _update_run_status() -> str:
    run = models.Run
    kept = ", ".join(
        f"{column(run, name)} = COALESCE(%s, {column(run, name)})"
        for name in ("step_count", "error")
    )
    metadata = column(run, "metadata")
    return (
        f"UPDATE {table(run)} SET {column(run, 'status')} = %s, "
        f"{column(run, 'completed_at')} = %s, {kept}, {metadata} = {metadata} || %s::jsonb "
        f"WHERE {column(run, 'id')} = %s RETURNING {_returned_run_columns()}"
    )


def _take_queued_run() -> str:
    queued, key = models.QueuedRun, column(models.QueuedRun, "id")
    oldest = (
        f"SELECT {key} FROM {table(queued)} WHERE {column(queued, 'session')} = %s "
        f"ORDER BY {key} LIMIT 1 FOR UPDATE"
    )
    returned = ", ".join(column(queued, name) for name in QUEUED_RUN_FIELDS)
    return f"DELETE FROM {table(queued)} WHERE {key} = ({oldest}) RETURNING {returned}"


@functools.cache
def _begin_tool_calls(vendor: str, count: int) -> str | None:
    if vendor != "postgresql":  # Data-modifying CTEs are PostgreSQL's.
        return None
    session, record = models.AgentSession, models.ToolCallRecord
    identifier = column(session, "id")
    columns = ", ".join(
        column(record, name) for name in ("session", "step_id", "tool_call_id", "created_at")
    )
    return (
        f"WITH found AS (SELECT {identifier} FROM {table(session)} WHERE {identifier} = %s), "
        f"inserted AS (INSERT INTO {table(record)} ({columns}) "
        f"SELECT found.{identifier}, calls.step_id, calls.call_id, calls.at::timestamptz "
        f"FROM found, (VALUES {', '.join(['(%s, %s, %s)'] * count)}) "
        f"AS calls (step_id, call_id, at) ON CONFLICT DO NOTHING) "
        f"SELECT count(*) FROM found"
    )


@functools.cache
def _interrupt_flags(wanted: str) -> str:
    """Return the read of the interrupt flags of the sessions whose ids are `wanted`."""
    flag = models.InterruptFlag
    columns = ", ".join(column(flag, name) for name in ("session", "reason", "set_at"))
    return f"SELECT {columns} FROM {table(flag)} WHERE {column(flag, 'session')} {wanted}"


@functools.cache
def _renew_leases(count: int) -> str:
    session = models.AgentSession
    identifier = column(session, "id")
    return (
        f"UPDATE {table(session)} SET {column(session, 'lease_expires_at')} = %s "
        f"WHERE ({identifier}, {column(session, 'lease_holder')}) IN "
        f"(VALUES {', '.join(['(%s, %s)'] * count)}) RETURNING {identifier}"
    )


def _claim_step() -> str:
    """Return the claim of a step lease: lock, check, take, and return the row, the flag and
    the current run (its columns prefixed `run_`).

    Parameters: session id, holder, expiry, holder, holder, now. It returns no row when
    the session is missing or another holder's lease is unexpired. Taking over a lease its
    holder left counts one more abandoned attempt.
    """
    session, run = models.AgentSession, models.Run
    holder, expires = column(session, "lease_holder"), column(session, "lease_expires_at")
    identifier, version = column(session, "id"), column(session, "version")
    abandoned = column(session, "lease_abandoned")
    return (
        f"WITH previous AS (SELECT {identifier}, {holder}, {expires} FROM {table(session)} "
        f"WHERE {identifier} = %s FOR UPDATE), "
        f"claimed AS (UPDATE {table(session)} AS claimed SET {version} = claimed.{version} + 1, "
        f"{holder} = %s, {expires} = %s, "
        f"{abandoned} = CASE WHEN previous.{holder} IN ('', %s) THEN claimed.{abandoned} "
        f"ELSE claimed.{abandoned} + 1 END FROM previous "
        f"WHERE claimed.{identifier} = previous.{identifier} "
        f"AND (previous.{holder} IN ('', %s) OR previous.{expires} <= %s) "
        f"RETURNING claimed.*, previous.{holder} AS previous_holder) "
        f"SELECT claimed.*, {_flag_columns()}, {_run_columns()} FROM claimed "
        f"{_flag_join(f'claimed.{identifier}')} "
        f"LEFT JOIN LATERAL (SELECT * FROM {table(run)} WHERE {column(run, 'session')} = "
        f"claimed.{identifier} ORDER BY {column(run, 'turn')} DESC LIMIT 1) AS run ON TRUE"
    )


def _flag_columns() -> str:
    """Return the columns of the flag `_flag_join` joins: `flag_reason` and `flag_set_at`,
    nulls where the session has none."""
    flag = models.InterruptFlag
    reason, set_at = column(flag, "reason"), column(flag, "set_at")
    return f"flag.{reason} AS flag_reason, flag.{set_at} AS flag_set_at"


def _flag_join(session_id: str) -> str:
    """Return the join of the interrupt flag (as `flag`) of the session whose id is the
    column `session_id`."""
    flag = models.InterruptFlag
    return f"LEFT JOIN {table(flag)} AS flag ON flag.{column(flag, 'session')} = {session_id}"


def _run_columns() -> str:
    """Return the joined current run's (as `run`) CLAIMED_RUN_FIELDS, each as `run_<name>`."""
    run = models.Run
    return ", ".join(f"run.{column(run, name)} AS run_{name}" for name in CLAIMED_RUN_FIELDS)


def fetch_one(sql: str, params: list[Any]) -> tuple | None:
    """Run a statement on the default database; return its first row, if any."""
    cursor = kept_cursor()
    cursor.execute(sql, params)
    return cursor.fetchone()


def fetch_all(sql: str, params: list[Any]) -> list[tuple]:
    """Run a statement on the default database; return its rows."""
    cursor = kept_cursor()
    cursor.execute(sql, params)
    return cursor.fetchall()


def execute(sql: str, params: list[Any]) -> int:
    """Run a statement on the default database; return how many rows it wrote (-1 in
    `pipelined`, whose results are read later)."""
    cursor = kept_cursor()
    cursor.execute(sql, params)
    return cursor.rowcount


@functools.cache
def insert_rows(model: type[Model], fields: tuple[str, ...], count: int, suffix: str = "") -> str:
    """Return an INSERT of `count` rows of the model's `fields`, followed by `suffix`."""
    columns = ", ".join(column(model, name) for name in fields)
    row = f"({', '.join(['%s'] * len(fields))})"
    return f"INSERT INTO {table(model)} ({columns}) VALUES {', '.join([row] * count)}{suffix}"


@functools.cache
def update_row(model: type[Model], fields: tuple[str, ...]) -> str:
    """Return an UPDATE of the model's `fields` in the row whose key is the last parameter."""
    assignments = ", ".join(f"{column(model, name)} = %s" for name in fields)
    key = column(model, model._meta.pk.name)
    return f"UPDATE {table(model)} SET {assignments} WHERE {key} = %s"
