"""Connections on PostgreSQL. The pool's check of a connection it hands out
(`check_quiet_connection`): a quiet connection goes out without a round trip; one whose backend
the server ended is found out, and the pool hands out a working one instead. `pipelined`:
statements that reach the server together, with Django's errors. And `kept_cursor`: a thread's
statements on one cursor while its connection lasts, unless Django records them."""

import gc
import weakref

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from psycopg_pool import ConnectionPool

from sessions_app.connections import (
    check_quiet_connection,
    kept_cursor,
    pipelined,
    release_connection,
)
from tests.cut_connections import cut_connection

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def pool():
    params = connection.get_connection_params()
    pool = ConnectionPool(
        kwargs={**params, "autocommit": True},
        min_size=1,
        max_size=1,
        check=check_quiet_connection,
        open=True,
    )
    yield pool
    pool.close()


def last_query(pid: int) -> str:
    """Return what the backend `pid` last ran, as the server saw it."""
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as watcher:
        row = watcher.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid])
        return row.fetchone()[0]


def test_a_quiet_connection_is_handed_out_without_a_round_trip(pool):
    with pool.connection() as conn:
        pid = conn.info.backend_pid
        conn.execute("SELECT 'last words'")

    with pool.connection() as conn:
        assert conn.info.backend_pid == pid  # The same connection, checked on the way out,
        assert last_query(pid) == "SELECT 'last words'"  # and the server heard nothing.


def test_a_connection_the_server_ended_is_replaced_before_it_is_handed_out(pool):
    with pool.connection() as conn:
        ended = conn.info.backend_pid
    cut_connection(ended)

    with pool.connection() as conn:
        assert conn.info.backend_pid != ended
        assert conn.execute("SELECT 41 + 1").fetchone() == (42,)


def visible_names(table: str) -> list[str]:
    """Return the names in the table, as another connection sees them."""
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        return [name for (name,) in other.execute(f"SELECT name FROM {table} ORDER BY name")]


@pytest.fixture
def names_table():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE pipelined_names (name text PRIMARY KEY)")
    yield "pipelined_names"
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE pipelined_names")


def insert(table: str, *names: str) -> None:
    for name in names:
        with connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {table} VALUES (%s)", [name])


def test_pipelined_statements_reach_the_server_together_at_the_blocks_end(names_table):
    with pipelined():
        insert(names_table, "a", "b")
        assert visible_names(names_table) == []  # Each would be committed by now, one by one.
        with pipelined():  # Nested: it adds nothing, and sends nothing at its end.
            insert(names_table, "c")
        assert visible_names(names_table) == []

    assert visible_names(names_table) == ["a", "b", "c"]


def insert_in_one_transaction(table: str, *names: str) -> None:
    with transaction.atomic(), pipelined():
        insert(table, *names)


def test_a_pipelined_statements_error_is_djangos_and_fails_its_transaction(names_table):
    with pytest.raises(IntegrityError):
        insert_in_one_transaction(names_table, "a", "b", "a")

    assert visible_names(names_table) == []
    insert(names_table, "c")  # The connection is sound for what comes next.
    assert visible_names(names_table) == ["c"]


def test_a_threads_statements_share_a_cursor_until_its_connection_changes():
    kept = kept_cursor()
    kept.execute("SELECT 1")

    assert kept_cursor() is kept
    connection.close()  # A pooled connection would go back to its pool.
    fresh = kept_cursor()
    assert fresh is not kept
    fresh.execute("SELECT 41 + 1")
    assert fresh.fetchone() == (42,)


def test_a_thread_going_quiet_lets_its_cursor_and_last_result_go():
    kept_cursor().execute("SELECT 'a long history'")
    with transaction.atomic():
        release_connection()  # Not inside a transaction: the cursor serves it still.
        kept = weakref.ref(kept_cursor().cursor)
    assert kept() is not None

    release_connection()
    gc.collect()

    assert kept() is None


def test_a_persistent_connection_the_server_ended_gives_way_to_a_new_one(monkeypatch):
    """Without a pool (`CONN_MAX_AGE`), Django checks a connection at a request's or task's
    first statement (`CONN_HEALTH_CHECKS`): on a kept cursor too."""
    connection.close()
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "pool", False)
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)
    kept = kept_cursor()
    ended = connection.connection.info.backend_pid
    cut_connection(ended)
    connection.close_if_unusable_or_obsolete()  # As a request's or task's start does.

    cursor = kept_cursor()
    cursor.execute("SELECT pg_backend_pid()")

    assert cursor is not kept
    assert cursor.fetchone()[0] != ended
    connection.close()


def test_a_kept_cursor_reads_its_last_statements_result_after_pipelined_writes(names_table):
    with transaction.atomic(), pipelined():
        first = kept_cursor()
        first.execute(f"INSERT INTO {names_table} VALUES (%s)", ["a"])
        kept_cursor().execute(f"INSERT INTO {names_table} VALUES (%s)", ["b"])
        cursor = kept_cursor()
        cursor.execute(f"SELECT string_agg(name, ',' ORDER BY name) FROM {names_table}")
        assert cursor.fetchone() == ("a,b",)

    assert cursor is first


def test_statements_django_records_go_through_a_recording_cursor():
    kept = kept_cursor()
    with CaptureQueriesContext(connection) as captured:
        recording = kept_cursor()
        recording.execute("SELECT 'recorded'")

    assert recording is not kept
    assert [query["sql"] for query in captured] == ["SELECT 'recorded'"]
    assert kept_cursor() is kept  # Kept again once nothing records.


def test_a_connection_threads_share_gives_each_statement_a_cursor_of_its_own():
    kept = kept_cursor()
    connection.inc_thread_sharing()  # As a test's live server shares it.
    try:
        assert kept_cursor() is not kept
    finally:
        connection.dec_thread_sharing()
    assert kept_cursor() is kept
