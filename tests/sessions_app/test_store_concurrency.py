"""Concurrency and atomicity proofs for the session stores (DESIGN invariants 1-3).

Threads here are real writers (`tests.threads.run_in_threads`).
"""

import dataclasses
import time
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sessions_app import models
from sessions_app.errors import VersionConflict
from sessions_app.stores.orm import ORMSessionStateStore
from sessions_app.stores.types import (
    AppendOp,
    CheckpointMeta,
    Message,
    MessageRole,
    ReplaceOp,
    RunStatus,
    SessionStatus,
    StagedChangeStatus,
    StagedToolChange,
    StepWrites,
)
from tests.threads import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_appends_get_gap_free_unique_sequences(store, session_id):
    threads, appends = 8, 200

    def append(worker: int) -> None:
        for n in range(appends):
            store.append_messages(
                session_id, [Message(role=MessageRole.USER, content=f"{worker}:{n}")]
            )

    results = run_in_threads(threads, append)

    assert results == [None] * threads
    messages = []
    for offset in range(0, threads * appends, 1000):
        messages += store.get_messages(session_id, offset=offset, limit=1000).messages
    assert [m.sequence for m in messages] == list(range(1, threads * appends + 1))
    assert store.get_message_count(session_id) == threads * appends
    assert len({m.content for m in messages}) == threads * appends
    # Each append saw the one committed before it: the history is one unbroken chain.
    assert [m.parent_id for m in messages] == [None] + [m.id for m in messages[:-1]]


def test_of_two_writers_with_one_expected_version_exactly_one_commits(store, session_id):
    for round_number in range(10):
        state = store.load_state(session_id)

        def commit(writer: int, state=state, round_number=round_number):
            return store.save_state_and_promote_staging(
                session_id,
                dataclasses.replace(state, custom_state={"writer": writer}),
                [Message(role=MessageRole.ASSISTANT, content=f"round {round_number} by {writer}")],
                CheckpointMeta(
                    step_id=f"step-{round_number}-{writer}",
                    step_count=round_number,
                    stream_sequence=round_number,
                ),
                expected_version=state.version,
            )

        results = run_in_threads(2, commit)

        conflicts = [r for r in results if isinstance(r, VersionConflict)]
        commits = [r for r in results if not isinstance(r, Exception)]
        assert len(commits) == 1, results
        assert len(conflicts) == 1, results
        winner = results.index(commits[0])
        loaded = store.load_state(session_id)
        assert loaded.custom_state == {"writer": winner}
        assert loaded.version == state.version + 1 == commits[0].state.version
        assert conflicts[0].current_version == state.version + 1
        last = store.get_messages(session_id, offset=round_number, limit=10).messages
        assert [m.content for m in last] == [f"round {round_number} by {winner}"]
        assert store.get_latest_checkpoint(session_id).checkpoint_id == commits[0].checkpoint_id
    assert len(store.list_checkpoints(session_id)) == 10
    assert store.get_message_count(session_id) == 10


def test_parallel_merge_appends_all_land(store, session_id):
    threads, writes = 8, 25

    def merge(worker: int) -> None:
        for n in range(writes):
            store.merge_custom_state(
                session_id,
                StepWrites(
                    ops=[
                        AppendOp(key="items", items=[f"{worker}:{n}"]),
                        ReplaceOp(key=f"last-{worker}", value=n),
                    ]
                ),
            )

    results = run_in_threads(threads, merge)

    assert results == [None] * threads
    state = store.load_state(session_id)
    items = state.custom_state["items"]
    assert len(items) == threads * writes
    assert set(items) == {f"{w}:{n}" for w in range(threads) for n in range(writes)}
    for worker in range(threads):
        assert state.custom_state[f"last-{worker}"] == writes - 1
        mine = [item for item in items if item.startswith(f"{worker}:")]
        assert mine == [f"{worker}:{n}" for n in range(writes)]
    assert state.version == 1 + threads * writes


_CHECKPOINT_TABLE = models.Checkpoint._meta.db_table
_REJECT_CHECKPOINTS = {
    "postgresql": (
        [
            "CREATE FUNCTION reject_checkpoint() RETURNS trigger AS $$ "
            "BEGIN RAISE EXCEPTION 'injected checkpoint failure'; END $$ LANGUAGE plpgsql",
            f"CREATE TRIGGER reject_checkpoint BEFORE INSERT ON {_CHECKPOINT_TABLE} "
            "FOR EACH ROW EXECUTE FUNCTION reject_checkpoint()",
        ],
        [
            f"DROP TRIGGER reject_checkpoint ON {_CHECKPOINT_TABLE}",
            "DROP FUNCTION reject_checkpoint()",
        ],
    ),
    "sqlite": (
        [
            f"CREATE TRIGGER reject_checkpoint BEFORE INSERT ON {_CHECKPOINT_TABLE} "
            "BEGIN SELECT RAISE(ABORT, 'injected checkpoint failure'); END"
        ],
        ["DROP TRIGGER reject_checkpoint"],
    ),
}


