"""Run the session store's step writes on a bare psycopg connection with the ORM's own SQL."""

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from sessions_app.stores.types import CheckpointMeta, CommitResult, Message, SessionState

# Each statement is the SQL text ORMSessionStateStore sends on PostgreSQL, letter for letter
# (bench.stores checks this before timing), and takes the same parameters.
_SESSION = '"sessions_app_agentsession"'
_LOCK = f'FROM {_SESSION} WHERE {_SESSION}."id" = %s FOR UPDATE'

LOCK_MESSAGE_COUNT = f'SELECT {_SESSION}."message_count" AS "message_count" {_LOCK}'
_MESSAGE = '"sessions_app_message"'
# The session's row, locked, with its last message: one round trip.
LOCK_FOR_COMMIT = (
    f'SELECT {_SESSION}."version" AS "version", '
    f'{_SESSION}."message_count" AS "message_count", '
    f'{_SESSION}."lease_holder" AS "lease_holder", '
    f'{_SESSION}."history_revision" AS "history_revision", '
    'flag."reason" AS flag_reason, flag."set_at" AS flag_set_at, last."id", last."sequence" '
    f'FROM {_SESSION} LEFT JOIN "sessions_app_interruptflag" AS flag '
    f'ON flag."session_id" = {_SESSION}."id" '
    f'LEFT JOIN (SELECT "id", "sequence" FROM {_MESSAGE} '
    'WHERE "session_id" = %s ORDER BY "sequence" DESC LIMIT 1) AS last ON TRUE '
    f'WHERE {_SESSION}."id" = %s FOR UPDATE OF {_SESSION}'
)
LAST_MESSAGE = (
    f'SELECT {_MESSAGE}."id" AS "id", {_MESSAGE}."sequence" AS "sequence" '
    f'FROM {_MESSAGE} WHERE {_MESSAGE}."session_id" = %s '
    "ORDER BY 2 DESC LIMIT 1"
)
_MESSAGE_COLUMNS = (
    f'INSERT INTO {_MESSAGE} ("id", "session_id", "sequence", "parent_id", "created_at", '
    '"role", "content", "tool_calls", "tool_call_id", "name", "parts", "metadata")'
)
_MESSAGE_ROW = f"({', '.join(['%s'] * 12)})"


def insert_messages(count: int) -> str:
    """Return the INSERT of `count` messages: one VALUES row each."""
    return f"{_MESSAGE_COLUMNS} VALUES {', '.join([_MESSAGE_ROW] * count)}"


