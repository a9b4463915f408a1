"""A Hypothesis stateful test of the session stores against a simple model (DESIGN invariants 1-3).

The machine plays workers, users and the expiry sweep at once: it creates sessions, appends
messages, claims steps, stages tool-call changes, commits steps with the version it claimed,
interrupts and resumes, reaps, and reconnects. After every step the stored sessions must equal
the model; each example uses session ids of its own and deletes its sessions in teardown.
"""

import dataclasses
import itertools
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from sessions_app.errors import MessageIdConflict, SessionNotFound, VersionConflict
from sessions_app.stores.base import SessionStateStore
from sessions_app.stores.memory import InMemorySessionStateStore
from sessions_app.stores.orm import ORMSessionStateStore
from sessions_app.stores.types import (
    LIVE_STATUSES,
    CasApplied,
    CasRejected,
    CheckpointMeta,
    CommitResult,
    InterruptFlagInfo,
    Lease,
    Message,
    MessageRole,
    ReplaceOp,
    SessionState,
    SessionStatus,
    StagedChangeStatus,
    StagedToolChange,
)
from tests.services import database_vendor

# Expiry times and sweep times are minutes after this fixed instant, so the model can order them.
EPOCH = datetime(2030, 1, 1, tzinfo=UTC)
EXPIRIES = st.sampled_from([None, 0, 1, 2, 3]).map(
    lambda minutes: None if minutes is None else EPOCH + timedelta(minutes=minutes)
)
MAX_SESSIONS = 3
HOLDERS = ("worker-a", "worker-b")
TOOL_CALLS = ("call-a", "call-b", "call-c")
LEASE_TTL = 600.0
INTERRUPTIBLE = (SessionStatus.ACTIVE, SessionStatus.SUSPENDED_CLIENT_TOOL)
STEP_OUTCOMES = (SessionStatus.ACTIVE, SessionStatus.COMPLETED, SessionStatus.SUSPENDED_CLIENT_TOOL)
REAP_ERROR = "Session expired."
REAP_REASON = "expired"


@dataclass
class ModelStagedChange:
    """What one tool call of a step should have staged."""

    value: int
    # (when last staged, when first staged): the store lists changes in this order.
    order: tuple[int, int]
    status: StagedChangeStatus = StagedChangeStatus.STAGED
    checkpoint_id: str | None = None


@dataclass
class ModelSession:
    """What one session should hold."""

    expires_at: datetime | None
    status: SessionStatus = SessionStatus.ACTIVE
    version: int = 1
    step_count: int = 0
    custom_state: dict[str, Any] | None = None
    error: str | None = None
    failure_reason: str | None = None
    interrupt_context: dict[str, Any] | None = None
    flag_raised: bool = False
    flag_reason: str | None = None
    lease_holder: str = ""
    lease_live: bool = False
    lease_abandoned: int = 0
    # (id, parent_id, content), in sequence order.
    messages: list[tuple[str, str | None, str]] = field(default_factory=list)
    staged: dict[tuple[str, str], ModelStagedChange] = field(default_factory=dict)
    # (checkpoint_id, step_id, message_count, version, status), oldest first.
    checkpoints: list[tuple[str, str, int, int, str]] = field(default_factory=list)

    def plan_append(self, messages: list[Message]) -> list[tuple[str, str | None, str]]:
        """Return the messages an append stores: held ids skipped, each new one a child."""
        held = {message_id for message_id, _, _ in self.messages}
        previous = self.messages[-1][0] if self.messages else None
        planned = []
        for message in messages:
            if message.id not in held:
                planned.append((message.id, previous, message.content))
                held.add(message.id)
            previous = message.id
        return planned


@dataclass(frozen=True)
class Worker:
    """A worker that claimed a step of a session and holds the state it loaded then."""

    session_id: str
    holder: str
    step_id: str
    loaded: SessionState


def assert_state(state: SessionState, model: ModelSession) -> None:
    """Assert that a stored state is the model's."""
    assert (
        state.status,
        state.version,
        state.step_count,
        state.custom_state,
        state.error,
        state.failure_reason,
        state.interrupt_context,
        state.expires_at,
        state.message_count,
    ) == (
        model.status,
        model.version,
        model.step_count,
        model.custom_state,
        model.error,
        model.failure_reason,
        model.interrupt_context,
        model.expires_at,
        len(model.messages),
    )
    assert_flag(state.interrupt_flag, model)


