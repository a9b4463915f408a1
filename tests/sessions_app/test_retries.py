"""A transaction PostgreSQL aborts to break a deadlock runs again (`sessions_app.retries`)."""

import threading
from collections import Counter

import pytest
from django.db import transaction

from sessions_app.models import AgentSession
from sessions_app.retries import retried_on_conflict
from sessions_app.stores.orm import ORMSessionStateStore
from tests.threads import run_in_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_the_side_of_a_deadlock_postgresql_aborts_runs_again_and_commits():
    store = ORMSessionStateStore()
    first, second = (store.create_session(agent_type="assistant").session_id for _ in range(2))
    both_hold_one = threading.Barrier(2)
    attempts: Counter[str] = Counter()

    @retried_on_conflict
    def lock_both(one: str, other: str, name: str) -> int:
        with transaction.atomic():
            attempts[name] += 1
            AgentSession.objects.select_for_update().get(pk=one)
            if attempts[name] == 1:
                both_hold_one.wait(timeout=10)  # Then each waits for the other's row.
            AgentSession.objects.select_for_update().get(pk=other)
            AgentSession.objects.filter(pk=one).update(name=name)
        return attempts[name]

    results = run_in_threads(
        2,
        lambda n: lock_both(*((first, second) if n == 0 else (second, first)), f"writer-{n}"),
    )

    assert sorted(results) == [1, 2]  # One side was aborted once, ran again, and committed.
    assert {store.load_state(s).name for s in (first, second)} == {"writer-0", "writer-1"}
