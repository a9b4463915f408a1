"""On PostgreSQL, what every step writes to its session's and stream's rows stays on their
pages: a lease claim, its renewal and release, and a chunk append change no indexed column, and
the tables leave room on each page, so none of them writes an index entry (a HOT update).

Each write runs in a transaction of its own, which reads the server's count of its updates and
of the heap-only ones before it commits. It runs alone: PostgreSQL makes room on a page for a
heap-only update by pruning the row versions no snapshot needs any more, and other tests'
transactions at the same time (in their own databases, too) kept versions from being pruned,
so one update in forty found its page full (measured beside `test_store_concurrency.py`)."""

from functools import partial

import pytest
from django.db import connection, transaction

from sessions_app.models import AgentSession
from sessions_app.stores.orm import ORMSessionStateStore
from streams_app.backends.orm import ORMStreamManager
from streams_app.models import Stream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.alone]

ROWS = 300  # Enough to fill several pages, had the tables no room left on them.
ROUNDS = 10


def updates_in(write, model) -> tuple[int, int]:
    """Run `write` in a transaction; return its updates of the model's table and the HOT ones.

    The connection's counts not yet sent to the statistics include its earlier transactions:
    what `write` did is the difference.
    """
    query = (
        "SELECT pg_stat_get_xact_tuples_updated(%s::regclass), "
        "pg_stat_get_xact_tuples_hot_updated(%s::regclass)"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(query, [model._meta.db_table] * 2)
        before = cursor.fetchone()
        write()
        cursor.execute(query, [model._meta.db_table] * 2)
        after = cursor.fetchone()
    return after[0] - before[0], after[1] - before[1]


def test_lease_claims_renewals_and_chunk_appends_are_heap_only_updates():
    store, streams = ORMSessionStateStore(), ORMStreamManager()
    sessions = [store.create_session(agent_type="assistant") for _ in range(ROWS)]
    writers = [streams.create_writer(s.stream_id, "run-1", "assistant") for s in sessions]
    session_id, writer = sessions[0].session_id, writers[0]  # On a page the others filled.

    counted = []
    for n in range(ROUNDS):
        holder = f"holder-{n}"
        counted += [
            updates_in(partial(store.claim_step, session_id, holder, 60), AgentSession),
            updates_in(partial(store.renew_lease, session_id, holder, 60), AgentSession),
            updates_in(partial(store.release_lease, session_id, holder), AgentSession),
            updates_in(partial(writer.write, delta(n)), Stream),
        ]

    assert counted == [(1, 1)] * (4 * ROUNDS)  # One update each, and it heap-only.
    assert [c.chunk["delta"] for c in streams.get_all_chunks(writer.stream_id)] == [
        f"{n}" for n in range(ROUNDS)
    ]


def delta(n: int) -> dict:
    return {"type": "text_delta", "step": 1, "sessionId": "s", "delta": f"{n}"}