def assert_flag(flag: InterruptFlagInfo | None, model: ModelSession) -> None:
    """Assert that a stored interrupt flag is the model's."""
    assert (flag is not None, flag.reason if flag else None) == (
        model.flag_raised,
        model.flag_reason if model.flag_raised else None,
    )


class StoreMachine(RuleBasedStateMachine):
    """Random operations on one store, each checked against `ModelSession`s."""

    sessions = Bundle("sessions")
    workers = Bundle("workers")

    def __init__(self, store: SessionStateStore):
        super().__init__()
        self.store = store
        self.token = uuid.uuid4().hex[:8]
        self.counter = itertools.count(1)
        self.model: dict[str, ModelSession] = {}
        self.deleted: set[str] = set()
        self.reaped: set[str] = set()
        self.seen_versions: dict[str, int] = {}
        self.written: set[str] = set()
        self.touched: set[str] = set()

    def new_id(self, kind: str) -> str:
        """Return an id unique to this example (ids sort like their counters everywhere)."""
        return f"hyp{self.token}{kind}{next(self.counter):04d}"

    def write_state(self, session_id: str) -> ModelSession:
        """Record a state write of the session in the model; return its model."""
        model = self.model[session_id]
        model.version += 1
        self.written.add(session_id)
        self.touched.add(session_id)
        return model

    def read(self, session_id: str) -> tuple:
        """Return everything stored of the session, for before-and-after comparisons."""
        return (
            self.store.load_state(session_id),
            self.store.get_messages(session_id, limit=1000),
            self.store.list_checkpoints(session_id),
            self.store.get_staged_changes(session_id),
        )

    def check_contents(self, session_id: str) -> None:
        """Assert that the session's messages, checkpoints, staging and flag are the model's."""
        model = self.model.get(session_id)
        if model is None:
            assert not self.store.session_exists(session_id)
            return
        page = self.store.get_messages(session_id, limit=1000)
        stored = [(m.id, m.parent_id, m.content) for m in page.messages]
        assert stored == model.messages
        assert [m.sequence for m in page.messages] == list(range(1, len(model.messages) + 1))
        assert page.total == self.store.get_message_count(session_id) == len(model.messages)
        checkpoints = self.store.list_checkpoints(session_id)
        assert [
            (c.checkpoint_id, c.step_id, c.message_count, c.state["version"], c.state["status"])
            for c in checkpoints
        ] == model.checkpoints[::-1]
        assert all(c.state["message_count"] == c.message_count for c in checkpoints)
        assert self.store.get_latest_checkpoint(session_id) == (
            checkpoints[0] if checkpoints else None
        )
        assert [
            (c.step_id, c.tool_call_id, c.status, c.checkpoint_id, c.merge_ops)
            for c in self.store.get_staged_changes(session_id)
        ] == [
            (
                step_id,
                call,
                change.status,
                change.checkpoint_id,
                [ReplaceOp(key=call, value=change.value)],
            )
            for (step_id, call), change in sorted(model.staged.items(), key=lambda i: i[1].order)
        ]
        assert_flag(self.store.check_interrupt_flag(session_id), model)

    def create(self, expires_at: datetime | None) -> str:
        """Create a session expiring at `expires_at` and return its id."""
        session_id = self.new_id("s")
        state = self.store.create_session(session_id, agent_type="assistant", expires_at=expires_at)
        self.model[session_id] = ModelSession(expires_at=expires_at)
        assert_state(state, self.model[session_id])
        self.written.add(session_id)
        self.touched.add(session_id)
        return session_id

    @initialize(target=sessions, expires_at=EXPIRIES)
    def first_session(self, expires_at: datetime | None) -> str:
        """Create the example's first session."""
        return self.create(expires_at)

    @precondition(lambda self: len(self.model) + len(self.deleted) < MAX_SESSIONS)
    @rule(target=sessions, expires_at=EXPIRIES)
    def create_session(self, expires_at: datetime | None) -> str:
        """Create another session."""
        return self.create(expires_at)

    @rule(
        session_id=sessions,
        count=st.integers(1, 3),
        extra=st.sampled_from(["none", "retried", "foreign"]),
        data=st.data(),
    )
    def append_messages(self, session_id: str, count: int, extra: str, data: st.DataObject) -> None:
        """Append new messages, after a retried one (skipped) or before a foreign id (refused).

        A batch holding another session's message id raises and writes nothing.
        """
        batch = [
            Message(role=MessageRole.USER, id=self.new_id("m"), content=f"said {n}")
            for n in range(count)
        ]
        model = self.model.get(session_id)
        if model is None:
            with pytest.raises(SessionNotFound):
                self.store.append_messages(session_id, batch)
            return
        foreign = [
            message_id
            for other_id, other in sorted(self.model.items())
            if other_id != session_id
            for message_id, _, _ in other.messages
        ]
        if extra == "foreign" and foreign:
            taken = data.draw(st.sampled_from(foreign), label="foreign id")
            batch.append(Message(role=MessageRole.USER, id=taken, content="foreign"))
            before = self.read(session_id)
            with pytest.raises(MessageIdConflict):
                self.store.append_messages(session_id, batch)
            assert self.read(session_id) == before
            return
        if extra == "retried" and model.messages:
            held = data.draw(st.sampled_from([m[0] for m in model.messages]), label="retried")
            batch.insert(0, Message(role=MessageRole.USER, id=held, content="retried"))
        planned = model.plan_append(batch)
        appended = self.store.append_messages(session_id, batch)
        first = len(model.messages) + 1
        assert [(m.id, m.parent_id, m.content) for m in appended] == planned
        assert [m.sequence for m in appended] == list(range(first, first + len(planned)))
        model.messages += planned
        self.touched.add(session_id)

    @rule(
        target=workers,
        session_id=sessions,
        holder=st.sampled_from(HOLDERS),
        stalls=st.booleans(),
    )
    def claim_step(self, session_id: str, holder: str, stalls: bool) -> Worker | MultipleResults:
        """Claim a step: take the lease (a state write) and load the state under it.

        A worker that `stalls` takes a lease that has run out already: anyone may take the
        session from it, the sweep included, while it still holds the version it claimed.
        """
        ttl = 0.0 if stalls else LEASE_TTL
        model = self.model.get(session_id)
        if model is None:
            with pytest.raises(SessionNotFound):
                self.store.claim_step(session_id, holder, ttl)
            return multiple()
        claim = self.store.claim_step(session_id, holder, ttl)
        if model.lease_live and model.lease_holder not in ("", holder):
            assert claim is None
            return multiple()
        taken_over = model.lease_holder not in ("", holder)
        self.write_state(session_id)
        model.lease_holder, model.lease_live = holder, not stalls
        model.lease_abandoned += taken_over
        assert claim.lease == Lease(
            version=model.version, taken_over=taken_over, abandoned=model.lease_abandoned
        )
        assert_state(claim.state, model)
        return Worker(session_id, holder, self.new_id("step"), claim.state)

    @rule(
        worker=workers,
        calls=st.lists(st.sampled_from(TOOL_CALLS), min_size=1, max_size=3),
        value=st.integers(0, 9),
    )
    def stage_changes(self, worker: Worker, calls: list[str], value: int) -> None:
        """Stage (or restage) the state writes of some of the step's tool calls."""
        changes = [
            StagedToolChange(tool_call_id=call, merge_ops=[ReplaceOp(key=call, value=value)])
            for call in calls
        ]
        model = self.model.get(worker.session_id)
        if model is None:
            with pytest.raises(SessionNotFound):
                self.store.stage_changes(worker.session_id, worker.step_id, changes)
            return
        self.store.stage_changes(worker.session_id, worker.step_id, changes)
        staged_at = next(self.counter)
        for call in calls:
            earlier = model.staged.get((worker.step_id, call))
            first = next(self.counter) if earlier is None else earlier.order[1]
            model.staged[worker.step_id, call] = ModelStagedChange(value, (staged_at, first))
        self.touched.add(worker.session_id)

    @rule(
        worker=workers,
        replies=st.integers(0, 2),
        outcome=st.sampled_from(STEP_OUTCOMES),
        release=st.booleans(),
    )
    def commit_step(
        self, worker: Worker, replies: int, outcome: SessionStatus, release: bool
    ) -> None:
        """Commit the worker's step with the version it claimed; a stale one writes nothing."""
        loaded, session_id = worker.loaded, worker.session_id
        state = dataclasses.replace(
            loaded,
            custom_state={"last_step": worker.step_id},
            step_count=loaded.step_count + 1,
            status=outcome if loaded.status == SessionStatus.ACTIVE else loaded.status,
        )
        messages = [
            Message(role=MessageRole.ASSISTANT, id=f"{worker.step_id}r{n}", content=f"reply {n}")
            for n in range(replies)
        ]
        checkpoint = CheckpointMeta(
            step_id=worker.step_id, step_count=state.step_count, stream_sequence=replies
        )

        def commit() -> CommitResult:
            return self.store.save_state_and_promote_staging(
                session_id,
                state,
                messages,
                checkpoint,
                expected_version=loaded.version,
                release_lease_of=worker.holder if release else None,
            )

        model = self.model.get(session_id)
        if model is None:
            with pytest.raises(SessionNotFound):
                commit()
            return
        if model.version != loaded.version:
            before = self.read(session_id)
            with pytest.raises(VersionConflict):
                commit()
            assert self.read(session_id) == before
            return
        planned = model.plan_append(messages)
        result = commit()
        self.write_state(session_id)
        assert result.state.version == model.version
        model.messages += planned
        model.status, model.step_count = state.status, state.step_count
        model.custom_state = state.custom_state
        for (step_id, _), change in model.staged.items():
            if step_id == worker.step_id and change.status == StagedChangeStatus.STAGED:
                change.status = StagedChangeStatus.PROMOTED
                change.checkpoint_id = result.checkpoint_id
        model.checkpoints.append(
            (result.checkpoint_id, worker.step_id, len(model.messages), model.version, state.status)
        )
        model.lease_abandoned = 0  # The step finished.
        if release and model.lease_holder == worker.holder:
            model.lease_holder, model.lease_live = "", False

    @rule(worker=workers, clean=st.booleans())
    def release_lease(self, worker: Worker, clean: bool) -> None:
        """Give up the lease; `clean=False` leaves it as a worker that gave up half done."""
        model = self.model.get(worker.session_id)
        if model is None:
            with pytest.raises(SessionNotFound):
                self.store.release_lease(worker.session_id, worker.holder, clean=clean)
            return
        held = model.lease_holder == worker.holder
        assert self.store.release_lease(worker.session_id, worker.holder, clean=clean) is held
        if held:
            model.lease_live = False
            if clean:
                model.lease_holder, model.lease_abandoned = "", 0

    @rule(session_id=sessions, raised=st.booleans(), reason=st.sampled_from([None, "stop"]))
    def interrupt_flag(self, session_id: str, raised: bool, reason: str | None) -> None:
        """Raise or lower the durable interrupt flag; it is not state, so the version stays.

        Lowering a lowered flag, or a deleted session's, does nothing.
        """
        model = self.model.get(session_id)
        if not raised:
            self.store.clear_interrupt_flag(session_id)
        elif model is None:
            with pytest.raises(SessionNotFound):
                self.store.set_interrupt_flag(session_id, reason)
        else:
            self.store.set_interrupt_flag(session_id, reason)
        if model is not None:
            model.flag_raised, model.flag_reason = raised, reason
            self.touched.add(session_id)

    @rule(session_id=sessions, expected=st.sampled_from(["any", "current", "stale"]))
    def interrupt(self, session_id: str, expected: str) -> None:
        """Move an active or suspended session to interrupted, guarded by status and version."""
        model = self.model.get(session_id)
        context = {"reason": "user"}
        if model is None:
            with pytest.raises(SessionNotFound):
                self.store.compare_and_set_status(
                    session_id, INTERRUPTIBLE, SessionStatus.INTERRUPTED
                )
            return
        expected_version = {"any": None, "current": model.version, "stale": model.version - 1}
        result = self.store.compare_and_set_status(
            session_id,
            INTERRUPTIBLE,
            SessionStatus.INTERRUPTED,
            interrupt_context=context,
            expected_version=expected_version[expected],
        )
        if model.status not in INTERRUPTIBLE or expected == "stale":
            assert result == CasRejected(current_status=model.status, current_version=model.version)
            return
        self.write_state(session_id)
        model.status, model.interrupt_context = SessionStatus.INTERRUPTED, context
        assert result == CasApplied(new_version=model.version)

    @rule(session_id=sessions)
    def resume(self, session_id: str) -> None:
        """Move an interrupted session back to active and lower its flag."""
        model = self.model.get(session_id)
        if model is None:
            with pytest.raises(SessionNotFound):
                self.store.compare_and_set_status(
                    session_id, [SessionStatus.INTERRUPTED], SessionStatus.ACTIVE
                )
            return
        result = self.store.compare_and_set_status(
            session_id, [SessionStatus.INTERRUPTED], SessionStatus.ACTIVE
        )
        if model.status != SessionStatus.INTERRUPTED:
            assert result == CasRejected(current_status=model.status, current_version=model.version)
            return
        self.write_state(session_id)
        model.status = SessionStatus.ACTIVE
        assert result == CasApplied(new_version=model.version)
        self.store.clear_interrupt_flag(session_id)
        model.flag_raised = False

    @rule(
        minutes=st.integers(0, 4),
        delete=st.booleans(),
        limit=st.integers(1, 3),
        data=st.data(),
    )
    def reap(self, minutes: int, delete: bool, limit: int, data: st.DataObject) -> None:
        """Sweep expired sessions: fail live ones (a state write), or delete any."""
        now = EPOCH + timedelta(minutes=minutes)
        known = sorted(self.model.keys() | self.deleted)
        session_ids = data.draw(st.none() | st.sets(st.sampled_from(known)), label="session_ids")
        expected = sorted(
            (model.expires_at, session_id)
            for session_id, model in self.model.items()
            if model.expires_at is not None
            and model.expires_at <= now
            and (delete or model.status in LIVE_STATUSES)
            and (session_ids is None or session_id in session_ids)
            and not model.lease_live
        )[:limit]
        reaped = self.store.reap_expired_sessions(
            now,
            error=REAP_ERROR,
            failure_reason=REAP_REASON,
            delete=delete,
            session_ids=session_ids,
            limit=limit,
        )
        assert [(r.session_id, r.stream_id) for r in reaped] == [(s, s) for _, s in expected]
        for _, session_id in expected:
            if delete:
                del self.model[session_id]
                self.deleted.add(session_id)
                self.touched.add(session_id)
            else:
                model = self.write_state(session_id)
                model.status, model.error, model.failure_reason = (
                    SessionStatus.FAILED,
                    REAP_ERROR,
                    REAP_REASON,
                )
                self.reaped.add(session_id)

    @rule()
    def reconnect(self) -> None:
        """Drop the database connection and read every session afresh."""
        connection.close()
        for session_id in sorted(self.model.keys() | self.deleted):
            state = self.store.load_state(session_id)
            if session_id in self.model:
                assert_state(state, self.model[session_id])
            else:
                assert state is None
            self.check_contents(session_id)

    @invariant()
    def store_matches_model(self) -> None:
        """Check every session's state, and all else of the sessions the step touched."""
        for session_id in sorted(self.model.keys() | self.deleted):
            state = self.store.load_state(session_id)
            if session_id in self.touched:
                self.check_contents(session_id)
            if session_id in self.deleted:
                assert state is None
                continue
            assert_state(state, self.model[session_id])
            if session_id in self.reaped:
                assert state.status == SessionStatus.FAILED
            seen = self.seen_versions.get(session_id, 0)
            if session_id in self.written:
                assert state.version > seen
            else:
                assert state.version == seen
            self.seen_versions[session_id] = state.version
        self.written.clear()
        self.touched.clear()

    def teardown(self) -> None:
        """Delete the sessions the example left."""
        for session_id in self.model:
            self.store.delete_session(session_id)


# Shrinking a failure can take Hypothesis 300 s on its own; let it finish and report.
@pytest.mark.timeout(600)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "store_class", [InMemorySessionStateStore, ORMSessionStateStore], ids=["memory", "orm"]
)
def test_store_agrees_with_a_model_under_random_operations(
    store_class: type[SessionStateStore],
) -> None:
    examples = 200 if database_vendor() == "postgresql" else 50
    run_state_machine_as_test(
        lambda: StoreMachine(store_class()),
        settings=settings(
            max_examples=examples,
            stateful_step_count=25,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
