"""`SessionStateStore` on the Django ORM, for SQLite and PostgreSQL.

Every write to a session first locks its row (`SELECT ... FOR UPDATE` on PostgreSQL; SQLite
transactions are IMMEDIATE, so the writer holds the database lock from BEGIN). Values read from
the locked row are current, and later statements in the transaction see every commit that came
before the lock, which is what keeps message sequences gap-free and versions honest.
"""

import dataclasses
import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Field, Max, Model, Q
from django.utils import timezone

from sessions_app import models
from sessions_app.connections import kept_cursor, pipelined
from sessions_app.errors import (
    HelixError,
    MessageNotFound,
    RunAlreadyExists,
    RunNotFound,
    SessionAlreadyExists,
    SessionBusy,
    SessionNotFound,
    SubSessionRefNotFound,
    VersionConflict,
)
from sessions_app.stores import rules, search
from sessions_app.stores.base import SessionStateStore
from sessions_app.stores.statements import (
    CHECKPOINT_COLUMNS,
    CLAIMED_RUN_FIELDS,
    COMPACTION_FIELDS,
    NEW_RUN_FIELDS,
    QUEUED_RUN_FIELDS,
    column,
    execute,
    fetch_all,
    fetch_one,
    insert_rows,
    statements,
    update_row,
)
from sessions_app.stores.types import (
    LIVE_STATUSES,
    CasApplied,
    CasRejected,
    CasResult,
    Checkpoint,
    CheckpointMeta,
    CommitResult,
    Compaction,
    InterruptFlagInfo,
    Lease,
    MergeResult,
    Message,
    MessageHit,
    MessageRole,
    PaginatedMessages,
    PaginatedSessions,
    QueuedRun,
    ReapedSession,
    RunRecord,
    RunStatus,
    SessionOrdering,
    SessionState,
    SessionStatus,
    SessionSummary,
    StagedChange,
    StagedChangeStatus,
    StagedToolChange,
    StalledRun,
    StepClaim,
    StepWrites,
    SubSessionMode,
    SubSessionRef,
    SubSessionRefUpdate,
    ToolCallRecord,
    merge_op_from_json,
    merge_op_to_json,
)
from sessions_app.stores.values import db_values, new_row, row_db_values

_RUN_METADATA = models.Run._meta.get_field("metadata")
_OUTCOME = models.ToolCallRecord._meta.get_field("outcome")
# What an inserted message row holds: its place in the tree, then what it says (`_said`).
_MESSAGE_INSERT_FIELDS = (
    "id",
    "session",
    "sequence",
    "parent",
    "created_at",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "parts",
    "metadata",
)
_SUMMARY_FIELDS = (
    "id",
    "name",
    "model",
    "source",
    "agent_type",
    "status",
    "step_count",
    "message_count",
    "parent_session_id",
    "root_session_id",
    "owner_id",
    "user_id",
    "tags",
    "metadata",
    "expires_at",
    "version",
    "created_at",
    "updated_at",
)
_ORDERINGS = {
    "created_at": (F("created_at").asc(), F("id").asc()),
    "-created_at": (F("created_at").desc(), F("id").desc()),
    "updated_at": (F("updated_at").asc(), F("id").asc()),
    "-updated_at": (F("updated_at").desc(), F("id").desc()),
    "expires_at": (F("expires_at").asc(nulls_last=True), F("id").asc()),
}


# A path of the session's messages, the start message first and then its ancestors, at most
# the given number, each row ending with whether the session has compactions (`compacted`, so
# that a history read of a session without any reads nothing more). `{start}` is the start
# message's id: a parameter, or LATEST_LEAF.
HISTORY = """
WITH RECURSIVE path AS (
    SELECT {columns}, 1 AS depth FROM sessions_app_message m
    WHERE m.session_id = %s AND m.id = {start}
    UNION ALL
    SELECT {columns}, path.depth + 1 FROM sessions_app_message m
    JOIN path ON m.id = path.parent_id
    WHERE path.depth < %s
)
SELECT *, EXISTS (SELECT 1 FROM sessions_app_compaction c WHERE c.session_id = %s) AS compacted
FROM path ORDER BY depth
"""
# The end of a session's active branch: the message appended last, a leaf since its answers
# would have been appended after it. The (session, sequence) constraint's index serves it.
LATEST_LEAF = """(
    SELECT l.id FROM sessions_app_message l WHERE l.session_id = %s
    ORDER BY l.sequence DESC LIMIT 1
)"""
# The model's columns only: not PostgreSQL's search vector, which a step has no use for.
MESSAGE_FIELDS = models.Message._meta.concrete_fields
MESSAGE_ATTRIBUTES = [field.attname for field in MESSAGE_FIELDS]
MESSAGE_COLUMNS = ", ".join(f"m.{field.column}" for field in MESSAGE_FIELDS)


