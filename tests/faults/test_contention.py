"""Fifty writers appending to one session on PostgreSQL at once (DESIGN invariant 2): every
append lands once, sequences are exactly 1..n, and no writer sees an error."""

import pytest

from sessions_app.connections import release_connection
from sessions_app.stores.orm import ORMSessionStateStore
from sessions_app.stores.types import Message, MessageRole
from tests.services import require
from tests.threads import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)

WRITERS, APPENDS = 50, 200


def test_fifty_writers_append_to_one_session_without_a_gap_or_an_error(figure):
    require("postgres")
    store = ORMSessionStateStore()
    session_id = store.create_session(agent_type="assistant").session_id

    def append(writer: int) -> int:
        for n in range(APPENDS):
            store.append_messages(
                session_id, [Message(role=MessageRole.USER, content=f"{writer}:{n}")]
            )
            release_connection()  # As a worker's step does: 50 writers share the pool.
        return APPENDS

    results = run_in_threads(WRITERS, append)

    errors = [result for result in results if isinstance(result, Exception)]
    messages = []
    while page := store.get_messages(session_id, offset=len(messages), limit=1000).messages:
        messages += page
    total = WRITERS * APPENDS
    contiguous = [m.sequence for m in messages] == list(range(1, total + 1))
    figure(
        sum(r for r in results if isinstance(r, int)),
        total,
        f"appends by {WRITERS} writers landed, sequences contiguous: {contiguous}, "
        f"errors: {len(errors)}",
    )
    assert errors == []
    assert contiguous
    assert sorted(m.content for m in messages) == sorted(
        f"{writer}:{n}" for writer in range(WRITERS) for n in range(APPENDS)
    )
    for writer in range(WRITERS):  # Each writer's appends kept its order.
        own = [m.content for m in messages if m.content.startswith(f"{writer}:")]
        assert own == [f"{writer}:{n}" for n in range(APPENDS)]
    assert store.get_message_count(session_id) == total
