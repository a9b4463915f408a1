"""The `SessionStateStore` contract (reference 003 and 000), in Python.

Every method is synchronous and has an `a`-prefixed async twin that runs it through
`sync_to_async`, as `django.contrib.sessions` backends do. Values crossing the contract are the
typed values of `sessions_app.stores.types`.

Conventions every backend keeps (the conformance suite checks each one):

- A write to a session that does not exist raises `SessionNotFound`; so does a read that returns a
  collection. Reads that return one optional value (`load_state`, `check_interrupt_flag`,
  `get_current_run`, `get_checkpoint`, `get_latest_checkpoint`) return `None` instead.
- Every write to session state bumps `version`. A write given an `expected_version` that is not
  current raises `VersionConflict` and writes nothing.
- Messages are not state: appending or truncating them leaves `version` alone, so parallel tool
  calls can append while a step holds its expected version.
"""

import abc
import contextlib
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, Concatenate

from asgiref.sync import sync_to_async

from sessions_app.errors import SearchUnsupported, SessionNotFound
from sessions_app.stores import rules
from sessions_app.stores.types import (
    LIVE_STATUSES,
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
    SubSessionRef,
    SubSessionRefUpdate,
    ToolCallRecord,
)

# Leaves headroom under the 2 MiB row limits some backends have (reference 001).
DEFAULT_MAX_STAGED_CHANGES_BYTES = int(1.8 * 1024 * 1024)


