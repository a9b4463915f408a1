"""Database connections of threads that wait between short talks to the database.

A worker runs many steps at once, each in a thread that spends most of its life waiting on a
model. With a connection pool configured (`DATABASE_POOL_MAX_SIZE`), such a thread gives its
connection back whenever it goes quiet, so the connections a process holds are bounded by the
pool, not by the steps in flight; its next query takes one from the pool again. The pool checks
each connection it hands out with `check_quiet_connection`. And a thread's talks are short when
they are few: `pipelined` sends writes that read no result in one round trip (a step's commit),
and `kept_cursor` runs the store's written-out statements on one cursor while the connection
lasts.
"""

import contextlib
import select
from collections.abc import Iterator

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.utils import CursorWrapper
from psycopg import pq
from psycopg_pool import ConnectionPool

# The attribute of a thread's database wrapper that holds its kept cursor (`kept_cursor`).
_KEPT_CURSOR = "helix_kept_cursor"


def release_connection() -> None:
    """Give this thread's connection back to its pool, if it has one and is not in a transaction.

    Without a pool (SQLite, or PostgreSQL with pooling off) the connection stays open: opening
    a new one per use would cost more than it saves. Either way the thread's kept cursor goes,
    and with it its last statement's result, which the thread would hold while it waits.
    """
    database = connections[DEFAULT_DB_ALIAS]
    if database.in_atomic_block:
        return
    setattr(database, _KEPT_CURSOR, None)
    if getattr(database, "pool", None) is not None:
        database.close()


def kept_cursor() -> CursorWrapper:
    """Return this thread's cursor on the default database, kept from statement to statement.

    For statements whose results are read at once, or never: the next statement on it drops
    what is left of them. A new psycopg cursor looks up again, on its first statement, how to
    send each parameter's type and read each column's; the kept one remembers (measured: a
    statement's client CPU about halved, a step's about a tenth less). A new cursor is returned,
    as `connection.cursor()` returns one, while Django records queries (`DEBUG`, tests that
    capture them) or while threads share the connection (a test's live server); one is made
    anew when the thread's connection changed (closed, or another from the pool), and after
    Django's health check (`CONN_HEALTH_CHECKS`), which `connection.cursor()` runs, found the
    connection broken. Never close it: `with kept_cursor()` would.
    """
    database = connections[DEFAULT_DB_ALIAS]
    if database.queries_logged or database.allow_thread_sharing:
        return database.cursor()
    database.close_if_health_check_failed()  # At most once a request or task.
    kept, current = getattr(database, _KEPT_CURSOR, None), database.connection
    if kept is None or current is None or kept.cursor.connection is not current:
        kept = database.cursor()
        setattr(database, _KEPT_CURSOR, kept)
    return kept


def check_quiet_connection(conn: psycopg.Connection) -> None:
    """Check a pooled connection as the pool hands it out; raise if it is broken.

    A step takes a connection from the pool several times, so a round trip per checkout (the
    pool's own check) would cost it several. An idle connection the server ended (a restart, a
    terminated backend, an idle timeout) has said so on its socket, or closed it: only then is
    the round trip made, and it raises, and the pool connects afresh. A quiet socket is taken
    as sound, as a connection without a pool is.
    """
    if conn.closed:
        raise psycopg.OperationalError("the pooled connection is closed")
    quiet = select.poll()
    quiet.register(conn.fileno(), select.POLLIN | select.POLLPRI)
    if quiet.poll(0):
        ConnectionPool.check_connection(conn)


@contextlib.contextmanager
def pipelined() -> Iterator[None]:
    """Send the block's statements without waiting for each one's result, on PostgreSQL.

    In psycopg's pipeline mode the statements queue on the connection and reach the server
    together, when the block ends or a statement's result is read: writes whose results nobody
    reads cost one round trip between them, not one each. A statement's error is raised there,
    as Django's error, and fails the transaction the block runs in. Inside another such block
    it adds nothing: the outer one sends its statements with the rest. Other databases run the
    statements one by one.
    """
    database = connections[DEFAULT_DB_ALIAS]
    if database.vendor != "postgresql":
        yield
        return
    database.ensure_connection()
    if database.connection.pgconn.pipeline_status != pq.PipelineStatus.OFF:
        yield
        return
    with database.wrap_database_errors, database.connection.pipeline():
        yield
