"""Cutting a database connection from the server's side, as a failover or a restart would."""

import psycopg
from django.db import connection


def cut_connection(backend_pid: int) -> None:
    """End the PostgreSQL backend `backend_pid` serves, and wait (up to 5 s) until it is gone."""
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        ended = other.execute("SELECT pg_terminate_backend(%s, 5000)", [backend_pid]).fetchone()
    assert ended == (True,), f"backend {backend_pid} did not end"


def cut_own_connection() -> None:
    """End this thread's connection to the default database under it."""
    connection.ensure_connection()
    cut_connection(connection.connection.info.backend_pid)