def async_twin[S, **P, R](
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """Return an async method that runs the named sync method (as overridden) in a thread.

    Like Django's own async ORM methods, it leaves connections alone, so it is safe inside a
    caller's transaction; long-lived async code (readers, consumers) refreshes connections
    itself with `database_sync_to_async`.
    """
    name = method.__name__

    async def twin(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        return await sync_to_async(getattr(self, name))(*args, **kwargs)

    twin.__name__ = f"a{name}"
    twin.__qualname__ = method.__qualname__.replace(name, twin.__name__)
    twin.__doc__ = f"Async twin of `{name}`."
    return twin


class SessionStateStore(abc.ABC):
    """Durable session state, messages, runs, checkpoints, interrupt flags and staging."""

    def __init__(self, *, max_staged_changes_bytes: int = DEFAULT_MAX_STAGED_CHANGES_BYTES):
        self.max_staged_changes_bytes = max_staged_changes_bytes

    # Session lifecycle

    @abc.abstractmethod
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
        """Create an active session and return its state.

        A missing `session_id` is generated; `stream_id` defaults to the session id. Raises
        `SessionAlreadyExists` if the id is taken.
        """

    @abc.abstractmethod
    def rename_session(self, session_id: str, name: str) -> None:
        """Set the session's name and touch `updated_at`; `version` stays, as for messages."""

    @abc.abstractmethod
    def session_exists(self, session_id: str) -> bool:
        """Return whether the session exists."""

    @abc.abstractmethod
    def delete_session(self, session_id: str) -> bool:
        """Delete the session and everything recorded under it; return whether it existed."""

    @abc.abstractmethod
    def update_labels(self, session_id: str, labels: Mapping[str, Any]) -> SessionState:
        """Replace the labels `labels` names (`tags`, `metadata`, `expires_at`); return the state.

        The write bumps the version. While a step holds the session's lease it raises
        `SessionBusy` and writes nothing, since the step commits under the version it claimed.
        """

    # State

    @abc.abstractmethod
    def load_state(self, session_id: str) -> SessionState | None:
        """Return the session's state, or `None` if there is no such session."""

    @abc.abstractmethod
    def save_state(
        self, session_id: str, state: SessionState, *, expected_version: int | None = None
    ) -> int:
        """Write every mutable field of `state`; return the new version.

        Identity and ownership fields and the read-only views are not written.
        """

    @abc.abstractmethod
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
        """Commit one step in a single transaction.

        Stages `stage` (as `stage_changes` would) under the checkpoint's step id, appends
        `messages`, writes `state`, promotes the step's staged changes, drops the step's tool
        call records if `forget_tool_calls`, and records a checkpoint at the new message count;
        all of it becomes visible together or not at all. A finished step ends the lease's run
        of abandoned holders (`Lease.abandoned` goes back to 0); the step lease of
        `release_lease_of`, if it holds it, is released cleanly with it, and otherwise whoever
        holds the lease keeps it.

        The result holds the messages as stored, the session as the commit left it (with the
        interrupt flag it found under its lock) and, if the session's history revision was
        `expected_history_revision`, the revision after the commit (see `CommitResult`).
        """

    # Atomic operations

    @abc.abstractmethod
    def append_messages(self, session_id: str, messages: Sequence[Message]) -> list[Message]:
        """Append messages with the next gap-free sequences; return them as stored.

        A message whose id the session already holds is skipped; an id held by another session
        raises `MessageIdConflict`. A `parent_id` outside the session is dropped.
        """

    @abc.abstractmethod
    def merge_custom_state(self, session_id: str, writes: StepWrites) -> MergeResult:
        """Apply replace/append/delete ops to the custom state; return warnings and version."""

    @abc.abstractmethod
    def set_custom_state(
        self,
        session_id: str,
        custom_state: dict[str, Any] | None,
        *,
        expected_version: int | None = None,
    ) -> int:
        """Replace the custom state (the agent's live state) whole; return the new version.

        Raises `SessionBusy` while a step holds the session's lease (its commit would undo the
        write), and `VersionConflict` for a stale `expected_version`.
        """

    @abc.abstractmethod
    def update_status(self, session_id: str, status: SessionStatus) -> int:
        """Set the status; return the new version."""

    @abc.abstractmethod
    def increment_step_count(self, session_id: str) -> int:
        """Add one to the step count; return the new count."""

    @abc.abstractmethod
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
        """Set the status only if it is one of `expected_statuses` (and the version matches).

        Returns `CasApplied(new_version)`, or `CasRejected(current_status, current_version)`
        having written nothing.
        """

    # Step leases

    @abc.abstractmethod
    def acquire_lease(self, session_id: str, holder: str, ttl: float) -> Lease | None:
        """Give `holder` the session's step lease for `ttl` seconds and bump `version`.

        Return the `Lease`, or `None` while another holder's lease is unexpired. Taking the
        lease is a state write, so a worker that lost it can never commit with the version it
        was given (DESIGN invariant 3).
        """

    def claim_step(self, session_id: str, holder: str, ttl: float) -> StepClaim | None:
        """Take the step lease as `acquire_lease` does; return it with the state and current run.

        The state is read under the lease, with the new version and any interrupt flag. A
        backend may do it all at once; this default takes the lease, then reads the rest.
        """
        lease = self.acquire_lease(session_id, holder, ttl)
        if lease is None:
            return None
        return StepClaim(
            lease=lease,
            state=self.load_state(session_id),
            run=self.get_current_run(session_id),
        )

    @abc.abstractmethod
    def renew_lease(self, session_id: str, holder: str, ttl: float) -> bool:
        """Extend `holder`'s lease to `ttl` seconds from now; return whether it still holds it."""

    def renew_leases(self, holders: Mapping[str, str], ttl: float) -> set[str]:
        """Renew many leases at once, `holders` mapping session ids to holders.

        Return the sessions whose holder still held the lease (a missing session is not one).
        A backend may do it in one round trip; this default renews them one by one.
        """
        renewed = set()
        for session_id, holder in holders.items():
            with contextlib.suppress(SessionNotFound):
                if self.renew_lease(session_id, holder, ttl):
                    renewed.add(session_id)
        return renewed

    @abc.abstractmethod
    def release_lease(self, session_id: str, holder: str, *, clean: bool = True) -> bool:
        """Give up `holder`'s lease; return whether it held it.

        A holder that leaves work half done releases with `clean=False`: the lease is free at
        once, and whoever takes it next is told it was `taken_over`.
        """

    # Durable interrupt flags

    @abc.abstractmethod
    def set_interrupt_flag(self, session_id: str, reason: str | None = None) -> None:
        """Raise (or re-raise) the session's durable interrupt flag."""

    @abc.abstractmethod
    def check_interrupt_flag(self, session_id: str) -> InterruptFlagInfo | None:
        """Return the raised interrupt flag, or `None`."""

    def check_interrupt_flags(self, session_ids: Collection[str]) -> dict[str, InterruptFlagInfo]:
        """Return the raised flags among the sessions, by session id.

        A backend may read them in one round trip; this default reads them one by one.
        """
        flags = {session_id: self.check_interrupt_flag(session_id) for session_id in session_ids}
        return {session_id: flag for session_id, flag in flags.items() if flag is not None}

    @abc.abstractmethod
    def clear_interrupt_flag(self, session_id: str) -> None:
        """Lower the interrupt flag; lowering a lowered flag does nothing."""

    # Sub-agent tracking

    @abc.abstractmethod
    def add_sub_session_refs(self, session_id: str, refs: Sequence[SubSessionRef]) -> None:
        """Record child sessions; a child already recorded is left as it is."""

    @abc.abstractmethod
    def update_sub_session_ref(self, session_id: str, update: SubSessionRefUpdate) -> None:
        """Update a child's status; raises `SubSessionRefNotFound` for an unknown child."""

    @abc.abstractmethod
    def get_sub_session_refs(self, session_id: str) -> list[SubSessionRef]:
        """Return the session's children in the order they started."""

    # Messages

    @abc.abstractmethod
    def get_messages(
        self, session_id: str, *, offset: int = 0, limit: int = 100
    ) -> PaginatedMessages:
        """Return a page of messages in sequence order."""

    @abc.abstractmethod
    def get_message_count(self, session_id: str) -> int:
        """Return how many messages the session holds."""

    @abc.abstractmethod
    def truncate_messages(self, session_id: str, message_count: int) -> int:
        """Keep the first `message_count` messages, delete the rest; return how many went.

        Crash recovery uses this to cut messages back to a checkpoint's message count.
        """

    # Message tree (reference 002): each message's `parent_id` links it to the one it answers.
    # Writes to it touch the session's `updated_at` and leave `version` alone.

    @abc.abstractmethod
    def update_message(self, session_id: str, message: Message) -> Message:
        """Replace the content of the stored message `message.id`; its place stays.

        Raises `MessageNotFound` for an id the session does not hold.
        """

    @abc.abstractmethod
    def delete_messages(self, session_id: str, message_ids: Iterable[str]) -> int:
        """Delete the session's messages of `message_ids`; return how many went.

        Their children become roots; ids the session does not hold are ignored.
        """

    @abc.abstractmethod
    def clear_messages(self, session_id: str) -> int:
        """Delete every message and compaction of the session; return how many messages went."""

    @abc.abstractmethod
    def get_message(self, session_id: str, message_id: str) -> Message | None:
        """Return the session's message `message_id`, or `None`."""

    @abc.abstractmethod
    def get_latest_leaf(self, session_id: str) -> Message | None:
        """Return the end of the active branch: the message appended last (always a leaf)."""

    @abc.abstractmethod
    def get_path(
        self, session_id: str, leaf_id: str | None = None, *, chunk_size: int = 1000
    ) -> list[Message]:
        """Return the stored path from the root to `leaf_id` (default: the latest leaf).

        Root first, without compactions applied. The path is read `chunk_size` ancestors at
        a time. Raises `SessionNotFound`, and `MessageNotFound` for a leaf the session does
        not hold.
        """

    def get_history(
        self, session_id: str, leaf_id: str | None = None, *, chunk_size: int = 1000
    ) -> list[Message]:
        """Return `get_path` with the session's compactions applied: what the model is sent."""
        path = self.get_path(session_id, leaf_id, chunk_size=chunk_size)
        return rules.apply_compactions(path, self.get_compactions(session_id))

    def get_path_length(self, session_id: str, leaf_id: str | None = None) -> int:
        """Return how many stored messages lead from the root to `leaf_id`."""
        return len(self.get_path(session_id, leaf_id))

    @abc.abstractmethod
    def get_branches(self, session_id: str, message_id: str) -> list[Message]:
        """Return the messages that answer `message_id`, one per branch, oldest first."""

    # Compactions (reference 002): summaries shown in place of message ranges, originals kept

    @abc.abstractmethod
    def add_compaction(
        self, session_id: str, summary: str, from_message_id: str, to_message_id: str
    ) -> Compaction:
        """Store a compaction of the range `from_message_id`..`to_message_id`.

        Raises `MessageNotFound` for an end the session does not hold.
        """

    @abc.abstractmethod
    def get_compactions(self, session_id: str) -> list[Compaction]:
        """Return the session's compactions in the order they were added."""

    # History revisions (optional: a backend that keeps them sets `supports_history_revisions`)
    #
    # Every write to a session's messages or compactions bumps its history revision. A step's
    # claim returns it in `StepClaim.history_revision`, and a step commit its revision after
    # (`CommitResult.revision`); a step commit told the revision its caller expects says
    # whether the history still stood there (`CommitResult.history_revision`). A backend that
    # keeps none returns `None` in all three.

    supports_history_revisions: ClassVar[bool] = False

    # Full-text search (optional: a backend that has it sets `supports_search`)

    supports_search: ClassVar[bool] = False

    def search_messages(self, session_id: str, query: str, *, limit: int = 20) -> list[MessageHit]:
        """Return the session's messages holding `query`'s words as a phrase, best first.

        Words match by their English stem ("deploying" finds "deployment").
        Raises `SearchUnsupported` where the backend has no search.
        """
        raise SearchUnsupported(type(self).__name__)

    def search_owner_messages(
        self, owner_id: int, query: str, *, limit: int = 20
    ) -> list[MessageHit]:
        """Return the messages of the owner's sessions holding every word of `query`, best first.

        Raises `SearchUnsupported` where the backend has no search.
        """
        raise SearchUnsupported(type(self).__name__)

    # Cross-session listing

    @abc.abstractmethod
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
        """Return a page of sessions matching every given filter.

        `tags` matches sessions holding all of them; `metadata` matches each key=value pair;
        `*_after` and `*_before` bounds are exclusive; `expired_by` matches sessions whose
        `expires_at` is at or before the given time.
        """

    @abc.abstractmethod
    def list_expired_sessions(
        self,
        now: datetime,
        *,
        statuses: Iterable[SessionStatus] = LIVE_STATUSES,
        after: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> list[SessionSummary]:
        """Return sessions in `statuses` whose `expires_at` is at or before `now`.

        Sessions come in `(expires_at, session_id)` order, starting after the `after` cursor
        (the pair of the last session of the previous batch). A cursor, unlike an offset, never
        skips a session when others leave the set between batches.
        """

    @abc.abstractmethod
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
        """Fail, or delete, up to `limit` sessions whose `expires_at` is at or before `now`.

        Failing takes live sessions only, records `error` and `failure_reason`, bumps their
        version (so a worker's later commit is rejected rather than bringing one back), fails
        their running or suspended run and drops their queued runs; deleting takes expired
        sessions of any status. A session whose step lease is held is left alone: a worker is
        on it. Sessions are taken in `(expires_at, session_id)` order, only from `session_ids`
        when given, in one transaction that re-checks each under its row lock, so two sweeps at
        once never take the same session. Return the sessions taken.
        """

    # Run tracking

    @abc.abstractmethod
    def create_run(
        self,
        session_id: str,
        run_id: str | None = None,
        *,
        turn: int | None = None,
        metadata: dict[str, Any] | None = None,
        session_locked: bool = False,
    ) -> RunRecord:
        """Record a running run; without `turn`, the session's next turn (1 for the first).

        Raises `RunAlreadyExists` if the run id or turn is taken. `session_locked` says that
        the caller's transaction holds the session's lock already (it saved the session's
        state in it): the run is recorded without taking the lock again.
        """

    @abc.abstractmethod
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
        """Set a run's status; a run that ends gets `completed_at` (default now).

        A `running` or `suspended` run has no `completed_at`. `metadata` keys are merged into
        the run's metadata.
        """

    @abc.abstractmethod
    def mark_stalled_runs(self, idle_since: datetime, *, limit: int = 100) -> list[StalledRun]:
        """Return up to `limit` stalled runs, counting this recovery on each.

        A run is stalled when it is running, its session is active, and since `idle_since`
        nothing moved it: no step committed, no lease was held, and no earlier call returned
        it. Its `recoveries` count the calls that returned it at the same step in a row; a
        committed step starts the count again. Two sweeps at once never return the same run.
        """

    @abc.abstractmethod
    def get_current_run(self, session_id: str) -> RunRecord | None:
        """Return the session's latest run, or `None`."""

    @abc.abstractmethod
    def list_runs(self, session_id: str) -> list[RunRecord]:
        """Return the session's runs by turn."""

    # Queued runs

    @abc.abstractmethod
    def queue_run(self, session_id: str, run_id: str, run_input: Any) -> bool:
        """Queue a run to begin when the session's running run ends; return whether it queued.

        Queues nothing and returns False when no run is running. The check and the write hold
        the session (its row, on the ORM) as the commit that ends a run does, so the end of
        the run it waits for always sees a run queued here. `run_input` is JSON.
        Raises `SessionNotFound`.
        """

    @abc.abstractmethod
    def take_queued_run(self, session_id: str) -> QueuedRun | None:
        """Remove and return the session's oldest queued run, or `None` when none is queued."""

    @abc.abstractmethod
    def list_queued_runs(self, session_id: str) -> list[QueuedRun]:
        """Return the session's queued runs, oldest first."""

    @abc.abstractmethod
    def discard_queued_runs(self, session_id: str) -> int:
        """Remove every queued run of the session; return how many there were."""

    # Staging

    @abc.abstractmethod
    def stage_changes(
        self, session_id: str, step_id: str, changes: Sequence[StagedToolChange]
    ) -> None:
        """Stage each tool call's state writes for the step; restaging a tool call replaces it.

        Raises `StateSizeExceeded`, before writing anything, when one tool call's patches and
        merge ops serialize to more than `max_staged_changes_bytes`.
        """

    @abc.abstractmethod
    def promote_staging(self, session_id: str, step_id: str, checkpoint_id: str) -> int:
        """Mark the step's staged changes promoted at the checkpoint; return how many."""

    @abc.abstractmethod
    def rollback_staging(self, session_id: str, step_id: str) -> int:
        """Mark the step's staged changes rolled back; return how many."""

    @abc.abstractmethod
    def get_staged_changes(
        self,
        session_id: str,
        *,
        step_id: str | None = None,
        status: StagedChangeStatus | None = None,
    ) -> list[StagedChange]:
        """Return staged changes in the order they were staged."""

    # Tool call records: what a step's tool calls did, until the step commits

    @abc.abstractmethod
    def begin_tool_calls(self, session_id: str, step_id: str, tool_call_ids: Sequence[str]) -> None:
        """Record, durably and before they run, that an attempt at the step begins the calls.

        Beginning a call already recorded changes nothing.
        """

    @abc.abstractmethod
    def finish_tool_call(
        self, session_id: str, step_id: str, tool_call_id: str, outcome: dict[str, Any]
    ) -> bool:
        """Record a begun call's outcome (JSON); return whether the call was on record."""

    @abc.abstractmethod
    def get_tool_calls(self, session_id: str, step_id: str) -> dict[str, ToolCallRecord]:
        """Return the step's recorded calls by tool call id."""

    @abc.abstractmethod
    def forget_tool_calls(self, session_id: str, step_id: str) -> int:
        """Drop the step's records once its commit holds the calls; return how many."""

    # Checkpoints

    @abc.abstractmethod
    def get_checkpoint(self, session_id: str, checkpoint_id: str) -> Checkpoint | None:
        """Return one of the session's checkpoints, or `None`."""

    @abc.abstractmethod
    def list_checkpoints(self, session_id: str, *, limit: int | None = None) -> list[Checkpoint]:
        """Return the session's checkpoints, newest first."""

    @abc.abstractmethod
    def get_latest_checkpoint(self, session_id: str) -> Checkpoint | None:
        """Return the session's newest checkpoint, or `None`."""

    acreate_session = async_twin(create_session)
    asession_exists = async_twin(session_exists)
    adelete_session = async_twin(delete_session)
    aupdate_labels = async_twin(update_labels)
    aload_state = async_twin(load_state)
    asave_state = async_twin(save_state)
    asave_state_and_promote_staging = async_twin(save_state_and_promote_staging)
    aappend_messages = async_twin(append_messages)
    amerge_custom_state = async_twin(merge_custom_state)
    aset_custom_state = async_twin(set_custom_state)
    aupdate_status = async_twin(update_status)
    aincrement_step_count = async_twin(increment_step_count)
    acompare_and_set_status = async_twin(compare_and_set_status)
    aacquire_lease = async_twin(acquire_lease)
    aclaim_step = async_twin(claim_step)
    arenew_lease = async_twin(renew_lease)
    arenew_leases = async_twin(renew_leases)
    arelease_lease = async_twin(release_lease)
    aset_interrupt_flag = async_twin(set_interrupt_flag)
    acheck_interrupt_flag = async_twin(check_interrupt_flag)
    acheck_interrupt_flags = async_twin(check_interrupt_flags)
    aclear_interrupt_flag = async_twin(clear_interrupt_flag)
    aadd_sub_session_refs = async_twin(add_sub_session_refs)
    aupdate_sub_session_ref = async_twin(update_sub_session_ref)
    aget_sub_session_refs = async_twin(get_sub_session_refs)
    aget_messages = async_twin(get_messages)
    aget_message_count = async_twin(get_message_count)
    atruncate_messages = async_twin(truncate_messages)
    alist_sessions = async_twin(list_sessions)
    alist_expired_sessions = async_twin(list_expired_sessions)
    areap_expired_sessions = async_twin(reap_expired_sessions)
    acreate_run = async_twin(create_run)
    aupdate_run_status = async_twin(update_run_status)
    aget_message = async_twin(get_message)
    aget_latest_leaf = async_twin(get_latest_leaf)
    aget_path = async_twin(get_path)
    aget_history = async_twin(get_history)
    aupdate_message = async_twin(update_message)
    adelete_messages = async_twin(delete_messages)
    aclear_messages = async_twin(clear_messages)
    aadd_compaction = async_twin(add_compaction)
    aget_compactions = async_twin(get_compactions)
    arename_session = async_twin(rename_session)
    aget_path_length = async_twin(get_path_length)
    aget_branches = async_twin(get_branches)
    asearch_messages = async_twin(search_messages)
    asearch_owner_messages = async_twin(search_owner_messages)
    aget_current_run = async_twin(get_current_run)
    amark_stalled_runs = async_twin(mark_stalled_runs)
    alist_runs = async_twin(list_runs)
    aqueue_run = async_twin(queue_run)
    atake_queued_run = async_twin(take_queued_run)
    alist_queued_runs = async_twin(list_queued_runs)
    adiscard_queued_runs = async_twin(discard_queued_runs)
    astage_changes = async_twin(stage_changes)
    apromote_staging = async_twin(promote_staging)
    arollback_staging = async_twin(rollback_staging)
    aget_staged_changes = async_twin(get_staged_changes)
    abegin_tool_calls = async_twin(begin_tool_calls)
    afinish_tool_call = async_twin(finish_tool_call)
    aget_tool_calls = async_twin(get_tool_calls)
    aforget_tool_calls = async_twin(forget_tool_calls)
    aget_checkpoint = async_twin(get_checkpoint)
    alist_checkpoints = async_twin(list_checkpoints)
    aget_latest_checkpoint = async_twin(get_latest_checkpoint)
