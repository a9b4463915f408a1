"""Database connections of threads that wait between short talks to the database.

A worker runs many steps at once, each in a thread that spends most of its life waiting on a
model. With a connection pool configured (`DATABASE_POOL_MAX_SIZE`), such a thread gives its
connection back whenever it goes quiet, so the connections a process holds are bounded by the
pool, not by the steps in flight; its next query takes one from the pool again.
"""

from django.db import connection


def release_connection() -> None:
    """Give this thread's connection back to its pool, if it has one and is not in a transaction.

    Without a pool (SQLite, or PostgreSQL with pooling off) the connection stays open: opening
    a new one per use would cost more than it saves.
    """
    if getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
        connection.close()
