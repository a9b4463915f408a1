"""`UsageStore` on the Django ORM, for SQLite and PostgreSQL.

Recording takes no lock: it checks that the sessions exist and inserts, so a step commit that
holds its session's row lock can record its usage in the same transaction (and, saying that it
holds it, skip the check: one statement). A rollup runs two queries whatever the number of
entries: one that checks the session exists and sums its descendants' tokens (a recursive walk
down `parent_session_id`), and one GROUP BY over the session's own entries that `rules.rollup`
folds into the reference shape.
"""

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Max, Min, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from sessions_app import models
from sessions_app.errors import SessionNotFound
from sessions_app.stores.statements import (
    column,
    execute,
    fetch_all,
    fetch_one,
    insert_rows,
    table,
)
from sessions_app.stores.values import db_values, new_row
from sessions_app.usage import rules
from sessions_app.usage.base import UsageStore
from sessions_app.usage.types import (
    CustomEntry,
    PaginatedUsage,
    SubAgentEntry,
    TokenCounts,
    TokensEntry,
    ToolEntry,
    UsageEntry,
    UsageGroup,
    UsageKind,
    UsageRollup,
)

_TOKEN_COLUMNS = {
    "prompt": "prompt_tokens",
    "completion": "completion_tokens",
    "reasoning": "reasoning_tokens",
    "cached": "cached_tokens",
    "total": "total_tokens",
}


