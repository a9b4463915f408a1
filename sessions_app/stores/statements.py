"""Written-out SQL for the store's hottest paths: the step commit, the message append, the claim.

Each statement is the one the ORM compiles for the same query, letter for letter, built once
per database from the models' metadata. A step commit then pays for its database work and not
for compiling six queries, which the benchmark (bench/) measured costing more than that work.
`claim_step` is the exception: a PostgreSQL statement the ORM cannot express, which takes a step
lease and reads the session in one round trip (other databases compose it from three queries).
The naming helpers serve the stream append's statements too."""

import functools
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Model

from sessions_app import models

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
)


@dataclass(frozen=True)
class Statements:
    # Locks a session's row; returns its version, message count and lease holder.
    lock_for_commit: str
    # Returns the id and sequence of a session's last message.
    last_message: str
    # Inserts a checkpoint of CHECKPOINT_COLUMNS.
    insert_checkpoint: str
    # Sets status and checkpoint of a session's changes staged by one step.
    promote_staged: str
    # Takes a free or expired step lease (PostgreSQL only; `claim_step` composes it elsewhere).
    claim_step: str | None


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
    for_update = " FOR UPDATE" if database.features.has_select_for_update else ""
    checkpoint_columns = ", ".join(column(models.Checkpoint, c) for c in CHECKPOINT_COLUMNS)
    return Statements(
        lock_for_commit=(
            f"SELECT {qualified(session, 'version')} AS {quote('version')}, "
            f"{qualified(session, 'message_count')} AS {quote('message_count')}, "
            f"{qualified(session, 'lease_holder')} AS {quote('lease_holder')} "
            f"FROM {table(session)} WHERE {qualified(session, 'id')} = %s{for_update}"
        ),
        last_message=(
            f"SELECT {qualified(message, 'id')} AS {quote('id')}, "
            f"{qualified(message, 'sequence')} AS {quote('sequence')} FROM {table(message)} "
            f"WHERE {qualified(message, 'session')} = %s ORDER BY 2 DESC LIMIT 1"
        ),
        insert_checkpoint=(
            f"INSERT INTO {table(models.Checkpoint)} ({checkpoint_columns}) "
            f"VALUES ({', '.join(['%s'] * len(CHECKPOINT_COLUMNS))})"
        ),
        promote_staged=(
            f"UPDATE {table(staged)} SET {column(staged, 'status')} = %s, "
            f"{column(staged, 'checkpoint_id')} = %s WHERE ({qualified(staged, 'session')} = %s "
            f"AND {qualified(staged, 'status')} = %s AND {qualified(staged, 'step_id')} = %s)"
        ),
        claim_step=_claim_step() if vendor == "postgresql" else None,
    )


def _claim_step() -> str:
    """Return the claim of a step lease: lock, check, take, and return the row and the flag.

    Parameters: session id, now, holder, expiry, holder, holder, now. It returns no row when
    the session is missing or another holder's lease is unexpired. Taking over a lease its
    holder left counts one more abandoned attempt.
    """
    session, flag = models.AgentSession, models.InterruptFlag
    holder, expires = column(session, "lease_holder"), column(session, "lease_expires_at")
    identifier, version = column(session, "id"), column(session, "version")
    abandoned = column(session, "lease_abandoned")
    return (
        f"WITH previous AS (SELECT {identifier}, {holder}, {expires} FROM {table(session)} "
        f"WHERE {identifier} = %s FOR UPDATE), "
        f"claimed AS (UPDATE {table(session)} AS claimed SET {version} = claimed.{version} + 1, "
        f"{column(session, 'updated_at')} = %s, {holder} = %s, {expires} = %s, "
        f"{abandoned} = CASE WHEN previous.{holder} IN ('', %s) THEN claimed.{abandoned} "
        f"ELSE claimed.{abandoned} + 1 END FROM previous "
        f"WHERE claimed.{identifier} = previous.{identifier} "
        f"AND (previous.{holder} IN ('', %s) OR previous.{expires} <= %s) "
        f"RETURNING claimed.*, previous.{holder} AS previous_holder) "
        f"SELECT claimed.*, flag.{column(flag, 'reason')} AS flag_reason, "
        f"flag.{column(flag, 'set_at')} AS flag_set_at FROM claimed "
        f"LEFT JOIN {table(flag)} AS flag ON flag.{column(flag, 'session')} = claimed.{identifier}"
    )


def fetch_one(sql: str, params: list[Any]) -> tuple | None:
    """Run a statement on the default database; return its first row, if any."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def execute(sql: str, params: list[Any]) -> None:
    """Run a statement on the default database."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