class ORMSessionStateStore(SessionStateStore):
    # Session lifecycle

    def create_session(
        self,
        session_id: str | None = None,
        *,
        agent_type: str,
        stream_id: str | None = None,
        parent_session_id: str | None = None,
        root_session_id: str | None = None,
        owner_id: int | None = None,
        user_id: str | None = None,
        tags: Sequence[str] = (),
        metadata: Mapping[str, str] | None = None,
        custom_state: dict[str, Any] | None = None,
        expires_at: datetime | None = None,
        tracing_context: dict[str, Any] | None = None,
        name: str | None = None,
        model: str | None = None,
        source: str | None = None,
    ) -> SessionState:
        session_id = rules.check_identifier(
            "session id", models.generate_id() if session_id is None else session_id
        )
        now = timezone.now()
        row = new_row(
            models.AgentSession,
            id=session_id,
            agent_type=rules.check_identifier("agent type", agent_type),
            stream_id=rules.check_identifier("stream id", stream_id or session_id),
            parent_session_id=parent_session_id or "",
            root_session_id=root_session_id or "",
            owner_id=owner_id,
            user_id=rules.check_name(user_id or "", "user id"),
            tags=rules.check_tags(tags),
            metadata=rules.check_metadata(metadata or {}),
            custom_state=custom_state,
            expires_at=expires_at,
            tracing_context=tracing_context,
            name=rules.check_name(name or ""),
            model=rules.check_name(model or "", "model"),
            source=rules.check_name(source or "", "source"),
            created_at=now,
            updated_at=now,
        )
        if not _insert_session(row):
            raise SessionAlreadyExists(session_id)
        return _session_state(row)

    def rename_session(self, session_id: str, name: str) -> None:
        if not models.AgentSession.objects.filter(pk=session_id).update(
            name=rules.check_name(name), updated_at=timezone.now()
        ):
            raise SessionNotFound(session_id)

    def session_exists(self, session_id: str) -> bool:
        return models.AgentSession.objects.filter(pk=session_id).exists()

    def delete_session(self, session_id: str) -> bool:
        deleted, _ = models.AgentSession.objects.filter(pk=session_id).delete()
        return deleted > 0

    def update_labels(self, session_id: str, labels: Mapping[str, Any]) -> SessionState:
        changes = rules.check_labels(labels)
        with transaction.atomic():
            locked = _lock(session_id, "version", "lease_holder", "lease_expires_at")
            lease = locked["lease_holder"], locked["lease_expires_at"]
            if rules.lease_is_live(*lease, timezone.now()):
                raise SessionBusy(session_id)
            _write_state(session_id, locked["version"], **changes)
        return self.load_state(session_id)

    # State

    def load_state(self, session_id: str) -> SessionState | None:
        found = _fetch_named(statements(connection.vendor).load_session, [session_id])
        if found is None:
            return None
        row = _read_session_row(found)
        return _session_state(row, row.interrupt_flag)

    def save_state(
        self, session_id: str, state: SessionState, *, expected_version: int | None = None
    ) -> int:
        with transaction.atomic():
            version = _lock(session_id, "version")["version"]
            _check_version(session_id, expected_version, version)
            return _write_state(session_id, version, **_columns(rules.state_fields(state)))

    def save_state_and_promote_staging(
        self,
        session_id: str,
        state: SessionState,
        messages: Sequence[Message],
        checkpoint: CheckpointMeta,
        *,
        expected_version: int | None = None,
        release_lease_of: str | None = None,
        stage: Sequence[StagedToolChange] = (),
        forget_tool_calls: bool = False,
        expected_history_revision: int | None = None,
    ) -> CommitResult:
        rules.check_checkpoint_meta(checkpoint)
        staged = self._staged_rows(session_id, checkpoint.step_id, stage)
        sql = statements(connection.vendor)
        now = timezone.now()
        refused: HelixError | ValueError | None = None
        # No savepoint in the caller's transaction (the step's): what is refused is refused
        # before any write, and the caller's transaction stays usable; a database error fails
        # it whole.
        with transaction.atomic(savepoint=False):
            try:
                locked = fetch_one(sql.lock_for_commit, [session_id, session_id])
                if locked is None:
                    raise SessionNotFound(session_id)
                (
                    version,
                    message_count,
                    lease_holder,
                    history_revision,
                    flag_reason,
                    flag_set_at,
                    *last,
                ) = locked
                _check_version(session_id, expected_version, version)
                planned = _plan_messages(session_id, messages, now, last=last)
                fields = rules.state_fields(state)
            except (HelixError, ValueError) as error:  # Bad input or a lost race.
                refused = error
            else:
                with pipelined():  # Nothing below reads a result: one round trip for all.
                    committed, checkpoint_id = self._write_commit(
                        session_id,
                        state,
                        fields,
                        planned,
                        checkpoint,
                        now=now,
                        version=version,
                        message_count=message_count,
                        history_revision=history_revision,
                        release=release_lease_of is not None and lease_holder == release_lease_of,
                        staged=staged,
                        forget_tool_calls=forget_tool_calls,
                    )
        if refused is not None:
            raise refused
        revision = history_revision + bool(planned)
        flag = None if flag_set_at is None else _read_flag(flag_reason, flag_set_at)
        return CommitResult(
            checkpoint_id=checkpoint_id,
            state=dataclasses.replace(committed, interrupt_flag=flag, updated_at=now),
            messages=planned,
            history_revision=revision if history_revision == expected_history_revision else None,
            revision=revision,
        )

    def _write_commit(
        self,
        session_id: str,
        state: SessionState,
        fields: dict[str, Any],
        planned: list[Message],
        checkpoint: CheckpointMeta,
        *,
        now: datetime,
        version: int,
        message_count: int,
        history_revision: int,
        release: bool,
        staged: list[tuple[Any, ...]],
        forget_tool_calls: bool,
    ) -> tuple[SessionState, str]:
        """Write a checked step commit in the open transaction; return the session as it left
        it (`rules.committed_state`) and the checkpoint's id."""
        sql = statements(connection.vendor)
        _store_messages(session_id, planned, now)
        message_count += len(planned)
        lease = {"lease_abandoned": 0}  # The step finished.
        if release:
            lease |= {"lease_holder": "", "lease_expires_at": None}
        history = {"history_revision": history_revision + 1} if planned else {}
        new_version = _write_state(
            session_id,
            version,
            now=now,
            message_count=message_count,
            **_columns(fields),
            **lease,
            **history,
        )
        committed = rules.committed_state(state, fields, new_version, message_count)
        checkpoint_id = models.generate_id()
        # The step's changes staged before its commit are promoted first; then its own are
        # written promoted, each replacing an earlier change of its call.
        promote = [
            StagedChangeStatus.PROMOTED.value,
            checkpoint_id,
            session_id,
            StagedChangeStatus.STAGED.value,
            checkpoint.step_id,
        ]
        row = db_values(
            models.Checkpoint,
            CHECKPOINT_COLUMNS,
            [
                checkpoint_id,
                session_id,
                checkpoint.run_id or "",
                checkpoint.step_id,
                checkpoint.step_count,
                message_count,
                checkpoint.stream_sequence,
                committed.snapshot(),
                now,
                checkpoint.timings,
            ],
        )
        if sql.promote_staged_and_insert_checkpoint is not None:
            execute(sql.promote_staged_and_insert_checkpoint, promote + row)
        else:
            execute(sql.promote_staged, promote)
            execute(sql.insert_checkpoint, row)
        _upsert_staged(
            staged, status=StagedChangeStatus.PROMOTED, checkpoint_id=checkpoint_id, now=now
        )
        if forget_tool_calls:
            execute(sql.forget_tool_calls, [session_id, checkpoint.step_id])
        return committed, checkpoint_id

    # Atomic operations

    def append_messages(self, session_id: str, messages: Sequence[Message]) -> list[Message]:
        with transaction.atomic():
            message_count = _lock(session_id, "message_count")["message_count"]
            appended = _insert_messages(session_id, messages, timezone.now())
            if appended:
                _touch(
                    session_id, message_count=message_count + len(appended), **_history_changed()
                )
        return appended

    def merge_custom_state(self, session_id: str, writes: StepWrites) -> MergeResult:
        with transaction.atomic():
            locked = _lock(session_id, "custom_state", "version")
            custom_state, warnings = rules.apply_merge_ops(locked["custom_state"], writes)
            new_version = _write_state(session_id, locked["version"], custom_state=custom_state)
        return MergeResult(warnings=warnings, new_version=new_version)

    def set_custom_state(
        self,
        session_id: str,
        custom_state: dict[str, Any] | None,
        *,
        expected_version: int | None = None,
    ) -> int:
        with transaction.atomic():
            locked = _lock(session_id, "version", "lease_holder", "lease_expires_at")
            if rules.lease_is_live(
                locked["lease_holder"], locked["lease_expires_at"], timezone.now()
            ):
                raise SessionBusy(session_id)
            _check_version(session_id, expected_version, locked["version"])
            return _write_state(session_id, locked["version"], custom_state=custom_state)

    def update_status(self, session_id: str, status: SessionStatus) -> int:
        status = SessionStatus(status)
        with transaction.atomic():
            version = _lock(session_id, "version")["version"]
            return _write_state(session_id, version, status=status)

    def increment_step_count(self, session_id: str) -> int:
        with transaction.atomic():
            locked = _lock(session_id, "step_count", "version")
            step_count = locked["step_count"] + 1
            _write_state(session_id, locked["version"], step_count=step_count)
        return step_count

    def compare_and_set_status(
        self,
        session_id: str,
        expected_statuses: Iterable[SessionStatus],
        new_status: SessionStatus,
        *,
        interrupt_context: dict[str, Any] | None = None,
        error: str | None = None,
        failure_reason: str | None = None,
        expected_version: int | None = None,
    ) -> CasResult:
        expected = rules.normalize_statuses(expected_statuses)
        columns: dict[str, Any] = {"status": SessionStatus(new_status)}
        if interrupt_context is not None:
            columns["interrupt_context"] = interrupt_context
        if error is not None:
            columns["error"] = error
        if failure_reason is not None:
            columns["failure_reason"] = failure_reason
        with transaction.atomic():
            locked = _lock(session_id, "status", "version")
            if locked["status"] not in expected or (
                expected_version is not None and expected_version != locked["version"]
            ):
                return CasRejected(
                    current_status=SessionStatus(locked["status"]),
                    current_version=locked["version"],
                )
            return CasApplied(new_version=_write_state(session_id, locked["version"], **columns))

    # Step leases

    def acquire_lease(self, session_id: str, holder: str, ttl: float) -> Lease | None:
        now = timezone.now()
        with transaction.atomic():
            locked = _lock(
                session_id, "version", "lease_holder", "lease_expires_at", "lease_abandoned"
            )
            previous = locked["lease_holder"]
            if previous not in ("", holder) and locked["lease_expires_at"] > now:
                return None
            taken_over = previous not in ("", holder)
            abandoned = locked["lease_abandoned"] + taken_over
            version = _write_state(
                session_id,
                locked["version"],
                lease_holder=holder,
                lease_expires_at=now + timedelta(seconds=ttl),
                lease_abandoned=abandoned,
            )
            return Lease(version=version, taken_over=taken_over, abandoned=abandoned)

    def claim_step(self, session_id: str, holder: str, ttl: float) -> StepClaim | None:
        sql = statements(connection.vendor).claim_step
        if sql is None:  # SQLite: the default claim, and the history revision under the lease.
            claim = super().claim_step(session_id, holder, ttl)
            if claim is None:
                return None
            revisions = models.AgentSession.objects.filter(pk=session_id)
            revision = revisions.values_list("history_revision", flat=True).first()
            return dataclasses.replace(claim, history_revision=revision)
        now = timezone.now()
        expires_at = now + timedelta(seconds=ttl)
        params = [session_id, holder, expires_at, holder, holder, now]
        # One statement locks, checks and takes the lease and returns the new row, what the
        # lease held before, and the interrupt flag: one round trip, atomic on its own.
        found = _fetch_named(sql, params)
        if found is None:
            _require(session_id)
            return None
        row = _read_session_row(found)
        taken_over = row.previous_holder not in ("", holder)
        lease = Lease(version=row.version, taken_over=taken_over, abandoned=row.lease_abandoned)
        state = _session_state(row, row.interrupt_flag)
        return StepClaim(
            lease=lease,
            state=state,
            run=_claimed_run(row),
            history_revision=row.history_revision,
        )

    def renew_lease(self, session_id: str, holder: str, ttl: float) -> bool:
        expires_at = timezone.now() + timedelta(seconds=ttl)
        return _update_lease(session_id, holder, lease_expires_at=expires_at)

    def renew_leases(self, holders: Mapping[str, str], ttl: float) -> set[str]:
        if not holders:
            return set()
        expires_at = timezone.now() + timedelta(seconds=ttl)
        params = [connection.ops.adapt_datetimefield_value(expires_at)]
        for session_id, holder in holders.items():
            params += [session_id, holder]
        renewed = fetch_all(statements(connection.vendor).renew_leases(len(holders)), params)
        return {session_id for (session_id,) in renewed}

    def release_lease(self, session_id: str, holder: str, *, clean: bool = True) -> bool:
        if clean:
            return _update_lease(
                session_id, holder, lease_holder="", lease_expires_at=None, lease_abandoned=0
            )
        return _update_lease(session_id, holder, lease_expires_at=timezone.now())

    # Durable interrupt flags

    def set_interrupt_flag(self, session_id: str, reason: str | None = None) -> None:
        with transaction.atomic():
            _lock(session_id, "id")
            models.InterruptFlag.objects.update_or_create(
                session_id=session_id,
                defaults={"reason": reason or "", "set_at": timezone.now()},
            )

    def check_interrupt_flag(self, session_id: str) -> InterruptFlagInfo | None:
        row = models.InterruptFlag.objects.filter(session_id=session_id).first()
        return None if row is None else _interrupt_flag(row)

    def check_interrupt_flags(self, session_ids: Collection[str]) -> dict[str, InterruptFlagInfo]:
        # Written out: every worker's watcher reads its steps' flags at each beat.
        wanted = list(session_ids)
        if not wanted:
            return {}
        rows = fetch_all(*statements(connection.vendor).interrupt_flags(wanted))
        return {session_id: _read_flag(reason, set_at) for session_id, reason, set_at in rows}

    def clear_interrupt_flag(self, session_id: str) -> None:
        execute(statements(connection.vendor).clear_interrupt_flag, [session_id])

    # Sub-agent tracking

    def add_sub_session_refs(self, session_id: str, refs: Sequence[SubSessionRef]) -> None:
        now = timezone.now()
        rows = [
            models.SubSessionRef(
                session_id=session_id,
                sub_session_id=rules.check_identifier("sub-session id", ref.sub_session_id),
                agent_type=ref.agent_type,
                parent_tool_call_id=ref.parent_tool_call_id,
                status=SessionStatus(ref.status),
                mode=ref.mode,
                name=ref.name or "",
                remote=ref.remote,
                started_at=ref.started_at or now,
                completed_at=ref.completed_at,
            )
            for ref in refs
        ]
        with transaction.atomic():
            _lock(session_id, "id")
            models.SubSessionRef.objects.bulk_create(rows, ignore_conflicts=True)

    def update_sub_session_ref(self, session_id: str, update: SubSessionRefUpdate) -> None:
        status = SessionStatus(update.status)
        with transaction.atomic():
            _lock(session_id, "id")
            updated = models.SubSessionRef.objects.filter(
                session_id=session_id, sub_session_id=update.sub_session_id
            ).update(status=status, completed_at=update.completed_at)
        if not updated:
            raise SubSessionRefNotFound(session_id, update.sub_session_id)

    def get_sub_session_refs(self, session_id: str) -> list[SubSessionRef]:
        _require(session_id)
        rows = models.SubSessionRef.objects.filter(session_id=session_id).order_by(
            "started_at", "id"
        )
        return [_sub_session_ref(row) for row in rows]

    # Messages

    def get_messages(
        self, session_id: str, *, offset: int = 0, limit: int = 100
    ) -> PaginatedMessages:
        rules.check_page(offset, limit)
        total = _require(session_id, "message_count")["message_count"]
        rows = models.Message.objects.filter(session_id=session_id).order_by("sequence")
        messages = [_message(row) for row in rows[offset : offset + limit]]
        return PaginatedMessages(
            messages=messages,
            total=total,
            offset=offset,
            limit=limit,
            has_more=offset + len(messages) < total,
        )

    def get_message_count(self, session_id: str) -> int:
        return _require(session_id, "message_count")["message_count"]

    def get_message(self, session_id: str, message_id: str) -> Message | None:
        row = models.Message.objects.filter(session_id=session_id, pk=message_id).first()
        return None if row is None else _message(row)

    def get_latest_leaf(self, session_id: str) -> Message | None:
        _require(session_id)
        row = models.Message.objects.filter(session_id=session_id).order_by("-sequence").first()
        return None if row is None else _message(row)

    def get_path(
        self, session_id: str, leaf_id: str | None = None, *, chunk_size: int = 1000
    ) -> list[Message]:
        return _path(session_id, leaf_id, chunk_size)[0]

    def get_branches(self, session_id: str, message_id: str) -> list[Message]:
        rows = models.Message.objects.filter(session_id=session_id, parent_id=message_id)
        return [_message(row) for row in rows.order_by("sequence")]

    def update_message(self, session_id: str, message: Message) -> Message:
        with transaction.atomic():
            _lock(session_id, "id")
            row = models.Message.objects.filter(session_id=session_id, pk=message.id).first()
            if row is None:
                raise MessageNotFound(session_id, str(message.id))
            updated = rules.updated_message(_message(row), message)
            models.Message.objects.filter(pk=row.pk).update(**_said(updated))
            _touch(session_id, **_history_changed())
        return updated

    def delete_messages(self, session_id: str, message_ids: Iterable[str]) -> int:
        with transaction.atomic():
            message_count = _lock(session_id, "message_count")["message_count"]
            deleted, _ = models.Message.objects.filter(
                session_id=session_id, pk__in=list(message_ids)
            ).delete()
            if deleted:
                _touch(session_id, message_count=message_count - deleted, **_history_changed())
        return deleted

    def clear_messages(self, session_id: str) -> int:
        with transaction.atomic():
            message_count = _lock(session_id, "message_count")["message_count"]
            models.Compaction.objects.filter(session_id=session_id).delete()
            models.Message.objects.filter(session_id=session_id).delete()
            _touch(session_id, message_count=0, **_history_changed())
        return message_count

    def add_compaction(
        self, session_id: str, summary: str, from_message_id: str, to_message_id: str
    ) -> Compaction:
        with transaction.atomic():
            _lock(session_id, "id")
            held = set(
                models.Message.objects.filter(
                    session_id=session_id, pk__in=[from_message_id, to_message_id]
                ).values_list("pk", flat=True)
            )
            for end in (from_message_id, to_message_id):
                if end not in held:
                    raise MessageNotFound(session_id, end)
            row = models.Compaction.objects.create(
                session_id=session_id,
                from_message_id=from_message_id,
                to_message_id=to_message_id,
                summary=summary,
            )
            models.AgentSession.objects.filter(pk=session_id).update(**_history_changed())
        return _compaction(row)

    def get_history(
        self, session_id: str, leaf_id: str | None = None, *, chunk_size: int = 1000
    ) -> list[Message]:
        path, compacted = _path(session_id, leaf_id, chunk_size)  # Finds the session.
        return rules.apply_compactions(path, _compactions(session_id) if compacted else [])

    def get_compactions(self, session_id: str) -> list[Compaction]:
        _require(session_id)
        return _compactions(session_id)

    supports_history_revisions = True
    supports_search = True

    def search_messages(self, session_id: str, query: str, *, limit: int = 20) -> list[MessageHit]:
        rules.check_page(0, limit)
        hits = search.search_messages(query, "phrase", limit, session_id=session_id)
        if not hits:
            _require(session_id)  # Nothing found: in a session, or for want of one?
        return hits

    def search_owner_messages(
        self, owner_id: int, query: str, *, limit: int = 20
    ) -> list[MessageHit]:
        rules.check_page(0, limit)
        return search.search_messages(query, "all_words", limit, owner_id=owner_id)

    def truncate_messages(self, session_id: str, message_count: int) -> int:
        if message_count < 0:
            raise ValueError("message_count must not be negative.")
        with transaction.atomic():
            current = _lock(session_id, "message_count")["message_count"]
            if message_count >= current:
                return 0
            messages = models.Message.objects.filter(session_id=session_id)
            if message_count:
                last_kept = messages.order_by("sequence").values_list("sequence", flat=True)[
                    message_count - 1
                ]
                messages = messages.filter(sequence__gt=last_kept)
            # Children go with their parents by database cascade, so the statement's own row
            # count can undercount; the session's exact count cannot.
            messages.delete()
            _touch(session_id, message_count=message_count, **_history_changed())
        return current - message_count

    # Cross-session listing

    def list_sessions(
        self,
        *,
        owner_id: int | None = None,
        user_id: str | None = None,
        agent_type: str | None = None,
        status: SessionStatus | Iterable[SessionStatus] | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        parent_session_id: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        updated_after: datetime | None = None,
        updated_before: datetime | None = None,
        expired_by: datetime | None = None,
        order_by: SessionOrdering = "-created_at",
        offset: int = 0,
        limit: int = 50,
    ) -> PaginatedSessions:
        rules.check_page(offset, limit)
        if order_by not in _ORDERINGS:
            raise ValueError(f"order_by must be one of {', '.join(_ORDERINGS)}.")
        filters: dict[str, Any] = {
            "owner_id": owner_id,
            "user_id": user_id,
            "agent_type": agent_type,
            "parent_session_id": parent_session_id,
            "created_at__gt": created_after,
            "created_at__lt": created_before,
            "updated_at__gt": updated_after,
            "updated_at__lt": updated_before,
            "expires_at__lte": expired_by,
        }
        if status is not None:
            filters["status__in"] = rules.normalize_statuses(status)
        if tags:
            filters["tags__superset"] = list(tags)
        if metadata:
            filters["metadata__superset"] = dict(metadata)
        sessions = models.AgentSession.objects.filter(
            **{lookup: value for lookup, value in filters.items() if value is not None}
        )
        total = sessions.count()
        rows = sessions.order_by(*_ORDERINGS[order_by]).values(*_SUMMARY_FIELDS)
        summaries = [_session_summary(row) for row in rows[offset : offset + limit]]
        return PaginatedSessions(
            sessions=summaries,
            total=total,
            offset=offset,
            limit=limit,
            has_more=offset + len(summaries) < total,
        )

    def list_expired_sessions(
        self,
        now: datetime,
        *,
        statuses: Iterable[SessionStatus] = LIVE_STATUSES,
        after: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> list[SessionSummary]:
        rules.check_page(0, limit)
        sessions = models.AgentSession.objects.filter(
            expires_at__lte=now, status__in=rules.normalize_statuses(statuses)
        )
        if after is not None:
            expires_at, session_id = after
            sessions = sessions.filter(
                Q(expires_at__gt=expires_at) | Q(expires_at=expires_at, id__gt=session_id)
            )
        rows = sessions.order_by("expires_at", "id").values(*_SUMMARY_FIELDS)[:limit]
        return [_session_summary(row) for row in rows]

    def reap_expired_sessions(
        self,
        now: datetime,
        *,
        error: str,
        failure_reason: str,
        delete: bool = False,
        session_ids: Collection[str] | None = None,
        limit: int = 100,
    ) -> list[ReapedSession]:
        rules.check_page(0, limit)
        taken_at = timezone.now()
        expired = models.AgentSession.objects.filter(expires_at__lte=now).exclude(
            ~Q(lease_holder="") & Q(lease_expires_at__gt=taken_at)
        )
        if not delete:  # As `session_live_expiry` says it, so the planner picks that index.
            expired = expired.exclude(status__in=models.TERMINAL_STATUS_VALUES)
        if session_ids is not None:
            expired = expired.filter(pk__in=list(session_ids))
        with transaction.atomic():
            # SKIP LOCKED: a concurrent sweep's sessions are its own, not ours to wait for.
            rows = list(
                expired.order_by("expires_at", "id")
                .select_for_update(skip_locked=True)
                .values("id", "agent_type", "stream_id", "parent_session_id")[:limit]
            )
            taken = models.AgentSession.objects.filter(pk__in=[row["id"] for row in rows])
            if delete:
                taken.delete()
            else:
                _fail_expired(taken, error, failure_reason, taken_at)
        return [
            ReapedSession(
                session_id=row["id"],
                agent_type=row["agent_type"],
                stream_id=row["stream_id"],
                parent_session_id=row["parent_session_id"] or None,
            )
            for row in rows
        ]

    # Run tracking

    def create_run(
        self,
        session_id: str,
        run_id: str | None = None,
        *,
        turn: int | None = None,
        metadata: dict[str, Any] | None = None,
        session_locked: bool = False,
    ) -> RunRecord:
        run_id = rules.check_identifier(
            "run id", models.generate_id() if run_id is None else run_id
        )
        if statements(connection.vendor).create_run is not None:
            return self._insert_run(session_id, run_id, turn, metadata or {}, session_locked)
        try:
            with transaction.atomic():
                if not session_locked:
                    _lock(session_id, "id")
                if turn is None:
                    runs = models.Run.objects.filter(session_id=session_id)
                    turn = (runs.aggregate(last=Max("turn"))["last"] or 0) + 1
                row = models.Run.objects.create(
                    id=run_id,
                    session_id=session_id,
                    turn=turn,
                    metadata=metadata or {},
                    started_at=timezone.now(),
                )
        except IntegrityError:
            raise RunAlreadyExists(session_id, run_id=run_id, turn=turn) from None
        return _run(row)

    def _insert_run(
        self,
        session_id: str,
        run_id: str,
        turn: int | None,
        metadata: dict[str, Any],
        session_locked: bool,
    ) -> RunRecord:
        """Create a run, locking its session unless the caller holds its lock, then inserting
        it (PostgreSQL)."""
        sql = statements(connection.vendor)
        fresh = new_row(models.Run, id=run_id, session_id=session_id, turn=turn, metadata=metadata)
        # No savepoint in the caller's transaction: what is refused is refused after the
        # block, which then wrote nothing.
        with transaction.atomic(savepoint=False):
            found = session_locked or fetch_one(sql.lock_session, [session_id]) is not None
            params = [*row_db_values(models.Run, fresh, NEW_RUN_FIELDS), session_id]
            returned = fetch_one(sql.create_run, params) if found else None
        if not found:
            raise SessionNotFound(session_id)
        if returned is None:  # Its id, or its turn, is taken.
            if turn is None:
                runs = models.Run.objects.filter(session_id=session_id)
                turn = (runs.aggregate(last=Max("turn"))["last"] or 0) + 1
            raise RunAlreadyExists(session_id, run_id=run_id, turn=turn)
        return _returned_run(returned)

    def update_run_status(
        self,
        run_id: str,
        status: RunStatus,
        *,
        step_count: int | None = None,
        error: str | None = None,
        completed_at: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        status = RunStatus(status)
        if step_count is not None:
            rules.check_count("step count", step_count)
        sql = statements(connection.vendor).update_run_status
        if sql is not None:  # One statement locks, writes and returns the run.
            completed = rules.run_completed_at(status, completed_at)
            returned = fetch_one(
                sql,
                [
                    status.value,
                    connection.ops.adapt_datetimefield_value(completed),
                    step_count,
                    error,
                    _RUN_METADATA.get_db_prep_save(dict(metadata or {}), connection),
                    run_id,
                ],
            )
            if returned is None:
                raise RunNotFound(run_id)
            return _returned_run(returned)
        # No savepoint in the caller's transaction (a step's end): a missing run is refused
        # after the block, having written nothing, so that transaction stays usable.
        with transaction.atomic(savepoint=False):
            row = models.Run.objects.select_for_update().filter(pk=run_id).first()
            if row is not None:
                _write_run_status(row, status, step_count, error, completed_at, metadata)
        if row is None:
            raise RunNotFound(run_id)
        return _run(row)

    def mark_stalled_runs(self, idle_since: datetime, *, limit: int = 100) -> list[StalledRun]:
        rules.check_page(0, limit)
        now = timezone.now()
        with transaction.atomic():
            rows = list(
                models.Run.objects.select_for_update(skip_locked=True, of=("self",))
                .filter(
                    Q(session__lease_expires_at__isnull=True)
                    | Q(session__lease_expires_at__lt=idle_since),
                    Q(recovered_at__isnull=True) | Q(recovered_at__lt=idle_since),
                    status=RunStatus.RUNNING,
                    session__status=SessionStatus.ACTIVE,
                    session__updated_at__lt=idle_since,
                )
                .order_by("started_at")
                .values_list(
                    "id", "session_id", "session__step_count", "recovered_step", "recoveries"
                )[:limit]
            )
            stalled = []
            for run_id, session_id, step_count, recovered_step, recoveries in rows:
                count = recoveries + 1 if recovered_step == step_count else 1
                models.Run.objects.filter(pk=run_id).update(
                    recovered_at=now, recovered_step=step_count, recoveries=count
                )
                stalled.append(
                    StalledRun(
                        session_id=session_id, run_id=run_id, step=step_count + 1, recoveries=count
                    )
                )
        return stalled

    def get_current_run(self, session_id: str) -> RunRecord | None:
        returned = fetch_one(statements(connection.vendor).current_run, [session_id])
        return None if returned is None else _returned_run(returned)

    def list_runs(self, session_id: str) -> list[RunRecord]:
        _require(session_id)
        return [
            _run(row) for row in models.Run.objects.filter(session_id=session_id).order_by("turn")
        ]

    # Queued runs

    def queue_run(self, session_id: str, run_id: str, run_input: Any) -> bool:
        run_id = rules.check_identifier("run id", run_id)
        with transaction.atomic():
            _lock(session_id, "id")
            run = self.get_current_run(session_id)
            if run is None or run.status != RunStatus.RUNNING:
                return False
            models.QueuedRun.objects.create(session_id=session_id, run_id=run_id, input=run_input)
        return True

    def take_queued_run(self, session_id: str) -> QueuedRun | None:
        sql = statements(connection.vendor).take_queued_run
        if sql is not None:  # One statement finds, locks and deletes the oldest.
            taken = fetch_one(sql, [session_id])
            if taken is None:
                return None
            return _queued_run(
                models.QueuedRun(**_read_fields(models.QueuedRun, QUEUED_RUN_FIELDS, taken))
            )
        with transaction.atomic(savepoint=False):  # Nothing to refuse: no savepoint needed.
            row = (
                models.QueuedRun.objects.select_for_update()
                .filter(session_id=session_id)
                .order_by("id")
                .first()
            )
            if row is not None:
                row.delete()
        return None if row is None else _queued_run(row)

    def list_queued_runs(self, session_id: str) -> list[QueuedRun]:
        rows = models.QueuedRun.objects.filter(session_id=session_id).order_by("id")
        return [_queued_run(row) for row in rows]

    def discard_queued_runs(self, session_id: str) -> int:
        return models.QueuedRun.objects.filter(session_id=session_id).delete()[0]

    # Staging

    def stage_changes(
        self, session_id: str, step_id: str, changes: Sequence[StagedToolChange]
    ) -> None:
        rows = self._staged_rows(session_id, step_id, changes)
        with transaction.atomic(savepoint=False):
            found = _lock_if_found(session_id)
            if found:
                _upsert_staged(
                    rows, status=StagedChangeStatus.STAGED, checkpoint_id="", now=timezone.now()
                )
        if not found:
            raise SessionNotFound(session_id)

    def _staged_rows(
        self, session_id: str, step_id: str, changes: Sequence[StagedToolChange]
    ) -> list[tuple[Any, ...]]:
        """Return the checked changes as staged rows' leading values, one per tool call.

        The values are those of `_STAGED_KEY_FIELDS`; a call's last change wins (PostgreSQL's
        upsert cannot touch a row twice in one statement).
        """
        rules.check_identifier("step id", step_id)
        sizes = rules.check_staged_sizes(session_id, changes, self.max_staged_changes_bytes)
        latest = {
            change.tool_call_id: (change, size) for change, size in zip(changes, sizes, strict=True)
        }
        return [
            (
                session_id,
                step_id,
                change.tool_call_id,
                change.patches,
                [merge_op_to_json(op) for op in change.merge_ops],
                size,
            )
            for change, size in latest.values()
        ]

    def promote_staging(self, session_id: str, step_id: str, checkpoint_id: str) -> int:
        with transaction.atomic():
            _lock(session_id, "id")
            return _staged(session_id, step_id).update(
                status=StagedChangeStatus.PROMOTED, checkpoint_id=checkpoint_id
            )

    def rollback_staging(self, session_id: str, step_id: str) -> int:
        with transaction.atomic():
            _lock(session_id, "id")
            return _staged(session_id, step_id).update(status=StagedChangeStatus.ROLLED_BACK)

    def begin_tool_calls(self, session_id: str, step_id: str, tool_call_ids: Sequence[str]) -> None:
        rules.check_identifier("step id", step_id)
        for tool_call_id in tool_call_ids:
            rules.check_identifier("tool call id", tool_call_id)
        now = timezone.now()
        sql = statements(connection.vendor).begin_tool_calls(len(tool_call_ids))
        if sql is None or not tool_call_ids:
            _require(session_id)
            rows = [
                models.ToolCallRecord(
                    session_id=session_id, step_id=step_id, tool_call_id=call_id, created_at=now
                )
                for call_id in tool_call_ids
            ]
            models.ToolCallRecord.objects.bulk_create(rows, ignore_conflicts=True)
            return
        # One round trip: the statement inserts under the session's row and says if it found it.
        params = [session_id]
        for call_id in tool_call_ids:
            params += [step_id, call_id, now]
        if not fetch_one(sql, params)[0]:
            raise SessionNotFound(session_id)

    def finish_tool_call(
        self, session_id: str, step_id: str, tool_call_id: str, outcome: dict[str, Any]
    ) -> bool:
        finished = execute(
            statements(connection.vendor).finish_tool_call,
            [_OUTCOME.get_db_prep_save(outcome, connection), session_id, step_id, tool_call_id],
        )
        return finished > 0

    def get_tool_calls(self, session_id: str, step_id: str) -> dict[str, ToolCallRecord]:
        rows = models.ToolCallRecord.objects.filter(session_id=session_id, step_id=step_id)
        return {
            call_id: ToolCallRecord(tool_call_id=call_id, outcome=outcome)
            for call_id, outcome in rows.values_list("tool_call_id", "outcome")
        }

    def forget_tool_calls(self, session_id: str, step_id: str) -> int:
        return execute(statements(connection.vendor).forget_tool_calls, [session_id, step_id])

    def get_staged_changes(
        self,
        session_id: str,
        *,
        step_id: str | None = None,
        status: StagedChangeStatus | None = None,
    ) -> list[StagedChange]:
        _require(session_id)
        rows = models.StagedChange.objects.filter(session_id=session_id)
        if step_id is not None:
            rows = rows.filter(step_id=step_id)
        if status is not None:
            rows = rows.filter(status=StagedChangeStatus(status))
        return [_staged_change(row) for row in rows.order_by("created_at", "id")]

    # Checkpoints

    def get_checkpoint(self, session_id: str, checkpoint_id: str) -> Checkpoint | None:
        row = models.Checkpoint.objects.filter(session_id=session_id, pk=checkpoint_id).first()
        return None if row is None else _checkpoint(row)

    def list_checkpoints(self, session_id: str, *, limit: int | None = None) -> list[Checkpoint]:
        _require(session_id)
        rows = models.Checkpoint.objects.filter(session_id=session_id).order_by(
            "-created_at", "-step_count"
        )
        return [_checkpoint(row) for row in (rows if limit is None else rows[:limit])]

    def get_latest_checkpoint(self, session_id: str) -> Checkpoint | None:
        row = (
            models.Checkpoint.objects.filter(session_id=session_id)
            .order_by("-created_at", "-step_count")
            .first()
        )
        return None if row is None else _checkpoint(row)


# Locking and writing


def _queued_run(row: models.QueuedRun) -> QueuedRun:
    return QueuedRun(
        run_id=row.run_id, session_id=row.session_id, input=row.input, queued_at=row.queued_at
    )


def _lock(session_id: str, *fields: str) -> dict[str, Any]:
    """Lock the session's row for the current transaction; return the named fields."""
    rows = models.AgentSession.objects.select_for_update().filter(pk=session_id).values(*fields)
    for locked in rows:  # At most one row: iterating skips the ORDER BY and LIMIT of first().
        return locked
    raise SessionNotFound(session_id)


def _lock_if_found(session_id: str) -> bool:
    """Lock the session's row for the current transaction; return whether there is one."""
    return models.AgentSession.objects.select_for_update().filter(pk=session_id).exists()


def _update_lease(session_id: str, holder: str, **columns: Any) -> bool:
    """Write lease columns if `holder` holds the lease, in one statement; return whether it did."""
    if models.AgentSession.objects.filter(pk=session_id, lease_holder=holder).update(**columns):
        return True
    _require(session_id)
    return False


def _touch(session_id: str, **columns: Any) -> None:
    """Set `updated_at` (and `columns`) of a session the caller holds locked."""
    models.AgentSession.objects.filter(pk=session_id).update(updated_at=timezone.now(), **columns)


def _history_changed() -> dict[str, Any]:
    """Return the update of a locked session whose messages or compactions a write changed."""
    return {"history_revision": F("history_revision") + 1}


def _require(session_id: str, *fields: str) -> dict[str, Any]:
    """Return the named fields of the session; raise `SessionNotFound` if there is none."""
    row = models.AgentSession.objects.filter(pk=session_id).values("id", *fields).first()
    if row is None:
        raise SessionNotFound(session_id)
    return row


def _check_version(session_id: str, expected: int | None, current: int) -> None:
    if expected is not None and expected != current:
        raise VersionConflict(session_id, expected_version=expected, current_version=current)


def _fail_expired(sessions, error: str, failure_reason: str, now: datetime) -> None:
    """Fail locked expired sessions, their unfinished runs and their queued runs, at once."""
    ids = sessions.values("pk")
    sessions.update(
        status=SessionStatus.FAILED,
        error=error,
        failure_reason=failure_reason,
        version=F("version") + 1,
        updated_at=now,
    )
    models.Run.objects.filter(
        session_id__in=ids, status__in=[RunStatus.RUNNING, RunStatus.SUSPENDED]
    ).update(status=RunStatus.FAILED, error=error, completed_at=now)
    models.QueuedRun.objects.filter(session_id__in=ids).delete()


def _write_run_status(
    row: models.Run,
    status: RunStatus,
    step_count: int | None,
    error: str | None,
    completed_at: datetime | None,
    metadata: Mapping[str, Any] | None,
) -> None:
    """Write a locked run's new status and what comes with it."""
    row.status = status
    row.completed_at = rules.run_completed_at(status, completed_at)
    update_fields = ["status", "completed_at"]
    if metadata:
        row.metadata = {**row.metadata, **metadata}
        update_fields.append("metadata")
    if step_count is not None:
        row.step_count = step_count
        update_fields.append("step_count")
    if error is not None:
        row.error = error
        update_fields.append("error")
    row.save(update_fields=update_fields)


# Every column of a session's row, as a new session's insert writes them.
_SESSION_FIELDS = tuple(field.name for field in models.AgentSession._meta.concrete_fields)


def _insert_session(row: SimpleNamespace) -> bool:
    """Insert a new session's row in one written-out statement; return whether it went in.

    A taken id inserts nothing rather than fail: a run's start creates its session inside its
    own transaction, which then needs no savepoint (two round trips) to stay usable.
    """
    taken = f" ON CONFLICT ({column(models.AgentSession, 'id')}) DO NOTHING"
    inserted = execute(
        insert_rows(models.AgentSession, _SESSION_FIELDS, 1, taken),
        row_db_values(models.AgentSession, row, _SESSION_FIELDS),
    )
    return inserted == 1


def _write_state(
    session_id: str, version: int, *, now: datetime | None = None, **columns: Any
) -> int:
    """Write state columns of a locked session with the next version, updated `now` (by
    default, the present); return that version."""
    names = ("version", "updated_at", *columns)
    values = (version + 1, now or timezone.now(), *columns.values())
    execute(
        update_row(models.AgentSession, names),
        [*db_values(models.AgentSession, names, values), session_id],
    )
    return version + 1


def _insert_messages(session_id: str, messages: Sequence[Message], now: datetime) -> list[Message]:
    """Insert messages after the session's last one; the caller holds the session lock."""
    planned = _plan_messages(session_id, messages, now)
    _store_messages(session_id, planned, now)
    return planned


def _plan_messages(
    session_id: str,
    messages: Sequence[Message],
    now: datetime,
    *,
    last: Sequence[Any] | None = None,
) -> list[Message]:
    """Return the messages an append stores (`rules.plan_append`); write nothing.

    `last` is the id and sequence of the session's last message when the caller read them
    under the session lock (both `None` when it has none); otherwise they are read now.
    """
    if not messages:
        return []
    if last is None:
        last = fetch_one(statements(connection.vendor).last_message, [session_id])
    last_id, last_sequence = last or (None, None)
    wanted = rules.lookup_ids(messages)
    stored_sessions = (
        dict(models.Message.objects.filter(pk__in=wanted).values_list("id", "session_id"))
        if wanted
        else {}
    )
    return rules.plan_append(
        session_id,
        messages,
        stored_sessions=stored_sessions,
        last_message_id=last_id,
        last_sequence=last_sequence or 0,
        now=now,
    )


def _store_messages(session_id: str, planned: Sequence[Message], now: datetime) -> None:
    """Insert planned messages in one statement."""
    if not planned:
        return
    values = []
    for message in planned:
        values += db_values(
            models.Message,
            _MESSAGE_INSERT_FIELDS,
            (
                message.id,
                session_id,
                message.sequence,
                message.parent_id,
                now,
                *_said(message).values(),
            ),
        )
    execute(insert_rows(models.Message, _MESSAGE_INSERT_FIELDS, len(planned)), values)


def _said(message: Message) -> dict[str, Any]:
    """Return the columns of what a message says (its place in the tree aside)."""
    return {
        "role": message.role,
        "content": message.content,
        "tool_calls": message.tool_calls,
        "tool_call_id": message.tool_call_id or "",
        "name": message.name or "",
        "parts": message.parts,
        "metadata": message.metadata,
    }


def _path(session_id: str, leaf_id: str | None, chunk_size: int) -> tuple[list[Message], bool]:
    """Return the path to `leaf_id` (or the latest leaf), root first, read `chunk_size`
    messages a statement, and whether the session has compactions (false when it has no
    messages: there is nothing to compact)."""
    rules.check_page(0, chunk_size)
    start, params = (LATEST_LEAF, [session_id]) if leaf_id is None else ("%s", [leaf_id])
    path: list[Message] = []
    compacted = False
    while True:
        sql = HISTORY.format(start=start, columns=MESSAGE_COLUMNS)
        rows = fetch_all(sql, [session_id, *params, chunk_size, session_id])
        path += [_message_from_row(row) for row in rows]
        compacted = compacted or bool(rows and rows[0][-1])
        if len(rows) < chunk_size or path[-1].parent_id is None:
            break
        start, params = "%s", [path[-1].parent_id]
    if not path:
        _require(session_id)
        if leaf_id is not None:
            raise MessageNotFound(session_id, leaf_id)
    return path[::-1], compacted


def _compactions(session_id: str) -> list[Compaction]:
    """Return the session's compactions in the order they were added (a written-out query,
    read without a model instance: a step reads them, and most sessions have none)."""
    rows = fetch_all(statements(connection.vendor).compactions, [session_id])
    return [
        _compaction(SimpleNamespace(**_read_fields(models.Compaction, COMPACTION_FIELDS, row)))
        for row in rows
    ]


def _staged(session_id: str, step_id: str):
    return models.StagedChange.objects.filter(
        session_id=session_id, step_id=step_id, status=StagedChangeStatus.STAGED
    )


_STAGED_KEY_FIELDS = ("session", "step_id", "tool_call_id", "patches", "merge_ops", "size_bytes")
_STAGED_FIELDS = (*_STAGED_KEY_FIELDS, "status", "checkpoint_id", "created_at")


@functools.cache
def _staged_upsert() -> str:
    """Return the ON CONFLICT clause by which a call's new staged change replaces its old one."""
    key = ", ".join(column(models.StagedChange, name) for name in _STAGED_FIELDS[:3])
    updates = ", ".join(
        f"{column(models.StagedChange, name)} = excluded.{column(models.StagedChange, name)}"
        for name in _STAGED_FIELDS[3:]
    )
    return f" ON CONFLICT ({key}) DO UPDATE SET {updates}"


def _upsert_staged(
    rows: Sequence[tuple[Any, ...]], *, status: StagedChangeStatus, checkpoint_id: str, now
) -> None:
    """Stage `rows` (from `_staged_rows`) with `status`, replacing a call's earlier change."""
    if not rows:
        return
    values = []
    for row in rows:
        values += db_values(
            models.StagedChange, _STAGED_FIELDS, (*row, status.value, checkpoint_id, now)
        )
    execute(insert_rows(models.StagedChange, _STAGED_FIELDS, len(rows), _staged_upsert()), values)


def _columns(fields: dict[str, Any]) -> dict[str, Any]:
    """Return the model columns for the normalized mutable fields of a state."""
    columns = dict(fields)
    suspension = {
        "suspended_step_id": columns.pop("suspended_step_id"),
        "suspended_awaiting_children": columns.pop("suspended_awaiting_children"),
    }
    columns["suspension_context"] = suspension if any(suspension.values()) else None
    for name in ("error", "failure_reason", "abort_reason"):
        columns[name] = columns[name] or ""
    return columns


# Rows to typed values


def _session_state(
    row: models.AgentSession | SimpleNamespace, flag: InterruptFlagInfo | None = None
) -> SessionState:
    """Return the session of a row and, if it has one, its interrupt flag."""
    suspension = row.suspension_context or {}
    return SessionState(
        session_id=row.id,
        agent_type=row.agent_type,
        stream_id=row.stream_id,
        parent_session_id=row.parent_session_id or None,
        root_session_id=row.root_session_id or None,
        custom_state=row.custom_state,
        step_count=row.step_count,
        status=SessionStatus(row.status),
        output=row.output,
        error=row.error or None,
        failure_reason=row.failure_reason or None,
        aborted=row.aborted,
        abort_reason=row.abort_reason or None,
        suspended_awaiting_children=suspension.get("suspended_awaiting_children"),
        suspended_step_id=suspension.get("suspended_step_id"),
        pending_client_tool_calls=row.pending_client_tool_calls,
        completed_client_tool_calls=row.completed_client_tool_calls,
        client_tool_call_ownership=row.client_tool_call_ownership,
        interrupt_context=row.interrupt_context,
        tracing_context=row.tracing_context,
        expires_at=row.expires_at,
        owner_id=row.owner_id,
        user_id=row.user_id or None,
        tags=row.tags,
        metadata=row.metadata,
        name=row.name or None,
        model=row.model or None,
        source=row.source or None,
        version=row.version,
        resume_count=row.resume_count,
        message_count=row.message_count,
        interrupt_flag=flag,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _session_summary(row: dict[str, Any]) -> SessionSummary:
    return SessionSummary(
        session_id=row["id"],
        agent_type=row["agent_type"],
        status=SessionStatus(row["status"]),
        step_count=row["step_count"],
        message_count=row["message_count"],
        parent_session_id=row["parent_session_id"] or None,
        root_session_id=row["root_session_id"] or None,
        owner_id=row["owner_id"],
        user_id=row["user_id"] or None,
        tags=row["tags"],
        metadata=row["metadata"],
        name=row["name"] or None,
        model=row["model"] or None,
        source=row["source"] or None,
        expires_at=row["expires_at"],
        version=row["version"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


@functools.cache
def _db_converters(vendor: str, field: Field) -> tuple[Any, list[Callable]]:
    """Return the field's column and the converters the ORM applies to what it reads of it."""
    expression = field.get_col(field.model._meta.db_table)
    converters = connection.ops.get_db_converters(expression) + field.get_db_converters(connection)
    return expression, converters


def _converted(value: Any, expression: Any, converters: list[Callable]) -> Any:
    """Return a value read from the database as the ORM would hand it over."""
    for convert in converters:
        value = convert(value, expression, connection)
    return value


@functools.cache
def _session_converters(vendor: str) -> dict[str, tuple[str, Any, list[Callable]]]:
    """Return, per column of a session row, its field's attribute name, column and converters."""
    return {
        field.column: (field.attname, *_db_converters(vendor, field))
        for field in models.AgentSession._meta.concrete_fields
    }


def _fetch_named(sql: str, params: list[Any]) -> dict[str, Any] | None:
    """Run a statement; return its first row by column name, if any.

    The names are the statement's, kept from its first run: psycopg builds its description
    afresh at each look, an object per column, which for a session's row cost more than
    the statement. A row of another length (a migration added a column) reads them again.
    """
    cursor = kept_cursor()
    cursor.execute(sql, params)
    found = cursor.fetchone()
    if found is None:
        return None
    names = _COLUMN_NAMES.get(sql)
    if names is None or len(names) != len(found):
        names = _COLUMN_NAMES[sql] = tuple(described[0] for described in cursor.description)
    return dict(zip(names, found, strict=True))


# The column names of the statements `_fetch_named` ran, by statement.
_COLUMN_NAMES: dict[str, tuple[str, ...]] = {}


def _read_session_row(values: dict[str, Any]) -> SimpleNamespace:
    """Return a session row a written-out statement read (a claim's, a load's) as the session's
    fields, converted as the ORM would, beside the statement's own columns (a claim's
    `previous_holder` and run's) and `interrupt_flag`, the flag it read: no model instance,
    which would cost more than the statement."""
    row = SimpleNamespace()
    for name, (attname, expression, converters) in _session_converters(connection.vendor).items():
        setattr(row, attname, _converted(values.pop(name), expression, converters))
    vars(row).update(values)
    flagged = row.flag_set_at is not None
    row.interrupt_flag = _read_flag(row.flag_reason, row.flag_set_at) if flagged else None
    return row


def _read_flag(reason: Any, set_at: Any) -> InterruptFlagInfo:
    """Return an interrupt flag from the reason and time a statement read, converted as the
    ORM converts them."""
    fields = _read_fields(models.InterruptFlag, ("reason", "set_at"), (reason, set_at))
    return _interrupt_flag(SimpleNamespace(**fields))


@functools.cache
def _message_converters(vendor: str) -> list[tuple[int, Any, list[Callable]]]:
    """Return, per column of MESSAGE_COLUMNS, the converters the ORM applies to its values."""
    converters = [
        (index, *_db_converters(vendor, field)) for index, field in enumerate(MESSAGE_FIELDS)
    ]
    return [(index, column, found) for index, column, found in converters if found]


def _message_from_row(row: tuple) -> Message:
    """Return the message a row of MESSAGE_COLUMNS (and a trailing depth) holds.

    The row is converted as the ORM would convert it, without building a model instance:
    `get_path` reads whole conversations, and instances cost more than the query.
    """
    values = list(row[: len(MESSAGE_FIELDS)])
    for index, expression, converters in _message_converters(connection.vendor):
        values[index] = _converted(values[index], expression, converters)
    return _message(SimpleNamespace(**dict(zip(MESSAGE_ATTRIBUTES, values, strict=True))))


def _message(row: models.Message | SimpleNamespace) -> Message:
    return Message(
        role=MessageRole(row.role),
        content=row.content,
        id=row.id,
        parent_id=row.parent_id,
        tool_calls=row.tool_calls,
        tool_call_id=row.tool_call_id or None,
        name=row.name or None,
        parts=row.parts,
        metadata=row.metadata,
        sequence=row.sequence,
        created_at=row.created_at,
    )


def _compaction(row: models.Compaction | SimpleNamespace) -> Compaction:
    return Compaction(
        compaction_id=row.id,
        session_id=row.session_id,
        from_message_id=row.from_message_id,
        to_message_id=row.to_message_id,
        summary=row.summary,
        created_at=row.created_at,
    )


def _interrupt_flag(row: models.InterruptFlag | SimpleNamespace) -> InterruptFlagInfo:
    return InterruptFlagInfo(reason=row.reason or None, set_at=row.set_at)


def _sub_session_ref(row: models.SubSessionRef) -> SubSessionRef:
    return SubSessionRef(
        sub_session_id=row.sub_session_id,
        agent_type=row.agent_type,
        parent_tool_call_id=row.parent_tool_call_id,
        status=SessionStatus(row.status),
        mode=SubSessionMode(row.mode),
        name=row.name or None,
        remote=row.remote,
        started_at=row.started_at,
        completed_at=row.completed_at,
    )


def _run(row: models.Run | SimpleNamespace) -> RunRecord:
    return RunRecord(
        run_id=row.id,
        session_id=row.session_id,
        turn=row.turn,
        status=RunStatus(row.status),
        step_count=row.step_count,
        error=row.error or None,
        metadata=row.metadata,
        started_at=row.started_at,
        completed_at=row.completed_at,
    )


def _claimed_run(row: SimpleNamespace) -> RunRecord | None:
    """Return the current run a step claim read beside the session (`CLAIMED_RUN_FIELDS`)."""
    if row.run_id is None:
        return None
    return _returned_run([row.id, *(getattr(row, f"run_{name}") for name in CLAIMED_RUN_FIELDS)])


def _returned_run(returned: Sequence[Any]) -> RunRecord:
    """Return a run from its session id and `CLAIMED_RUN_FIELDS`, as a statement returned them."""
    session_id, *values = returned
    read = _read_fields(models.Run, CLAIMED_RUN_FIELDS, values)
    return _run(SimpleNamespace(session_id=session_id, **read))


def _read_fields(model: type[Model], names: Sequence[str], values: Sequence[Any]) -> dict:
    """Return the model's fields `names` by attribute name, from what a statement read of
    their columns, converted as the ORM converts them."""
    read = {}
    for name, value in zip(names, values, strict=True):
        field = model._meta.get_field(name)
        read[field.attname] = _converted(value, *_db_converters(connection.vendor, field))
    return read


def _staged_change(row: models.StagedChange) -> StagedChange:
    return StagedChange(
        session_id=row.session_id,
        step_id=row.step_id,
        tool_call_id=row.tool_call_id,
        patches=row.patches,
        merge_ops=[merge_op_from_json(op) for op in row.merge_ops],
        size_bytes=row.size_bytes,
        status=StagedChangeStatus(row.status),
        checkpoint_id=row.checkpoint_id or None,
        created_at=row.created_at,
    )


def _checkpoint(row: models.Checkpoint) -> Checkpoint:
    return Checkpoint(
        checkpoint_id=row.id,
        session_id=row.session_id,
        run_id=row.run_id or None,
        step_id=row.step_id,
        step_count=row.step_count,
        message_count=row.message_count,
        stream_sequence=row.stream_sequence,
        state=row.state,
        created_at=row.created_at,
        timings=row.timings,
    )