class ORMUsageStore(UsageStore):
    def record_entries(
        self, entries: Sequence[UsageEntry], *, sessions_locked: bool = False
    ) -> list[UsageEntry]:
        rows = self._record(entries, sessions_locked=sessions_locked, read_back=True)
        return [_entry(row) for row in rows]

    def add_entries(self, entries: Sequence[UsageEntry], *, sessions_locked: bool = False) -> None:
        self._record(entries, sessions_locked=sessions_locked, read_back=False)

    def _record(
        self, entries: Sequence[UsageEntry], *, sessions_locked: bool, read_back: bool
    ) -> list[SimpleNamespace]:
        """Insert the entries' rows, all or none; return them, with their ids if `read_back`."""
        prepared = rules.prepare_entries(entries, now=timezone.now())
        if not prepared:
            return []
        session_ids = sorted({entry.session_id for entry in prepared})
        rows = [_row(entry) for entry in prepared]
        try:
            # No savepoint inside a caller's transaction (the step commit): a missing session
            # is reported after the block, which then wrote nothing.
            with transaction.atomic(savepoint=False):
                missing = (
                    [] if sessions_locked else sorted(set(session_ids) - _existing(session_ids))
                )
                if not missing:
                    _insert(rows, read_back=read_back)
        except IntegrityError:
            if connection.in_atomic_block:  # The caller's transaction is spoilt: it fails.
                raise
            # A session was deleted between the check and the insert.
            if gone := sorted(set(session_ids) - _existing(session_ids)):
                raise SessionNotFound(gone[0]) from None
            raise
        if missing:
            raise SessionNotFound(missing[0])
        return rows

    def get_entries(
        self,
        session_id: str,
        *,
        kinds: UsageKind | Iterable[UsageKind] | None = None,
        run_id: str | None = None,
    ) -> list[UsageEntry]:
        wanted = rules.check_kinds(kinds)
        if not models.AgentSession.objects.filter(pk=session_id).exists():
            raise SessionNotFound(session_id)
        rows = models.UsageEntry.objects.filter(session_id=session_id)
        if wanted is not None:
            rows = rows.filter(kind__in=wanted)
        if run_id is not None:
            rows = rows.filter(run_id=run_id)
        return [_entry(row) for row in rows.order_by("id")]

    def get_rollup(self, session_id: str, *, run_id: str | None = None) -> UsageRollup:
        sql = _statements(connection.vendor)
        if run_id is None:
            statement, params = sql.descendant_tokens, [session_id] * 3
        else:
            statement = sql.run_descendant_tokens
            params = [session_id, run_id, UsageKind.SUBAGENT.value, session_id, session_id]
        exists, *token_sums = fetch_one(statement, params)
        if not exists:
            raise SessionNotFound(session_id)
        sub_agent_tokens = TokenCounts(**dict(zip(_TOKEN_COLUMNS, token_sums, strict=True)))
        rows = models.UsageEntry.objects.filter(session_id=session_id)
        if run_id is not None:
            rows = rows.filter(run_id=run_id)
        grouped = (
            rows.order_by()
            .values("kind", "name", "model", "metric_type")
            .annotate(
                entries=Count("id"),
                successful=Count("id", filter=Q(success=True)),
                failed=Count("id", filter=Q(success=False)),
                duration_sum=Coalesce(Sum("duration_ms"), 0),
                value_sum=Sum("value"),
                first_at=Min("created_at"),
                last_at=Max("created_at"),
                **{f"{name}_sum": Sum(name) for name in _TOKEN_COLUMNS.values()},
            )
        )
        return rules.rollup(run_id, [_group(row) for row in grouped], sub_agent_tokens)

    def query_usage(
        self,
        *,
        session_ids: Iterable[str] | None = None,
        agent_type: str | None = None,
        kinds: UsageKind | Iterable[UsageKind] | None = None,
        model: str | None = None,
        owner_id: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> PaginatedUsage:
        wanted_sessions = rules.check_session_ids(session_ids)
        wanted_kinds = rules.check_kinds(kinds)
        filters: dict[str, Any] = {
            "session_id__in": wanted_sessions,
            "session__agent_type": agent_type,
            "kind__in": wanted_kinds,
            "session__owner_id": owner_id,
            "created_at__gte": rules.check_time(since, "since"),
            "created_at__lt": rules.check_time(until, "until"),
        }
        rules.check_page(offset, limit)
        if model is not None:
            filters.update(kind=UsageKind.TOKENS, model=model)
        rows = models.UsageEntry.objects.filter(
            **{lookup: value for lookup, value in filters.items() if value is not None}
        )
        total = rows.count()
        page = [_entry(row) for row in rows.order_by("created_at", "id")[offset : offset + limit]]
        return PaginatedUsage(
            entries=page,
            total=total,
            offset=offset,
            limit=limit,
            has_more=offset + len(page) < total,
        )


# Written-out SQL for what the ORM cannot say: a recursive walk down the session tree.


@dataclass(frozen=True)
class _Statements:
    # Parameters: the session id, three times.
    descendant_tokens: str
    # Parameters: the session id, the run id, the `subagent` kind, the session id twice more.
    run_descendant_tokens: str


@functools.cache
def _statements(vendor: str) -> _Statements:
    """Return, for the `vendor` database, the statements that sum a session's descendants.

    Each returns one row: whether the session exists (1 or 0), then the descendants' prompt,
    completion, reasoning, cached and total tokens. The walk's step names a non-empty parent so
    PostgreSQL can use the partial `session_parent` index; UNION (not UNION ALL) ends the walk
    should the parent links form a cycle, and the session itself is never its own descendant.
    """
    session, entry = models.AgentSession, models.UsageEntry
    s_id, s_parent = column(session, "id"), column(session, "parent_session_id")
    u_session, u_kind = column(entry, "session"), column(entry, "kind")
    sums = ", ".join(
        f"COALESCE(SUM(u.{column(entry, name)}), 0)" for name in _TOKEN_COLUMNS.values()
    )
    walk = (
        f"UNION SELECT s.{s_id} FROM {table(session)} s JOIN descendants d "
        f"ON s.{s_parent} = d.{s_id} WHERE s.{s_parent} <> '')"
    )
    total = (
        f" SELECT (SELECT COUNT(*) FROM {table(session)} WHERE {s_id} = %s), {sums} "
        f"FROM {table(entry)} u WHERE u.{u_kind} = '{UsageKind.TOKENS.value}' "
        f"AND u.{u_session} IN (SELECT {s_id} FROM descendants WHERE {s_id} <> %s)"
    )
    return _Statements(
        descendant_tokens=(
            f"WITH RECURSIVE descendants({s_id}) AS ("
            f"SELECT s.{s_id} FROM {table(session)} s "
            f"WHERE s.{s_parent} = %s AND s.{s_parent} <> '' {walk}{total}"
        ),
        run_descendant_tokens=(
            f"WITH RECURSIVE descendants({s_id}) AS ("
            f"SELECT s.{s_id} FROM {table(session)} s JOIN {table(entry)} u "
            f"ON u.{column(entry, 'sub_session_id')} = s.{s_id} "
            f"WHERE u.{u_session} = %s AND u.{column(entry, 'run_id')} = %s "
            f"AND u.{u_kind} = %s AND s.{s_parent} = u.{u_session} {walk}{total}"
        ),
    )


# Typed values to rows and back


def _existing(session_ids: Sequence[str]) -> set[str]:
    """Return which of the sessions exist, in one written-out query."""
    session = models.AgentSession
    identifier = column(session, "id")
    sql = (
        f"SELECT {identifier} FROM {table(session)} "
        f"WHERE {identifier} IN ({', '.join(['%s'] * len(session_ids))})"
    )
    return {session_id for (session_id,) in fetch_all(sql, list(session_ids))}


def _insert(rows: list[SimpleNamespace], *, read_back: bool) -> None:
    """Insert the rows in one written-out statement; set their ids if `read_back`.

    Without it, nothing waits for the statement's result: in a pipelined step commit it goes
    to the database with the commit's other writes.
    """
    names = tuple(field.name for field in _INSERTED_FIELDS)
    values = []
    for row in rows:
        values += db_values(
            models.UsageEntry, names, [getattr(row, field.attname) for field in _INSERTED_FIELDS]
        )
    if not read_back:
        execute(insert_rows(models.UsageEntry, names, len(rows)), values)
        return
    returning = f" RETURNING {column(models.UsageEntry, 'id')}"
    inserted = fetch_all(insert_rows(models.UsageEntry, names, len(rows), returning), values)
    for row, (row_id,) in zip(rows, inserted, strict=True):  # In insertion order on both.
        row.id = row_id


# Every column of an entry but its id, which the database gives it.
_INSERTED_FIELDS = tuple(
    field for field in models.UsageEntry._meta.concrete_fields if not field.primary_key
)


def _row(entry: UsageEntry) -> SimpleNamespace:
    """Return the row to insert for `entry` (`new_row`: a step commit records its usage)."""
    row = new_row(
        models.UsageEntry,
        session_id=entry.session_id,
        run_id=entry.run_id or "",
        step_count=entry.step_count,
        kind=entry.kind,
        created_at=entry.created_at,
    )
    match entry:
        case TokensEntry():
            row.model = entry.model
            for name, column_name in _TOKEN_COLUMNS.items():
                setattr(row, column_name, getattr(entry.tokens, name))
        case ToolEntry():
            row.name = entry.name
            row.success, row.duration_ms = entry.success, entry.duration_ms
        case SubAgentEntry():
            row.name, row.sub_session_id = entry.agent_type, entry.sub_session_id or ""
            row.success, row.duration_ms = entry.success, entry.duration_ms
        case CustomEntry():
            row.metric_type, row.name, row.value = entry.metric_type, entry.name, entry.value
    return row


def _entry(row: models.UsageEntry | SimpleNamespace) -> UsageEntry:
    common: dict[str, Any] = {
        "session_id": row.session_id,
        "run_id": row.run_id or None,
        "step_count": row.step_count,
        "id": row.id,
        "created_at": row.created_at,
    }
    match UsageKind(row.kind):
        case UsageKind.TOKENS:
            tokens = {
                name: getattr(row, column_name) for name, column_name in _TOKEN_COLUMNS.items()
            }
            return TokensEntry(**common, model=row.model, tokens=TokenCounts(**tokens))
        case UsageKind.TOOL:
            return ToolEntry(
                **common, name=row.name, success=row.success, duration_ms=row.duration_ms
            )
        case UsageKind.SUBAGENT:
            return SubAgentEntry(
                **common,
                agent_type=row.name,
                success=row.success,
                sub_session_id=row.sub_session_id or None,
                duration_ms=row.duration_ms,
            )
        case UsageKind.CUSTOM:
            return CustomEntry(
                **common, metric_type=row.metric_type, name=row.name, value=row.value
            )


def _group(row: dict[str, Any]) -> UsageGroup:
    return UsageGroup(
        kind=UsageKind(row["kind"]),
        name=row["name"],
        model=row["model"],
        metric_type=row["metric_type"],
        count=row["entries"],
        successful=row["successful"],
        failed=row["failed"],
        duration_ms=row["duration_sum"],
        tokens=TokenCounts(
            **{name: row[f"{column_name}_sum"] for name, column_name in _TOKEN_COLUMNS.items()}
        ),
        value=row["value_sum"],
        first_at=row["first_at"],
        last_at=row["last_at"],
    )