INSERT_MESSAGE = insert_messages(1)
UPDATE_MESSAGE_COUNT = (
    f'UPDATE {_SESSION} SET "updated_at" = %s, "message_count" = %s, '
    f'"history_revision" = ({_SESSION}."history_revision" + %s) WHERE {_SESSION}."id" = %s'
)
_STATE_COLUMNS = (
    "version",
    "updated_at",
    "message_count",
    "stream_id",
    "custom_state",
    "step_count",
    "status",
    "output",
    "error",
    "failure_reason",
    "aborted",
    "abort_reason",
    "pending_client_tool_calls",
    "completed_client_tool_calls",
    "client_tool_call_ownership",
    "interrupt_context",
    "tracing_context",
    "expires_at",
    "tags",
    "metadata",
    "resume_count",
    "suspension_context",
    "lease_abandoned",
    "history_revision",  # A commit with messages (the benchmark's) bumps it.
)
UPDATE_STATE = (
    f"UPDATE {_SESSION} SET "
    + ", ".join(f'"{column}" = %s' for column in _STATE_COLUMNS)
    + ' WHERE "id" = %s'
)
INSERT_CHECKPOINT = (
    'INSERT INTO "sessions_app_checkpoint" ("id", "session_id", "run_id", "step_id", '
    '"step_count", "message_count", "stream_sequence", "state", "created_at", "timings") '
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
PROMOTE_STAGED = (
    'UPDATE "sessions_app_stagedchange" SET "status" = %s, "checkpoint_id" = %s '
    'WHERE ("sessions_app_stagedchange"."session_id" = %s '
    'AND "sessions_app_stagedchange"."status" = %s '
    'AND "sessions_app_stagedchange"."step_id" = %s)'
)
# As ours: the checkpoint's insert promotes the step's staged changes (its parameters first).
PROMOTE_STAGED_AND_INSERT_CHECKPOINT = f"WITH promoted AS ({PROMOTE_STAGED}) {INSERT_CHECKPOINT}"

_SNAPSHOT_FIELDS = tuple(
    field.name for field in dataclasses.fields(SessionState) if field.name != "interrupt_flag"
)
_SNAPSHOT_TIMES = ("expires_at", "created_at", "updated_at")


def connect(settings_dict: dict[str, Any], *, like_django: bool) -> psycopg.Connection:
    """Open an autocommit connection to a Django database, set up like Django's or by default."""
    connection = psycopg.connect(
        host=settings_dict["HOST"] or None,
        port=settings_dict["PORT"] or None,
        user=settings_dict["USER"] or None,
        password=settings_dict["PASSWORD"] or None,
        dbname=settings_dict["NAME"],
        autocommit=True,
    )
    if like_django:
        # Following Django's OPTIONS (client-side binding and no prepared statements unless they
        # say otherwise) leaves the code above the driver as the only difference.
        options = settings_dict["OPTIONS"]
        server_side_binding = options.get("server_side_binding") is True
        connection.cursor_factory = psycopg.Cursor if server_side_binding else psycopg.ClientCursor
        connection.prepare_threshold = options.get("prepare_threshold")
    return connection


def _json(value: Any) -> Jsonb | None:
    """Wrap a JSON value for a nullable JSON column; `None` stays SQL NULL."""
    return None if value is None else Jsonb(value)


class RawSessionStore:
    """Write messages and step commits as hand-written SQL, like `ORMSessionStateStore`."""

    def __init__(self, connection: psycopg.Connection, *, executemany: bool = False) -> None:
        # With `executemany`, several messages go in as the one-row INSERT run once per row.
        self.connection = connection
        self.executemany = executemany

    def statement_for(self, orm_sql: str) -> str:
        """Return the statement this store runs where the ORM runs `orm_sql`."""
        several = orm_sql.startswith(_MESSAGE_COLUMNS) and orm_sql != INSERT_MESSAGE
        return INSERT_MESSAGE if self.executemany and several else orm_sql

    def append_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append messages after the session's last one, under the session's row lock."""
        with self.connection.transaction(), self.connection.cursor() as cursor:
            (message_count,) = _fetch(cursor, LOCK_MESSAGE_COUNT, session_id)
            last = cursor.execute(LAST_MESSAGE, (session_id,)).fetchone()
            _insert_messages(
                cursor, session_id, messages, datetime.now(UTC), last, self.executemany
            )
            cursor.execute(
                UPDATE_MESSAGE_COUNT,
                (datetime.now(UTC), message_count + len(messages), 1, session_id),
            )

    def save_state_and_promote_staging(
        self,
        session_id: str,
        state: SessionState,
        messages: Sequence[Message],
        checkpoint: CheckpointMeta,
        *,
        expected_version: int,
    ) -> CommitResult:
        """Commit one step: messages, state, checkpoint and promoted staging, in one transaction."""
        with self.connection.transaction(), self.connection.cursor() as cursor:
            row = cursor.execute(LOCK_FOR_COMMIT, (session_id, session_id)).fetchone()
            if row is None:
                raise LookupError(f"no session {session_id}")
            version, message_count, _, history_revision, _, _, *last = row
            if version != expected_version:
                raise RuntimeError(f"version {version} is not the expected {expected_version}")
            # As ours: the writes read no result, and go in one round trip.
            with self.connection.pipeline():
                now = datetime.now(UTC)
                last = None if last[0] is None else tuple(last)
                _insert_messages(cursor, session_id, messages, now, last, self.executemany)
                version += 1
                message_count += len(messages)
                cursor.execute(
                    UPDATE_STATE,
                    (
                        version,
                        datetime.now(UTC),
                        message_count,
                        *_state_values(state),
                        history_revision + 1,
                        session_id,
                    ),
                )
                checkpoint_id = str(uuid.uuid4())
                cursor.execute(
                    PROMOTE_STAGED_AND_INSERT_CHECKPOINT,
                    (
                        "promoted",
                        checkpoint_id,
                        session_id,
                        "staged",
                        checkpoint.step_id,
                        checkpoint_id,
                        session_id,
                        checkpoint.run_id or "",
                        checkpoint.step_id,
                        checkpoint.step_count,
                        message_count,
                        checkpoint.stream_sequence,
                        Jsonb(_snapshot(state, version, message_count)),
                        now,
                        _json(checkpoint.timings),
                    ),
                )
        committed = dataclasses.replace(state, version=version, message_count=message_count)
        return CommitResult(checkpoint_id=checkpoint_id, state=committed)


def _fetch(cursor: psycopg.Cursor, query: str, session_id: str) -> tuple[Any, ...]:
    """Return the one row a query about the session finds; raise if the session is missing."""
    row = cursor.execute(query, (session_id,)).fetchone()
    if row is None:
        raise LookupError(f"no session {session_id}")
    return row


def _insert_messages(
    cursor: psycopg.Cursor,
    session_id: str,
    messages: Sequence[Message],
    now: datetime,
    last: tuple[str, int] | None,
    executemany: bool,
) -> None:
    """Insert messages after the session's `last` one, each the child of the one before."""
    parent_id, sequence = last or (None, 0)
    rows = []
    for message in messages:
        message_id = str(uuid.uuid4())
        sequence += 1
        rows.append(
            (
                message_id,
                session_id,
                sequence,
                parent_id,
                now,
                message.role,
                message.content,
                Jsonb(message.tool_calls),
                message.tool_call_id or "",
                message.name or "",
                Jsonb(message.parts),
                Jsonb(message.metadata),
            )
        )
        parent_id = message_id
    if executemany:
        cursor.executemany(INSERT_MESSAGE, rows)
    else:
        cursor.execute(insert_messages(len(rows)), [value for row in rows for value in row])


def _state_values(state: SessionState) -> tuple[Any, ...]:
    """Return the values of the state columns from `message_count` to `history_revision`,
    in `UPDATE_STATE` order."""
    suspension = {
        "suspended_step_id": state.suspended_step_id,
        "suspended_awaiting_children": state.suspended_awaiting_children,
    }
    return (
        state.stream_id,
        _json(state.custom_state),
        state.step_count,
        state.status,
        _json(state.output),
        state.error or "",
        state.failure_reason or "",
        state.aborted,
        state.abort_reason or "",
        Jsonb(state.pending_client_tool_calls),
        Jsonb(state.completed_client_tool_calls),
        Jsonb(state.client_tool_call_ownership),
        _json(state.interrupt_context),
        _json(state.tracing_context),
        state.expires_at,
        Jsonb(state.tags),
        Jsonb(state.metadata),
        state.resume_count,
        Jsonb(suspension) if any(suspension.values()) else None,
        0,  # A commit ends any run of abandoned attempts.
    )


def _snapshot(state: SessionState, version: int, message_count: int) -> dict[str, Any]:
    """Return the checkpoint's JSON snapshot of `state` as committed at `version`."""
    snapshot = {name: getattr(state, name) for name in _SNAPSHOT_FIELDS}
    for name in _SNAPSHOT_TIMES:
        if snapshot[name] is not None:
            snapshot[name] = snapshot[name].isoformat()
    snapshot.update(version=version, message_count=message_count)
    return snapshot
