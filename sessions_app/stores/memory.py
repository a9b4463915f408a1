"""`SessionStateStore` in process memory, for tests and single-process development.

It applies the ORM backend's rules (shared through `rules`), limits and errors. Values are
copied through JSON on the way in, so nothing the database would refuse can be stored and no
caller keeps a live reference, and deep-copied on the way out. One lock serializes every call,
as the database's row lock serializes writers.
"""

import copy
import dataclasses
import json
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from sessions_app.errors import (
    MessageNotFound,
    RunAlreadyExists,
    RunNotFound,
    SessionAlreadyExists,
    SessionBusy,
    SessionNotFound,
    SubSessionRefNotFound,
    VersionConflict,
)
from sessions_app.models import generate_id
from sessions_app.stores import rules
from sessions_app.stores.base import SessionStateStore
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
    StepWrites,
    SubSessionRef,
    SubSessionRefUpdate,
    ToolCallRecord,
    merge_op_from_json,
    merge_op_to_json,
)

_JSON_STATE_FIELDS = frozenset(
    {
        "custom_state",
        "output",
        "suspended_awaiting_children",
        "pending_client_tool_calls",
        "completed_client_tool_calls",
        "client_tool_call_ownership",
        "interrupt_context",
        "tracing_context",
        "tags",
        "metadata",
    }
)
_ORDERINGS = {
    "created_at": (lambda s: (s.created_at, s.session_id), False),
    "-created_at": (lambda s: (s.created_at, s.session_id), True),
    "updated_at": (lambda s: (s.updated_at, s.session_id), False),
    "-updated_at": (lambda s: (s.updated_at, s.session_id), True),
    "expires_at": (
        lambda s: (s.expires_at is None, s.expires_at or s.created_at, s.session_id),
        False,
    ),
}


def _json(value: Any) -> Any:
    """Return a deep copy of a JSON value; raise `TypeError` for anything JSON cannot hold."""
    return json.loads(json.dumps(value))


