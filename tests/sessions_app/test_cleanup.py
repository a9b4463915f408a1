"""`reap_expired_sessions` of the session store, on every store backend."""

import dataclasses
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app.errors import SessionNotFound, VersionConflict
from sessions_app.stores.types import RunStatus, SessionStatus

HOUR = timedelta(hours=1)
REAP = {"error": "Abandoned HITL wait", "failure_reason": "expired"}


@pytest.fixture
def now():
    return timezone.now()


@pytest.fixture
def population(store, now):
    """Sessions in every situation the sweep must tell apart."""
    expired_live = {
        "expired-active": SessionStatus.ACTIVE,
        "expired-suspended": SessionStatus.SUSPENDED_CLIENT_TOOL,
        "expired-awaiting": SessionStatus.SUSPENDED_AWAITING_CHILDREN,
        "expired-paused": SessionStatus.PAUSED,
    }
    for session_id, status in expired_live.items():
        store.create_session(session_id, agent_type="a", expires_at=now - HOUR)
        store.update_status(session_id, status)
    store.create_session("expired-completed", agent_type="a", expires_at=now - HOUR)
    store.update_status("expired-completed", SessionStatus.COMPLETED)
    store.create_session("expires-later", agent_type="a", expires_at=now + HOUR)
    store.create_session("never-expires", agent_type="a")
    return {session_id: store.load_state(session_id) for session_id in _all_ids(store)}


EXPIRED_LIVE = {"expired-active", "expired-suspended", "expired-awaiting", "expired-paused"}


def _all_ids(store) -> list[str]:
    return [s.session_id for s in store.list_sessions(limit=1000).sessions]


def test_reaping_fails_only_live_sessions_past_their_expiry(store, population, now):
    reaped = store.reap_expired_sessions(now, limit=100, **REAP)

    assert {s.session_id for s in reaped} == EXPIRED_LIVE
    for session_id, before in population.items():
        after = store.load_state(session_id)
        if session_id in EXPIRED_LIVE:
            assert after.status == SessionStatus.FAILED
            assert (after.error, after.failure_reason) == ("Abandoned HITL wait", "expired")
            assert after.version == before.version + 1
        else:
            assert after == before, session_id


def test_reaped_sessions_come_with_their_streams_and_parents(store, now):
    store.create_session("parent", agent_type="a")
    store.create_session("child", agent_type="b", parent_session_id="parent", expires_at=now - HOUR)

    [reaped] = store.reap_expired_sessions(now, **REAP)

    child = store.load_state("child")
    assert (reaped.session_id, reaped.agent_type) == ("child", "b")
    assert (reaped.stream_id, reaped.parent_session_id) == (child.stream_id, "parent")


def test_reaping_fails_the_unfinished_run_and_drops_queued_runs(store, now):
    store.create_session("s", agent_type="a", expires_at=now - HOUR)
    store.create_run("s", "first")
    store.update_run_status("first", RunStatus.COMPLETED)
    store.create_run("s", "second")
    store.queue_run("s", "third", "Hi")

    store.reap_expired_sessions(now, **REAP)

    runs = {run.run_id: run for run in store.list_runs("s")}
    assert runs["first"].status == RunStatus.COMPLETED
    assert (runs["second"].status, runs["second"].error) == (RunStatus.FAILED, REAP["error"])
    assert runs["second"].completed_at is not None
    assert store.take_queued_run("s") is None


def test_delete_mode_deletes_expired_sessions_of_any_status(store, population, now):
    reaped = store.reap_expired_sessions(now, delete=True, **REAP)

    expired = EXPIRED_LIVE | {"expired-completed"}
    assert {s.session_id for s in reaped} == expired
    assert set(_all_ids(store)) == {"expires-later", "never-expires"}


def test_a_session_whose_step_is_running_is_left_alone(store, now):
    store.create_session("busy", agent_type="a", expires_at=now - HOUR)
    store.create_session("stalled", agent_type="a", expires_at=now - HOUR)
    store.acquire_lease("busy", "worker-1", ttl=60)
    store.acquire_lease("stalled", "worker-2", ttl=60)
    store.renew_lease("stalled", "worker-2", ttl=-1)  # Its worker stopped renewing.

    reaped = store.reap_expired_sessions(timezone.now(), delete=True, **REAP)

    assert [s.session_id for s in reaped] == ["stalled"]
    assert store.load_state("busy").status == SessionStatus.ACTIVE


def test_batches_follow_expiry_order_and_respect_the_limit(store, now):
    for n in range(5):
        store.create_session(f"old-{n}", agent_type="a", expires_at=now - timedelta(minutes=n))

    first = store.reap_expired_sessions(now, limit=2, **REAP)
    rest = store.reap_expired_sessions(now, limit=10, **REAP)

    assert [s.session_id for s in first] == ["old-4", "old-3"]
    assert [s.session_id for s in rest] == ["old-2", "old-1", "old-0"]
    assert store.reap_expired_sessions(now, **REAP) == []


def test_only_the_named_sessions_are_considered(store, population, now):
    reaped = store.reap_expired_sessions(
        now, session_ids=["expired-active", "expires-later", "missing"], **REAP
    )

    assert [s.session_id for s in reaped] == ["expired-active"]
    assert store.load_state("expired-paused").status == SessionStatus.PAUSED


def test_a_session_extended_before_the_sweep_is_not_reaped(store, now):
    store.create_session("extended", agent_type="a", expires_at=now - HOUR)
    store.update_labels("extended", {"expires_at": now + HOUR})

    assert store.reap_expired_sessions(now, **REAP) == []


def test_a_late_worker_commit_cannot_resurrect_a_reaped_session(store, now):
    store.create_session("s", agent_type="a", expires_at=now - HOUR)
    seen_by_worker = store.load_state("s")

    store.reap_expired_sessions(now, **REAP)

    with pytest.raises(VersionConflict):
        store.save_state(
            "s",
            dataclasses.replace(seen_by_worker, status=SessionStatus.ACTIVE),
            expected_version=seen_by_worker.version,
        )
    assert store.load_state("s").status == SessionStatus.FAILED


def test_a_late_worker_commit_cannot_recreate_a_deleted_session(store, now):
    store.create_session("s", agent_type="a", expires_at=now - HOUR)
    seen_by_worker = store.load_state("s")

    store.reap_expired_sessions(now, delete=True, **REAP)

    with pytest.raises(SessionNotFound):
        store.save_state("s", seen_by_worker, expected_version=seen_by_worker.version)
    assert store.load_state("s") is None


def test_the_limit_must_be_a_page_size(store, now):
    with pytest.raises(ValueError, match="limit"):
        store.reap_expired_sessions(now, limit=0, **REAP)
