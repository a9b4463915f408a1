"""Check that raw sides run, statement for statement, the SQL the ORM runs for the same call."""

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import psycopg
from django.db import connection


class RawSide(Protocol):
    """A raw side: its connection, and which statement it runs where the ORM runs another."""

    connection: psycopg.Connection

    def statement_for(self, orm_sql: str) -> str:
        """Return the statement this side runs where the ORM runs `orm_sql`."""


def same_sql(
    raws: Sequence[RawSide], calls: Sequence[Callable[[], object]], *, bring: str
) -> list[str]:
    """Trace one call per side, the ORM's first; return the ORM's SQL, or raise on a mismatch.

    `bring` names the raw module and the ORM code the error asks to bring in line.
    """
    orm_sql: list[str] = []

    def record(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        orm_sql.append(sql)
        return execute(sql, *args)

    with connection.execute_wrapper(record):
        calls[0]()
    for raw, call in zip(raws, calls[1:], strict=True):
        with recording(raw.connection) as raw_sql:
            call()
        expected = [raw.statement_for(sql) for sql in orm_sql]
        if raw_sql != expected:
            pairs = zip(expected, raw_sql, strict=False)
            differences = "".join(f"\n want: {a}\n raw:  {b}" for a, b in pairs if a != b)
            raise RuntimeError(
                f"The ORM ran {len(orm_sql)} statements and a raw side {len(raw_sql)}; bring "
                f"{bring}.{differences}"
            )
    return orm_sql


def sql_notes(orm_sql: list[str], note: str, show: bool) -> list[str]:
    """Return `note` on the shared SQL, followed by the statements themselves if `show`."""
    notes = [f"{note} (--show-sql)"]
    return notes + [f"  {n}. {sql}" for n, sql in enumerate(orm_sql, 1)] if show else notes


@contextmanager
def recording(raw_connection: psycopg.Connection) -> Iterator[list[str]]:
    """Record the SQL text of every statement run on the raw connection's cursors."""
    statements: list[str] = []
    cursor_factory = raw_connection.cursor_factory

    class RecordingCursor(cursor_factory):
        def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            statements.append(query)
            return super().execute(query, *args, **kwargs)

        def executemany(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            statements.append(query)
            return super().executemany(query, *args, **kwargs)

    raw_connection.cursor_factory = RecordingCursor
    try:
        yield statements
    finally:
        raw_connection.cursor_factory = cursor_factory
