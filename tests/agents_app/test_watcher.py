"""The step watch on the real database: it keeps a running step's lease, drops a finished one,
and stops a step that is interrupted."""

import threading
import time
import types

import pytest

from agents_app.runtime import watcher
from agents_app.runtime.watcher import StepWatch
from sessions_app.stores import get_session_store

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 0.6
POLL = 0.05


@pytest.fixture
def session_id() -> str:
    return get_session_store().create_session(agent_type="watched").session_id


def watch(session_id: str, stopped: threading.Event | None = None) -> StepWatch:
    return StepWatch(
        session_id=session_id,
        holder="step",
        lease_seconds=LEASE,
        poll_seconds=POLL,
        on_stop=(stopped or threading.Event()).set,
    )


def test_a_running_step_keeps_its_lease_past_its_time_to_live(session_id):
    store = get_session_store()
    store.acquire_lease(session_id, "step", LEASE)

    with watch(session_id) as running:
        time.sleep(LEASE * 2.5)
        assert store.acquire_lease(session_id, "other", LEASE) is None
    assert not running.stopped


def test_a_finished_step_is_no_longer_renewed(session_id):
    store = get_session_store()
    store.acquire_lease(session_id, "step", LEASE)
    with watch(session_id):
        time.sleep(POLL * 3)

    time.sleep(LEASE * 1.5)

    assert store.acquire_lease(session_id, "other", LEASE) is not None


def test_an_interrupt_stops_the_step_within_a_poll(session_id):
    store = get_session_store()
    store.acquire_lease(session_id, "step", LEASE)
    stopped = threading.Event()

    with watch(session_id, stopped) as running:
        store.set_interrupt_flag(session_id, "enough")
        assert stopped.wait(POLL * 10)
    assert running.interrupted
    assert not running.lease_lost


def test_a_step_that_lost_its_lease_is_stopped(session_id):
    store = get_session_store()
    store.acquire_lease(session_id, "step", 0.01)
    time.sleep(0.05)
    store.acquire_lease(session_id, "other", 30)  # Taken over while the step still runs.
    stopped = threading.Event()

    with watch(session_id, stopped) as running:
        assert stopped.wait(LEASE * 2)
    assert running.lease_lost


class CountedCondition(threading.Condition):
    """A condition that counts its notifications."""

    notified = 0

    def notify(self, n: int = 1) -> None:
        self.notified += 1
        super().notify(n)


def test_a_starting_step_wakes_the_watch_only_if_due_before_its_next_look(monkeypatch, session_id):
    counted = types.SimpleNamespace(Condition=CountedCondition, Thread=threading.Thread)
    monkeypatch.setattr(watcher, "threading", counted)
    own = watcher._Watcher()

    def started(poll: float) -> StepWatch:
        step = StepWatch(
            session_id=session_id,
            holder="step",
            lease_seconds=LEASE,
            poll_seconds=poll,
            on_stop=lambda: None,
        )
        own.add(step)
        return step

    steps = [started(30)]
    deadline = time.monotonic() + 5
    while own._next_look is None and time.monotonic() < deadline:  # It plans its look.
        time.sleep(0.01)
    steps += [started(30), started(30)]
    assert own._wake.notified == 1
    steps.append(started(0.01))  # Due before the look it planned.
    assert own._wake.notified == 2
    began = steps[-1].looked_at
    while steps[-1].looked_at == began and time.monotonic() < deadline:  # Looked at in time.
        time.sleep(0.01)
    assert steps[-1].looked_at > began
    assert steps[0].looked_at < began  # The others are not due yet.
    for step in steps:
        own.remove(step)


def test_steps_past_half_a_poll_are_looked_at_with_the_first_one_due(session_id):
    own = watcher._Watcher()
    poll = 1.0

    def started() -> StepWatch:
        step = StepWatch(
            session_id=session_id,
            holder="step",
            lease_seconds=30,
            poll_seconds=poll,
            on_stop=lambda: None,
        )
        own.add(step)
        return step

    first = started()
    time.sleep(poll / 5)  # The second is due a fifth of a poll after the first,
    second = started()
    added = second.looked_at
    deadline = time.monotonic() + 5
    while first.looked_at < added and time.monotonic() < deadline:  # Until the first's look.
        time.sleep(0.01)
    time.sleep(poll / 2)  # Past when the second would have had a look of its own.

    assert first.looked_at > added
    assert second.looked_at == first.looked_at  # but was looked at with it: one look.
    for step in (first, second):
        own.remove(step)
