"""The recovery sweep (DESIGN invariant 9): a run whose step task was lost is enqueued again,
a second task for a run that was only slow applies nothing twice, runs that wait for people are
left alone, and a run that never moves on fails as stalled.

Runs started here send their steps to a private queue no worker reads: the task is lost as a
purged queue or a broker restarted without persistence would lose it. The sweep's tasks are
collected, and played with the executor as a worker would play them.
"""

import pytest

from agents_app.runs import services
from agents_app.runtime import executor, recovery
from helix_project.celery import app
from sessions_app.stores import get_session_store
from sessions_app.stores.types import RunStatus, SessionStatus
from tests.agents_app import agents  # noqa: F401 (registers the asker)
from tests.agents_app.worker import Worker
from tests.threads import run_in_threads
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("private_queue")]


@pytest.fixture(autouse=True)
def _stalled_at_once(settings):
    settings.HELIX = {**settings.HELIX, "STALLED_RUN_SECONDS": 0, "RUN_MAX_RECOVERIES": 2}


def sweep() -> list[tuple[str, str, int]]:
    """Run the sweep; return the step tasks it sent."""
    sent: list[tuple[str, str, int]] = []
    recovery.recover_stalled_runs(enqueue=lambda *task: sent.append(task), fail=executor.fail_run)
    return sent


def play(session_id: str, run_id: str, step: int) -> None:
    """Run a step task to its end, its hand-overs included, as workers would."""
    outcome = executor.run_steps(session_id, run_id, step, time_slice=0)
    while outcome.next_step is not None:
        executor.hand_over(session_id, outcome.holder)
        outcome = executor.run_steps(session_id, run_id, outcome.next_step, time_slice=0)


def start(owner, message: str = "add 2") -> tuple[str, str]:
    started = services.agent_start(user=owner, agent_type="counter", message=message)
    return started.session_id, started.run_id


def transcript(session_id: str) -> list[tuple[str, str]]:
    messages = get_session_store().get_messages(session_id, limit=100).messages
    return [(m.role, m.content) for m in messages]


def test_a_run_whose_task_was_lost_is_enqueued_again_and_completes(owner):
    lost, run_id = start(owner)
    clean, clean_run = start(owner)
    play(clean, clean_run, 1)

    sent = sweep()

    assert sent == [(lost, run_id, 1)]  # The clean run ended: nothing to recover.
    play(*sent[0])
    state = get_session_store().load_state(lost)
    assert (state.status, state.custom_state) == (SessionStatus.COMPLETED, {"count": 2})
    assert transcript(lost) == transcript(clean)
    assert sweep() == []


def test_a_run_lost_between_steps_goes_on_from_its_last_commit(owner):
    session_id, run_id = start(owner)
    first = executor.run_step(session_id, run_id, 1, holder="dead-worker")
    assert first.next_step == 2  # Committed; the worker died before handing step 2 on.
    executor.hand_over(session_id, first.holder)

    assert sweep() == [(session_id, run_id, 2)]

    play(session_id, run_id, 2)
    state = get_session_store().load_state(session_id)
    assert (state.status, state.step_count, state.custom_state) == (
        SessionStatus.COMPLETED,
        2,
        {"count": 2},
    )


def test_a_recovered_run_whose_first_task_was_only_slow_applies_nothing_twice(owner):
    session_id, run_id = start(owner)
    [duplicate] = sweep()
    assert duplicate == (session_id, run_id, 1)
    clean, clean_run = start(owner)
    play(clean, clean_run, 1)

    # The original task and the sweep's run at once; the loser retries until the lease is free.
    def deliver(_):
        outcome = executor.run_steps(session_id, run_id, 1, time_slice=60)
        while outcome.retry_after is not None:
            outcome = executor.run_steps(session_id, run_id, 1, time_slice=60)
        return outcome

    assert run_in_threads(2, deliver) == [executor.StepOutcome()] * 2

    state = get_session_store().load_state(session_id)
    assert (state.status, state.step_count, state.custom_state) == (
        SessionStatus.COMPLETED,
        2,
        {"count": 2},
    )
    assert transcript(session_id) == transcript(clean)
    checkpoints = get_session_store().list_checkpoints
    assert len(checkpoints(session_id)) == len(checkpoints(clean))


def test_suspended_runs_and_runs_in_flight_are_left_alone(owner):
    waiting = services.agent_start(user=owner, agent_type="asker", message="go")
    play(waiting.session_id, waiting.run_id, 1)
    assert get_session_store().get_current_run(waiting.session_id).status == RunStatus.SUSPENDED
    in_flight, _ = start(owner)
    assert get_session_store().claim_step(in_flight, "busy-worker", ttl=60) is not None

    assert sweep() == []


def test_a_run_that_never_moves_on_fails_as_stalled(owner):
    session_id, run_id = start(owner)

    for recovery_count in (1, 2):  # RUN_MAX_RECOVERIES: each sends its step again.
        assert sweep() == [(session_id, run_id, 1)], recovery_count
    assert sweep() == []  # The third time it gives up.

    state = get_session_store().load_state(session_id)
    assert (state.status, state.failure_reason) == (SessionStatus.FAILED, "stalled")
    assert "stalled at step 1: recovered 2 times" in state.error
    assert get_session_store().get_current_run(session_id).status == RunStatus.FAILED


def test_a_starting_worker_sweeps_and_finishes_a_run_whose_task_was_lost(owner, tmp_path):
    session_id, _ = start(owner)
    with app.connection_for_write() as connection:  # The broker lost the task.
        connection.default_channel.queue_purge(app.conf.task_default_queue)
    worker = Worker(tmp_path, HELIX_STALLED_RUN_SECONDS="0").start()
    try:
        store = get_session_store()
        wait_for(lambda: store.load_state(session_id).status == SessionStatus.COMPLETED)
    finally:
        worker.stop()
    assert store.load_state(session_id).custom_state == {"count": 2}
    assert "Recovered 1 stalled runs" in worker.read_log()