class InMemorySessionStateStore(SessionStateStore):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._lock = threading.RLock()
        self._sessions: dict[str, SessionState] = {}
        self._messages: dict[str, list[Message]] = {}
        self._compactions: dict[str, list[Compaction]] = {}
        self._message_sessions: dict[str, str] = {}
        self._flags: dict[str, InterruptFlagInfo] = {}
        self._leases: dict[str, tuple[str, datetime]] = {}
        self._abandoned: dict[str, int] = {}  # Lease holders in a row that left their step.
        self._sub_session_refs: dict[str, dict[str, SubSessionRef]] = {}
        self._runs: dict[str, RunRecord] = {}
        # Per run: when the recovery sweep last found it stalled, at which step, how often.
        self._recovered: dict[str, tuple[datetime, int, int]] = {}
        self._queued: dict[str, list[QueuedRun]] = {}
        self._checkpoints: dict[str, list[Checkpoint]] = {}
        self._staged: dict[str, dict[tuple[str, str], StagedChange]] = {}
        # Per session: (step id, tool call id) -> the outcome, `None` while the call runs.
        self._tool_calls: dict[str, dict[tuple[str, str], dict[str, Any] | None]] = {}

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
            "session id", generate_id() if session_id is None else session_id
        )
        now = timezone.now()
        state = SessionState(
            session_id=session_id,
            agent_type=rules.check_identifier("agent type", agent_type),
            stream_id=rules.check_identifier("stream id", stream_id or session_id),
            parent_session_id=parent_session_id or None,
            root_session_id=root_session_id or None,
            owner_id=owner_id,
            user_id=rules.check_name(user_id or "", "user id") or None,
            tags=rules.check_tags(tags),
            metadata=rules.check_metadata(metadata or {}),
            custom_state=_json(custom_state),
            expires_at=expires_at,
            tracing_context=_json(tracing_context),
            name=rules.check_name(name or "") or None,
            model=rules.check_name(model or "", "model") or None,
            source=rules.check_name(source or "", "source") or None,
            created_at=now,
            updated_at=now,
        )
        with self._lock:
            if session_id in self._sessions:
                raise SessionAlreadyExists(session_id)
            self._sessions[session_id] = state
            self._messages[session_id] = []
            self._compactions[session_id] = []
            self._sub_session_refs[session_id] = {}
            self._checkpoints[session_id] = []
            self._staged[session_id] = {}
            self._tool_calls[session_id] = {}
            return self._state_out(session_id)

    def rename_session(self, session_id: str, name: str) -> None:
        name = rules.check_name(name)
        with self._lock:
            self._get(session_id)
            self._touch(session_id, name=name or None)

    def session_exists(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._sessions

    def delete_session(self, session_id: str) -> bool:
        with self._lock:
            if self._sessions.pop(session_id, None) is None:
                return False
            for message in self._messages.pop(session_id):
                del self._message_sessions[message.id]
            self._flags.pop(session_id, None)
            self._leases.pop(session_id, None)
            self._abandoned.pop(session_id, None)
            self._compactions.pop(session_id)
            self._sub_session_refs.pop(session_id)
            self._checkpoints.pop(session_id)
            self._staged.pop(session_id)
            self._tool_calls.pop(session_id)
            for run_id in [r.run_id for r in self._runs.values() if r.session_id == session_id]:
                del self._runs[run_id]
                self._recovered.pop(run_id, None)
            self._queued.pop(session_id, None)
            return True

    def update_labels(self, session_id: str, labels: Mapping[str, Any]) -> SessionState:
        changes = rules.check_labels(labels)
        with self._lock:
            stored = self._get(session_id)
            holder, expires_at = self._leases.get(session_id, ("", None))
            if rules.lease_is_live(holder, expires_at, timezone.now()):
                raise SessionBusy(session_id)
            self._write_state(stored, **copy.deepcopy(changes))
            return self._state_out(session_id)

    # State

    def load_state(self, session_id: str) -> SessionState | None:
        with self._lock:
            if session_id not in self._sessions:
                return None
            return self._state_out(session_id)

    def save_state(
        self, session_id: str, state: SessionState, *, expected_version: int | None = None
    ) -> int:
        fields = _state_fields_in(state)
        with self._lock:
            stored = self._checked(session_id, expected_version)
            return self._write_state(stored, **fields)

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
        expected_history_revision: int | None = None,  # No revisions here: never found.
    ) -> CommitResult:
        rules.check_checkpoint_meta(checkpoint)
        fields = _state_fields_in(state)
        staged = self._staged_records(session_id, checkpoint.step_id, stage)
        with self._lock:
            stored = self._checked(session_id, expected_version)
            now = timezone.now()
            planned = self._plan_append(session_id, messages, now)
            new_version = stored.version + 1
            message_count = stored.message_count + len(planned)
            record = Checkpoint(
                checkpoint_id=generate_id(),
                session_id=session_id,
                run_id=checkpoint.run_id or None,
                step_id=checkpoint.step_id,
                step_count=checkpoint.step_count,
                message_count=message_count,
                stream_sequence=checkpoint.stream_sequence,
                state=_json(
                    rules.committed_state(state, fields, new_version, message_count).snapshot()
                ),
                created_at=now,
                timings=_json(checkpoint.timings),
            )
            self._store_messages(session_id, planned)
            self._write_state(stored, message_count=message_count, **fields)
            self._checkpoints[session_id].append(record)
            self._store_staged(session_id, checkpoint.step_id, staged)
            self._mark_staged(
                session_id,
                checkpoint.step_id,
                StagedChangeStatus.PROMOTED,
                checkpoint_id=record.checkpoint_id,
            )
            if forget_tool_calls:
                self._forget_tool_calls(session_id, checkpoint.step_id)
            self._abandoned.pop(session_id, None)
            if release_lease_of is not None and self._holds(session_id, release_lease_of):
                del self._leases[session_id]
            left = self._state_out(session_id)
        return CommitResult(
            checkpoint_id=record.checkpoint_id,
            state=left,
            messages=copy.deepcopy(planned),
        )

    # Atomic operations

    def append_messages(self, session_id: str, messages: Sequence[Message]) -> list[Message]:
        with self._lock:
            stored = self._get(session_id)
            planned = self._plan_append(session_id, messages, timezone.now())
            if planned:
                self._store_messages(session_id, planned)
                self._sessions[session_id] = dataclasses.replace(
                    stored,
                    message_count=stored.message_count + len(planned),
                    updated_at=timezone.now(),
                )
            return copy.deepcopy(planned)

    def merge_custom_state(self, session_id: str, writes: StepWrites) -> MergeResult:
        with self._lock:
            stored = self._get(session_id)
            custom_state, warnings = rules.apply_merge_ops(stored.custom_state, writes)
            new_version = self._write_state(stored, custom_state=_json(custom_state))
        return MergeResult(warnings=warnings, new_version=new_version)

    def set_custom_state(
        self,
        session_id: str,
        custom_state: dict[str, Any] | None,
        *,
        expected_version: int | None = None,
    ) -> int:
        custom_state = _json(custom_state)
        with self._lock:
            holder, expires_at = self._leases.get(session_id, ("", None))
            stored = self._get(session_id)
            if rules.lease_is_live(holder, expires_at, timezone.now()):
                raise SessionBusy(session_id)
            self._checked(session_id, expected_version)
            return self._write_state(stored, custom_state=custom_state)

    def update_status(self, session_id: str, status: SessionStatus) -> int:
        status = SessionStatus(status)
        with self._lock:
            return self._write_state(self._get(session_id), status=status)

    def increment_step_count(self, session_id: str) -> int:
        with self._lock:
            stored = self._get(session_id)
            self._write_state(stored, step_count=stored.step_count + 1)
            return stored.step_count + 1

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
        fields: dict[str, Any] = {"status": SessionStatus(new_status)}
        if interrupt_context is not None:
            fields["interrupt_context"] = _json(interrupt_context)
        if error is not None:
            fields["error"] = error or None
        if failure_reason is not None:
            fields["failure_reason"] = failure_reason or None
        with self._lock:
            stored = self._get(session_id)
            if stored.status not in expected or (
                expected_version is not None and expected_version != stored.version
            ):
                return CasRejected(current_status=stored.status, current_version=stored.version)
            return CasApplied(new_version=self._write_state(stored, **fields))

    # Step leases

    def acquire_lease(self, session_id: str, holder: str, ttl: float) -> Lease | None:
        now = timezone.now()
        with self._lock:
            stored = self._get(session_id)
            current, expires_at = self._leases.get(session_id, (holder, now))
            if current != holder and expires_at > now:
                return None
            self._leases[session_id] = (holder, now + timedelta(seconds=ttl))
            taken_over = current != holder
            abandoned = self._abandoned[session_id] = (
                self._abandoned.get(session_id, 0) + taken_over
            )
            return Lease(
                version=self._write_state(stored), taken_over=taken_over, abandoned=abandoned
            )

    def renew_lease(self, session_id: str, holder: str, ttl: float) -> bool:
        with self._lock:
            if not self._holds(session_id, holder):
                return False
            self._leases[session_id] = (holder, timezone.now() + timedelta(seconds=ttl))
            return True

    def release_lease(self, session_id: str, holder: str, *, clean: bool = True) -> bool:
        with self._lock:
            if not self._holds(session_id, holder):
                return False
            if clean:
                del self._leases[session_id]
                self._abandoned.pop(session_id, None)
            else:  # Free now, but the next holder learns it was left.
                self._leases[session_id] = (holder, timezone.now())
            return True

    def _holds(self, session_id: str, holder: str) -> bool:
        self._get(session_id)
        lease = self._leases.get(session_id)
        return lease is not None and lease[0] == holder

    # Durable interrupt flags

    def set_interrupt_flag(self, session_id: str, reason: str | None = None) -> None:
        with self._lock:
            self._get(session_id)
            self._flags[session_id] = InterruptFlagInfo(
                reason=reason or None, set_at=timezone.now()
            )

    def check_interrupt_flag(self, session_id: str) -> InterruptFlagInfo | None:
        with self._lock:
            return copy.deepcopy(self._flags.get(session_id))

    def clear_interrupt_flag(self, session_id: str) -> None:
        with self._lock:
            self._flags.pop(session_id, None)

    # Sub-agent tracking

    def add_sub_session_refs(self, session_id: str, refs: Sequence[SubSessionRef]) -> None:
        now = timezone.now()
        incoming = [
            dataclasses.replace(
                ref,
                sub_session_id=rules.check_identifier("sub-session id", ref.sub_session_id),
                status=SessionStatus(ref.status),
                name=ref.name or None,
                remote=_json(ref.remote),
                started_at=ref.started_at or now,
            )
            for ref in refs
        ]
        with self._lock:
            self._get(session_id)
            children = self._sub_session_refs[session_id]
            for ref in incoming:
                children.setdefault(ref.sub_session_id, ref)

    def update_sub_session_ref(self, session_id: str, update: SubSessionRefUpdate) -> None:
        status = SessionStatus(update.status)
        with self._lock:
            self._get(session_id)
            children = self._sub_session_refs[session_id]
            if update.sub_session_id not in children:
                raise SubSessionRefNotFound(session_id, update.sub_session_id)
            children[update.sub_session_id] = dataclasses.replace(
                children[update.sub_session_id], status=status, completed_at=update.completed_at
            )

    def get_sub_session_refs(self, session_id: str) -> list[SubSessionRef]:
        with self._lock:
            self._get(session_id)
            refs = sorted(self._sub_session_refs[session_id].values(), key=lambda r: r.started_at)
            return copy.deepcopy(refs)

    # Messages

    def get_messages(
        self, session_id: str, *, offset: int = 0, limit: int = 100
    ) -> PaginatedMessages:
        rules.check_page(offset, limit)
        with self._lock:
            total = self._get(session_id).message_count
            page = copy.deepcopy(self._messages[session_id][offset : offset + limit])
        return PaginatedMessages(
            messages=page,
            total=total,
            offset=offset,
            limit=limit,
            has_more=offset + len(page) < total,
        )

    def get_message(self, session_id: str, message_id: str) -> Message | None:
        with self._lock:
            found = self._message_index(session_id).get(message_id)
            return copy.deepcopy(found)

    def get_latest_leaf(self, session_id: str) -> Message | None:
        with self._lock:
            return copy.deepcopy(self._leaf(session_id, self._message_index(session_id), None))

    def get_path(
        self, session_id: str, leaf_id: str | None = None, *, chunk_size: int = 1000
    ) -> list[Message]:
        rules.check_page(0, chunk_size)
        with self._lock:
            by_id = self._message_index(session_id)
            leaf = self._leaf(session_id, by_id, leaf_id)
            path = []
            while leaf is not None:
                path.append(leaf)
                leaf = by_id.get(leaf.parent_id) if leaf.parent_id else None
            return copy.deepcopy(path[::-1])

    def get_branches(self, session_id: str, message_id: str) -> list[Message]:
        with self._lock:
            children = [m for m in self._messages_of(session_id) if m.parent_id == message_id]
            return copy.deepcopy(children)

    def update_message(self, session_id: str, message: Message) -> Message:
        with self._lock:
            messages = self._messages_of(session_id)
            for index, stored in enumerate(messages):
                if stored.id == message.id:
                    updated = rules.updated_message(stored, message)
                    messages[index] = dataclasses.replace(
                        updated,
                        tool_calls=_json(updated.tool_calls),
                        parts=_json(updated.parts),
                        metadata=_json(updated.metadata),
                    )
                    self._touch(session_id)
                    return copy.deepcopy(messages[index])
            raise MessageNotFound(session_id, str(message.id))

    def delete_messages(self, session_id: str, message_ids: Iterable[str]) -> int:
        doomed = set(message_ids)
        with self._lock:
            messages = self._messages_of(session_id)
            kept = [m for m in messages if m.id not in doomed]
            deleted = len(messages) - len(kept)
            if deleted:
                self._messages[session_id] = [
                    dataclasses.replace(m, parent_id=None) if m.parent_id in doomed else m
                    for m in kept
                ]
                for message_id in doomed & set(self._message_sessions):
                    if self._message_sessions[message_id] == session_id:
                        del self._message_sessions[message_id]
                self._touch(session_id, message_count=len(kept))
            return deleted

    def clear_messages(self, session_id: str) -> int:
        with self._lock:
            cleared = self._messages_of(session_id)
            for message in cleared:
                del self._message_sessions[message.id]
            self._messages[session_id] = []
            self._compactions[session_id] = []
            self._touch(session_id, message_count=0)
            return len(cleared)

    def add_compaction(
        self, session_id: str, summary: str, from_message_id: str, to_message_id: str
    ) -> Compaction:
        with self._lock:
            by_id = self._message_index(session_id)
            for end in (from_message_id, to_message_id):
                if end not in by_id:
                    raise MessageNotFound(session_id, end)
            compaction = Compaction(
                compaction_id=generate_id(),
                session_id=session_id,
                from_message_id=from_message_id,
                to_message_id=to_message_id,
                summary=summary,
                created_at=timezone.now(),
            )
            self._compactions[session_id].append(compaction)
            return copy.deepcopy(compaction)

    def get_compactions(self, session_id: str) -> list[Compaction]:
        with self._lock:
            self._get(session_id)
            return copy.deepcopy(self._compactions[session_id])

    def _touch(self, session_id: str, **fields: Any) -> None:
        self._sessions[session_id] = dataclasses.replace(
            self._sessions[session_id], updated_at=timezone.now(), **fields
        )

    def _messages_of(self, session_id: str) -> list[Message]:
        self._get(session_id)
        return self._messages[session_id]

    def _message_index(self, session_id: str) -> dict[str, Message]:
        return {message.id: message for message in self._messages_of(session_id)}

    def _leaf(
        self, session_id: str, by_id: dict[str, Message], leaf_id: str | None
    ) -> Message | None:
        if leaf_id is None:  # The message appended last.
            return self._messages[session_id][-1] if self._messages[session_id] else None
        if leaf_id not in by_id:
            raise MessageNotFound(session_id, leaf_id)
        return by_id[leaf_id]

    def get_message_count(self, session_id: str) -> int:
        with self._lock:
            return self._get(session_id).message_count

    def truncate_messages(self, session_id: str, message_count: int) -> int:
        if message_count < 0:
            raise ValueError("message_count must not be negative.")
        with self._lock:
            stored = self._get(session_id)
            if message_count >= stored.message_count:
                return 0
            messages = self._messages[session_id]
            removed = messages[message_count:]
            del messages[message_count:]
            for message in removed:
                del self._message_sessions[message.id]
            self._sessions[session_id] = dataclasses.replace(
                stored, message_count=message_count, updated_at=timezone.now()
            )
            return len(removed)

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
        statuses = None if status is None else rules.normalize_statuses(status)

        def matches(s: SessionState) -> bool:
            return (
                (owner_id is None or s.owner_id == owner_id)
                and (user_id is None or s.user_id == user_id)
                and (agent_type is None or s.agent_type == agent_type)
                and (parent_session_id is None or s.parent_session_id == parent_session_id)
                and (statuses is None or s.status in statuses)
                and all(tag in s.tags for tag in tags or ())
                and all(k in s.metadata and s.metadata[k] == v for k, v in (metadata or {}).items())
                and (created_after is None or s.created_at > created_after)
                and (created_before is None or s.created_at < created_before)
                and (updated_after is None or s.updated_at > updated_after)
                and (updated_before is None or s.updated_at < updated_before)
                and (
                    expired_by is None or (s.expires_at is not None and s.expires_at <= expired_by)
                )
            )

        key, reverse = _ORDERINGS[order_by]
        with self._lock:
            matching = [state for state in self._sessions.values() if matches(state)]
            matching.sort(key=key, reverse=reverse)
            page = [_summary(state) for state in matching[offset : offset + limit]]
        return PaginatedSessions(
            sessions=page,
            total=len(matching),
            offset=offset,
            limit=limit,
            has_more=offset + len(page) < len(matching),
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
        wanted = rules.normalize_statuses(statuses)
        with self._lock:
            expired = sorted(
                (
                    (state.expires_at, state.session_id)
                    for state in self._sessions.values()
                    if state.expires_at is not None
                    and state.expires_at <= now
                    and state.status in wanted
                ),
            )
            keys = [key for key in expired if after is None or key > after][:limit]
            return [_summary(self._sessions[session_id]) for _, session_id in keys]

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
        wanted = None if session_ids is None else set(session_ids)
        with self._lock:
            taken_at = timezone.now()
            expired = sorted(
                (state.expires_at, state.session_id)
                for state in self._sessions.values()
                if state.expires_at is not None
                and state.expires_at <= now
                and (delete or state.status in LIVE_STATUSES)
                and (wanted is None or state.session_id in wanted)
                and not rules.lease_is_live(
                    *self._leases.get(state.session_id, ("", None)), taken_at
                )
            )
            reaped = []
            for _, session_id in expired[:limit]:
                state = self._sessions[session_id]
                reaped.append(
                    ReapedSession(
                        session_id=session_id,
                        agent_type=state.agent_type,
                        stream_id=state.stream_id,
                        parent_session_id=state.parent_session_id,
                    )
                )
                if delete:
                    self.delete_session(session_id)
                else:
                    self._fail_expired(state, error, failure_reason, taken_at)
            return reaped

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
        run_id = rules.check_identifier("run id", generate_id() if run_id is None else run_id)
        metadata = _json(metadata or {})
        with self._lock:
            self._get(session_id)
            turns = [run.turn for run in self._runs.values() if run.session_id == session_id]
            if turn is None:
                turn = max(turns, default=0) + 1
            if run_id in self._runs or turn in turns:
                raise RunAlreadyExists(session_id, run_id=run_id, turn=turn)
            record = RunRecord(
                run_id=run_id,
                session_id=session_id,
                turn=turn,
                status=RunStatus.RUNNING,
                step_count=0,
                error=None,
                metadata=metadata,
                started_at=timezone.now(),
                completed_at=None,
            )
            self._runs[run_id] = record
            return copy.deepcopy(record)

    def mark_stalled_runs(self, idle_since: datetime, *, limit: int = 100) -> list[StalledRun]:
        rules.check_page(0, limit)
        now = timezone.now()
        with self._lock:
            stalled = []
            for run in sorted(self._runs.values(), key=lambda r: r.started_at):
                if len(stalled) == limit:
                    break
                if not self._stalled(run, idle_since):
                    continue
                step_count = self._sessions[run.session_id].step_count
                _, step, recoveries = self._recovered.get(run.run_id, (None, None, 0))
                count = recoveries + 1 if step == step_count else 1
                self._recovered[run.run_id] = (now, step_count, count)
                stalled.append(
                    StalledRun(
                        session_id=run.session_id,
                        run_id=run.run_id,
                        step=step_count + 1,
                        recoveries=count,
                    )
                )
            return stalled

    def _stalled(self, run: RunRecord, idle_since: datetime) -> bool:
        state = self._sessions.get(run.session_id)
        _, expires_at = self._leases.get(run.session_id, ("", None))
        recovered_at = self._recovered.get(run.run_id, (None,))[0]
        return (
            run.status == RunStatus.RUNNING
            and state is not None
            and state.status == SessionStatus.ACTIVE
            and state.updated_at < idle_since
            and (expires_at is None or expires_at < idle_since)
            and (recovered_at is None or recovered_at < idle_since)
        )

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
        with self._lock:
            record = self._runs.get(run_id)
            if record is None:
                raise RunNotFound(run_id)
            changes: dict[str, Any] = {
                "status": status,
                "completed_at": rules.run_completed_at(status, completed_at),
            }
            if metadata:
                changes["metadata"] = {**record.metadata, **_json(dict(metadata))}
            if step_count is not None:
                changes["step_count"] = step_count
            if error is not None:
                changes["error"] = error or None
            self._runs[run_id] = dataclasses.replace(record, **changes)
            return copy.deepcopy(self._runs[run_id])

    def get_current_run(self, session_id: str) -> RunRecord | None:
        with self._lock:
            runs = [run for run in self._runs.values() if run.session_id == session_id]
            return copy.deepcopy(max(runs, key=lambda run: run.turn, default=None))

    def list_runs(self, session_id: str) -> list[RunRecord]:
        with self._lock:
            self._get(session_id)
            runs = [run for run in self._runs.values() if run.session_id == session_id]
            return copy.deepcopy(sorted(runs, key=lambda run: run.turn))

    # Queued runs

    def queue_run(self, session_id: str, run_id: str, run_input: Any) -> bool:
        run_id = rules.check_identifier("run id", run_id)
        queued = QueuedRun(
            run_id=run_id, session_id=session_id, input=_json(run_input), queued_at=timezone.now()
        )
        with self._lock:
            self._get(session_id)
            run = self.get_current_run(session_id)
            if run is None or run.status != RunStatus.RUNNING:
                return False
            self._queued.setdefault(session_id, []).append(queued)
            return True

    def take_queued_run(self, session_id: str) -> QueuedRun | None:
        with self._lock:
            queue = self._queued.get(session_id)
            return copy.deepcopy(queue.pop(0)) if queue else None

    def list_queued_runs(self, session_id: str) -> list[QueuedRun]:
        with self._lock:
            return copy.deepcopy(self._queued.get(session_id, []))

    def discard_queued_runs(self, session_id: str) -> int:
        with self._lock:
            return len(self._queued.pop(session_id, []))

    # Staging

    def stage_changes(
        self, session_id: str, step_id: str, changes: Sequence[StagedToolChange]
    ) -> None:
        records = self._staged_records(session_id, step_id, changes)
        with self._lock:
            self._get(session_id)
            self._store_staged(session_id, step_id, records)

    def _staged_records(
        self, session_id: str, step_id: str, changes: Sequence[StagedToolChange]
    ) -> list[StagedChange]:
        """Return the changes as the records staging them would store (copies, checked)."""
        rules.check_identifier("step id", step_id)
        sizes = rules.check_staged_sizes(session_id, changes, self.max_staged_changes_bytes)
        now = timezone.now()
        return [
            StagedChange(
                session_id=session_id,
                step_id=step_id,
                tool_call_id=change.tool_call_id,
                patches=_json(change.patches),
                merge_ops=[
                    merge_op_from_json(_json(merge_op_to_json(op))) for op in change.merge_ops
                ],
                size_bytes=size,
                status=StagedChangeStatus.STAGED,
                checkpoint_id=None,
                created_at=now,
            )
            for change, size in zip(changes, sizes, strict=True)
        ]

    def _store_staged(self, session_id: str, step_id: str, records: list[StagedChange]) -> None:
        """Store staged records, the last change of a call winning; the caller holds the lock."""
        staged = self._staged[session_id]
        for record in records:
            staged[(step_id, record.tool_call_id)] = record

    def promote_staging(self, session_id: str, step_id: str, checkpoint_id: str) -> int:
        with self._lock:
            self._get(session_id)
            return self._mark_staged(
                session_id, step_id, StagedChangeStatus.PROMOTED, checkpoint_id=checkpoint_id
            )

    def rollback_staging(self, session_id: str, step_id: str) -> int:
        with self._lock:
            self._get(session_id)
            return self._mark_staged(session_id, step_id, StagedChangeStatus.ROLLED_BACK)

    def begin_tool_calls(self, session_id: str, step_id: str, tool_call_ids: Sequence[str]) -> None:
        rules.check_identifier("step id", step_id)
        for tool_call_id in tool_call_ids:
            rules.check_identifier("tool call id", tool_call_id)
        with self._lock:
            self._get(session_id)
            for tool_call_id in tool_call_ids:
                self._tool_calls[session_id].setdefault((step_id, tool_call_id), None)

    def finish_tool_call(
        self, session_id: str, step_id: str, tool_call_id: str, outcome: dict[str, Any]
    ) -> bool:
        outcome = _json(outcome)
        with self._lock:
            calls = self._tool_calls.get(session_id, {})
            if (step_id, tool_call_id) not in calls:
                return False
            calls[step_id, tool_call_id] = outcome
            return True

    def get_tool_calls(self, session_id: str, step_id: str) -> dict[str, ToolCallRecord]:
        with self._lock:
            return {
                call_id: ToolCallRecord(tool_call_id=call_id, outcome=_json(outcome))
                for (step, call_id), outcome in self._tool_calls.get(session_id, {}).items()
                if step == step_id
            }

    def forget_tool_calls(self, session_id: str, step_id: str) -> int:
        with self._lock:
            return self._forget_tool_calls(session_id, step_id)

    def _forget_tool_calls(self, session_id: str, step_id: str) -> int:
        calls = self._tool_calls.get(session_id, {})
        forgotten = [key for key in calls if key[0] == step_id]
        for key in forgotten:
            del calls[key]
        return len(forgotten)

    def get_staged_changes(
        self,
        session_id: str,
        *,
        step_id: str | None = None,
        status: StagedChangeStatus | None = None,
    ) -> list[StagedChange]:
        status = None if status is None else StagedChangeStatus(status)
        with self._lock:
            self._get(session_id)
            records = [
                record
                for record in self._staged[session_id].values()
                if (step_id is None or record.step_id == step_id)
                and (status is None or record.status == status)
            ]
            return copy.deepcopy(sorted(records, key=lambda record: record.created_at))

    # Checkpoints

    def get_checkpoint(self, session_id: str, checkpoint_id: str) -> Checkpoint | None:
        with self._lock:
            for record in self._checkpoints.get(session_id, ()):
                if record.checkpoint_id == checkpoint_id:
                    return copy.deepcopy(record)
            return None

    def list_checkpoints(self, session_id: str, *, limit: int | None = None) -> list[Checkpoint]:
        with self._lock:
            self._get(session_id)
            newest_first = sorted(
                self._checkpoints[session_id],
                key=lambda record: (record.created_at, record.step_count),
                reverse=True,
            )
            return copy.deepcopy(newest_first if limit is None else newest_first[:limit])

    def get_latest_checkpoint(self, session_id: str) -> Checkpoint | None:
        if not self.session_exists(session_id):
            return None
        checkpoints = self.list_checkpoints(session_id, limit=1)
        return checkpoints[0] if checkpoints else None

    # Internals; callers hold the lock.

    def _get(self, session_id: str) -> SessionState:
        stored = self._sessions.get(session_id)
        if stored is None:
            raise SessionNotFound(session_id)
        return stored

    def _checked(self, session_id: str, expected_version: int | None) -> SessionState:
        stored = self._get(session_id)
        if expected_version is not None and expected_version != stored.version:
            raise VersionConflict(
                session_id, expected_version=expected_version, current_version=stored.version
            )
        return stored

    def _fail_expired(
        self, state: SessionState, error: str, failure_reason: str, now: datetime
    ) -> None:
        """Fail an expired session, its unfinished run and its queued runs."""
        self._write_state(
            state, status=SessionStatus.FAILED, error=error, failure_reason=failure_reason
        )
        for run in self._runs.values():
            if run.session_id == state.session_id and run.status in (
                RunStatus.RUNNING,
                RunStatus.SUSPENDED,
            ):
                self._runs[run.run_id] = dataclasses.replace(
                    run, status=RunStatus.FAILED, error=error, completed_at=now
                )
        self._queued.pop(state.session_id, None)

    def _write_state(self, stored: SessionState, **fields: Any) -> int:
        new_version = stored.version + 1
        self._sessions[stored.session_id] = dataclasses.replace(
            stored, **fields, version=new_version, updated_at=timezone.now()
        )
        return new_version

    def _state_out(self, session_id: str) -> SessionState:
        state = copy.deepcopy(self._sessions[session_id])
        state.interrupt_flag = copy.deepcopy(self._flags.get(session_id))
        return state

    def _plan_append(
        self, session_id: str, messages: Sequence[Message], now: datetime
    ) -> list[Message]:
        stored = self._messages[session_id]
        wanted = rules.lookup_ids(messages)
        planned = rules.plan_append(
            session_id,
            messages,
            stored_sessions={
                id_: self._message_sessions[id_] for id_ in wanted if id_ in self._message_sessions
            },
            last_message_id=stored[-1].id if stored else None,
            last_sequence=stored[-1].sequence if stored else 0,
            now=now,
        )
        return [
            dataclasses.replace(
                message,
                tool_calls=_json(message.tool_calls),
                parts=_json(message.parts),
                metadata=_json(message.metadata),
            )
            for message in planned
        ]

    def _store_messages(self, session_id: str, planned: list[Message]) -> None:
        self._messages[session_id].extend(planned)
        for message in planned:
            self._message_sessions[message.id] = session_id

    def _mark_staged(
        self,
        session_id: str,
        step_id: str,
        status: StagedChangeStatus,
        *,
        checkpoint_id: str | None = None,
    ) -> int:
        staged = self._staged[session_id]
        keys = [
            key
            for key, record in staged.items()
            if record.step_id == step_id and record.status == StagedChangeStatus.STAGED
        ]
        for key in keys:
            changes = {"status": status}
            if checkpoint_id is not None:
                changes["checkpoint_id"] = checkpoint_id
            staged[key] = dataclasses.replace(staged[key], **changes)
        return len(keys)


def _state_fields_in(state: SessionState) -> dict[str, Any]:
    """Return the normalized mutable fields of `state`, JSON values copied and checked."""
    fields = rules.state_fields(state)
    return {
        name: _json(value) if name in _JSON_STATE_FIELDS else value
        for name, value in fields.items()
    }


def _summary(state: SessionState) -> SessionSummary:
    return SessionSummary(
        session_id=state.session_id,
        agent_type=state.agent_type,
        status=state.status,
        step_count=state.step_count,
        message_count=state.message_count,
        parent_session_id=state.parent_session_id,
        root_session_id=state.root_session_id,
        owner_id=state.owner_id,
        user_id=state.user_id,
        tags=copy.deepcopy(state.tags),
        metadata=copy.deepcopy(state.metadata),
        name=state.name,
        model=state.model,
        source=state.source,
        expires_at=state.expires_at,
        version=state.version,
        created_at=state.created_at,
        updated_at=state.updated_at,
    )
