"""A step's commit, as the database sees it, racing another transaction on its session.

A step's commit first writes its last chunks (holding its stream's row), then locks its
session's row, with the store's own statement. A transaction that locks the session first and
then writes to the stream (a deletion, an abort) deadlocks with it; PostgreSQL aborts the one
that waited first.
"""

import threading
from collections.abc import Callable

from django.db import connection, connections, transaction

from sessions_app.stores.statements import fetch_one, statements
from streams_app.backends.base import StreamManager
from tests.waiting import wait_for


def race_a_step_commit(
    manager: StreamManager, session_id: str, stream_id: str, action: Callable[[], object]
) -> list[BaseException]:
    """Run `action` while a step's commit holds the stream's row; let the commit then ask for
    the session's row once `action` waits for the stream's; return what either raised."""
    chunks_written, action_waits = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def step_commit() -> None:
        with transaction.atomic():
            manager.append_chunks(stream_id, [_text("last")])
            chunks_written.set()
            action_waits.wait(10)
            fetch_one(statements(connection.vendor).lock_for_commit, [session_id, session_id])

    def run(function: Callable[[], object]) -> Callable[[], None]:
        def target() -> None:
            try:
                function()
            except BaseException as error:
                failures.append(error)
            finally:
                connections.close_all()

        return target

    step = threading.Thread(target=run(step_commit))
    step.start()
    assert chunks_written.wait(10)
    racing = threading.Thread(target=run(action))
    racing.start()
    wait_for(_waiting_on_the_stream, timeout=10.0, what="the other transaction to wait")
    action_waits.set()
    step.join(30)
    racing.join(30)
    return failures


def _waiting_on_the_stream() -> bool:
    """Return whether a transaction on this test's database waits for a lock: the step's
    commit waits on its event meanwhile, so that is the other one, on the stream's row."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0] > 0


def _text(delta: str) -> dict:
    return {"type": "text_delta", "step": 1, "sessionId": "s-1", "delta": delta}
