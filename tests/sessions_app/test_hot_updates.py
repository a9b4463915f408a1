"""On PostgreSQL, what every step writes to its session's and stream's rows stays on their
pages: a lease claim, its renewal and release, and a chunk append change no indexed column, and
the tables leave room on each page, so none of them writes an index entry (a HOT update)."""

import pytest
from django.db import connection

from sessions_app.models import AgentSession
from sessions_app.stores.orm import ORMSessionStateStore
from streams_app.backends.orm import ORMStreamManager
from streams_app.models import Stream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

ROWS = 300  # Enough to fill several pages, had the tables no room left on them.
ROUNDS = 20


def updates(model) -> tuple[int, int]:
    """Return the table's updates so far and how many of them were heap-only."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # Flushed as this statement ends.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = %s::regclass",
            [model._meta.db_table],
        )
        return cursor.fetchone()


def test_lease_claims_renewals_and_chunk_appends_are_heap_only_updates():
    store, streams = ORMSessionStateStore(), ORMStreamManager()
    sessions = [store.create_session(agent_type="assistant") for _ in range(ROWS)]
    writers = [streams.create_writer(s.stream_id, "run-1", "assistant") for s in sessions]
    session, writer = sessions[0], writers[0]  # On a page the others filled.
    sessions_before, streams_before = updates(AgentSession), updates(Stream)

    for n in range(ROUNDS):
        claim = store.claim_step(session.session_id, f"holder-{n}", 60)
        assert claim is not None
        assert store.renew_lease(session.session_id, f"holder-{n}", 60)
        assert store.release_lease(session.session_id, f"holder-{n}")
        writer.write({"type": "text_delta", "step": 1, "sessionId": "s", "delta": f"{n}"})

    sessions_after, streams_after = updates(AgentSession), updates(Stream)
    session_updates = sessions_after[0] - sessions_before[0]
    stream_updates = streams_after[0] - streams_before[0]
    assert session_updates == 3 * ROUNDS
    assert sessions_after[1] - sessions_before[1] == session_updates
    assert stream_updates == ROUNDS
    assert streams_after[1] - streams_before[1] == stream_updates
    assert [c.chunk["delta"] for c in streams.get_all_chunks(writer.stream_id)] == [
        f"{n}" for n in range(ROUNDS)
    ]
