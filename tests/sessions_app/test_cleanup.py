"""`expired_session_cleanup` on every store backend."""

import dataclasses
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app.errors import VersionConflict
from sessions_app.services import EXPIRED_FAILURE_REASON, expired_session_cleanup
from sessions_app.stores.types import SessionStatus

HOUR = timedelta(hours=1)


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


def _all_ids(store) -> list[str]:
    return [s.session_id for s in store.list_sessions(limit=1000).sessions]


def test_cleanup_fails_only_live_sessions_past_their_expiry(store, population, now):
    report = expired_session_cleanup(store, now=now, error="Abandoned HITL wait", batch_size=2)

    expired_live = {"expired-active", "expired-suspended", "expired-awaiting", "expired-paused"}
    assert set(report.reaped) == expired_live
    assert (report.scanned, report.skipped, report.dry_run) == (4, [], False)
    for session_id, before in population.items():
        after = store.load_state(session_id)
        if session_id in expired_live:
            assert after.status == SessionStatus.FAILED
            assert (after.error, after.failure_reason) == (
                "Abandoned HITL wait",
                EXPIRED_FAILURE_REASON,
            )
            assert after.version == before.version + 1
        else:
            assert after == before, session_id


def test_dry_run_reports_without_writing(store, population, now):
    report = expired_session_cleanup(store, now=now, dry_run=True, batch_size=1)

    assert report.dry_run is True
    assert len(report.reaped) == report.scanned == 4
    assert all(store.load_state(i) == state for i, state in population.items())


def test_a_second_sweep_finds_nothing(store, population, now):
    expired_session_cleanup(store, now=now)

    again = expired_session_cleanup(store, now=now)

    assert (again.scanned, again.reaped, again.skipped) == (0, [], [])


def test_sweep_pages_through_many_expired_sessions(store, now):
    for n in range(25):
        store.create_session(
            f"old-{n:02}", agent_type="a", expires_at=now - timedelta(minutes=n + 1)
        )
        store.create_session(f"new-{n:02}", agent_type="a", expires_at=now + HOUR)

    report = expired_session_cleanup(store, now=now, batch_size=10)

    assert sorted(report.reaped) == [f"old-{n:02}" for n in range(25)]
    assert store.list_sessions(status=SessionStatus.ACTIVE).total == 25


def test_a_session_that_changed_after_listing_is_skipped(store, now, monkeypatch):
    store.create_session("extended", agent_type="a", expires_at=now - HOUR)
    store.create_session("abandoned", agent_type="a", expires_at=now - HOUR)
    list_expired_sessions = store.list_expired_sessions

    def list_then_extend(*args, **kwargs):
        batch = list_expired_sessions(*args, **kwargs)
        state = store.load_state("extended")
        if state.expires_at < now:  # The user comes back between listing and reaping.
            store.save_state("extended", dataclasses.replace(state, expires_at=now + HOUR))
        return batch

    monkeypatch.setattr(store, "list_expired_sessions", list_then_extend)

    report = expired_session_cleanup(store, now=now)

    assert (report.reaped, report.skipped) == (["abandoned"], ["extended"])
    assert store.load_state("extended").status == SessionStatus.ACTIVE


def test_a_late_worker_commit_cannot_resurrect_a_reaped_session(store, now):
    store.create_session("s", agent_type="a", expires_at=now - HOUR)
    seen_by_worker = store.load_state("s")

    expired_session_cleanup(store, now=now)

    with pytest.raises(VersionConflict):
        store.save_state(
            "s",
            dataclasses.replace(seen_by_worker, status=SessionStatus.ACTIVE),
            expected_version=seen_by_worker.version,
        )
    assert store.load_state("s").status == SessionStatus.FAILED


def test_batch_size_must_be_positive(store):
    with pytest.raises(ValueError, match="batch_size"):
        expired_session_cleanup(store, batch_size=0)