@pytest.fixture
def checkpoint_inserts_fail():
    """Make the database itself refuse every checkpoint insert while the test runs."""
    install, remove = _REJECT_CHECKPOINTS[connection.vendor]
    with connection.cursor() as cursor:
        for sql in install:
            cursor.execute(sql)
    yield
    with connection.cursor() as cursor:
        for sql in remove:
            cursor.execute(sql)


def test_a_failure_after_the_message_insert_leaves_no_trace(checkpoint_inserts_fail):
    store = ORMSessionStateStore()
    session_id = store.create_session(agent_type="assistant").session_id
    store.append_messages(session_id, [Message(role=MessageRole.USER, content="before")])
    store.stage_changes(session_id, "step-1", [StagedToolChange(tool_call_id="call-1")])
    before = store.load_state(session_id)

    with (
        CaptureQueriesContext(connection) as queries,
        pytest.raises(DatabaseError, match="injected checkpoint failure"),
    ):
        store.save_state_and_promote_staging(
            session_id,
            dataclasses.replace(before, custom_state={"half": "written"}, step_count=1),
            [Message(role=MessageRole.ASSISTANT, content="never seen")],
            CheckpointMeta(step_id="step-1", step_count=1, stream_sequence=3),
            expected_version=before.version,
        )

    # The checkpoint insert is the last write: messages and state were already written.
    executed = [query["sql"] for query in queries.captured_queries]
    assert any(sql.startswith("INSERT INTO") and "_message" in sql for sql in executed)
    assert any(sql.startswith("UPDATE") and "_agentsession" in sql for sql in executed)
    assert store.load_state(session_id) == before
    assert [m.content for m in store.get_messages(session_id).messages] == ["before"]
    assert store.list_checkpoints(session_id) == []
    assert [c.status for c in store.get_staged_changes(session_id)] == [StagedChangeStatus.STAGED]


def test_two_sweeps_at_once_reap_each_session_exactly_once(store):
    now = timezone.now()
    expected = {f"expired-{n:02}" for n in range(40)}
    for session_id in sorted(expected):
        store.create_session(session_id, agent_type="a", expires_at=now - timedelta(minutes=5))

    def sweep(_):
        reaped = []
        while batch := store.reap_expired_sessions(now, error="x", failure_reason="y", limit=7):
            reaped.extend(session.session_id for session in batch)
        return reaped

    first, second = (set(reaped) for reaped in run_in_threads(2, sweep))
    assert first.isdisjoint(second)
    assert first | second == expected
    assert store.list_sessions(status=SessionStatus.FAILED, limit=100).total == 40


def test_runs_created_at_once_on_one_session_take_its_next_turns(store, session_id):
    """Each creation reads the session's last turn only once it holds the session: one that
    read it before (while the others' transactions held the session) would take a turn
    already taken."""
    writers = 6

    def create(writer: int) -> int:
        with transaction.atomic():
            turn = store.create_run(session_id, f"run-{writer}").turn
            time.sleep(0.02)  # Hold the session while the others wait for it.
        return turn

    turns = run_in_threads(writers, create)

    assert sorted(turns) == list(range(1, writers + 1)), turns
    assert [run.turn for run in store.list_runs(session_id)] == list(range(1, writers + 1))


def test_a_run_queued_while_the_running_run_ends_is_never_stranded(store, session_id):
    """Queuing and ending race; the run's end either takes the queued run or refuses to queue.

    The end does what the executor's last commit does, in one transaction: write the state
    (which holds the session), end the run, then take the next queued run.
    """
    stranded = []
    for round_number in range(20):
        run_id = f"run-{round_number}"
        store.create_run(session_id, run_id)

        def end_or_queue(writer: int, run_id=run_id):
            if writer == 1:
                return store.queue_run(session_id, f"{run_id}-next", "Hi")
            with transaction.atomic():
                state = store.load_state(session_id)
                store.save_state(session_id, state, expected_version=state.version)
                time.sleep(0.01)  # Widen the window in which the queue could slip past.
                store.update_run_status(run_id, RunStatus.COMPLETED)
                return store.take_queued_run(session_id)

        taken, queued = run_in_threads(2, end_or_queue)

        assert not isinstance(taken, Exception), taken
        assert not isinstance(queued, Exception), queued
        if queued and taken is None:
            stranded.append(round_number)
        store.discard_queued_runs(session_id)
    assert stranded == []
