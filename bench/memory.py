"""Benchmark conversation-memory reads, a long history and full-text search, against raw SQL.

Each side makes the same call in turn (`bench.harness.interleave`): ours through
`get_session_store()`; "raw, our SQL" replays on bare psycopg the statements ours ran for that
call, so its ratio is the cost of our Python; "raw, by hand" runs the SQL one would write for
the job, the baseline targets hold against. Ours and the by-hand side must find the same
messages in the same order, or the run stops.
"""

import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import psycopg
from django.db import connection

from bench.corpus import CACHE_DATABASE, SEED, Corpus, corpus
from bench.harness import Options, Row, Table, interleave, percentile_ms
from bench.raw import connect
from bench.trace import sql_notes
from sessions_app.stores import get_session_store
from sessions_app.stores.orm import MESSAGE_COLUMNS
from sessions_app.stores.search import SearchMode

LEGEND = (
    "Memory reads: get_history and message search through the session store. raw, our SQL: "
    "the statements our call ran, replayed on psycopg set up like Django's driver, so its ratio "
    "isolates our Python; raw, by hand: the SQL one would write (one WITH RECURSIVE walk, one "
    "search query) on psycopg's defaults, the strict baseline the targets are enforced against. "
    f"Full runs keep their data in the {CACHE_DATABASE} database and reuse it while it matches."
)
HISTORY_RATIO_TARGET = 2.0
SEARCH_RATIO_TARGET = 2.0
SEARCH_P50_TARGET_MS = 20.0
HISTORY_RUNS = 7
COLUMNS = ("Helix", "raw, our SQL", "raw, by hand")
# Rare terms first (a few messages in the corpus hold each), then common ones.
QUERIES = (
    "saffron risotto",
    "glacier tectonics",
    "harpsichord tuning",
    "origami crane",
    "lighthouse",
    "walrus",
    "connection pool",
    "error message",
    "unit test",
    "pull request",
    "deploying",
    "database",
    "timeout",
    "server error",
    "cache migrations",
)

# The store's own column list, so that both sides fetch the same columns.
HISTORY_BY_HAND = f"""
WITH RECURSIVE path AS (
    SELECT {MESSAGE_COLUMNS}, 1 AS depth FROM sessions_app_message m
    WHERE m.id = (
        SELECT id FROM sessions_app_message WHERE session_id = %s ORDER BY sequence DESC LIMIT 1
    )
    UNION ALL
    SELECT {MESSAGE_COLUMNS}, path.depth + 1 FROM sessions_app_message m
    JOIN path ON m.id = path.parent_id
)
SELECT * FROM path ORDER BY depth DESC
"""
SEARCH_BY_HAND: dict[SearchMode, str] = {
    "phrase": """
SELECT m.id, m.session_id, m.role, m.content, m.created_at FROM sessions_app_message m
WHERE m.session_id = %(scope)s AND m.search_vector @@ phraseto_tsquery('english', %(query)s)
ORDER BY ts_rank(m.search_vector, phraseto_tsquery('english', %(query)s)) DESC,
    m.created_at DESC, m.sequence DESC
LIMIT 20
""",
    "all_words": """
SELECT m.id, m.session_id, m.role, m.content, m.created_at FROM sessions_app_message m
JOIN sessions_app_agentsession s ON s.id = m.session_id
WHERE s.owner_id = %(scope)s AND m.search_vector @@ plainto_tsquery('english', %(query)s)
ORDER BY ts_rank(m.search_vector, plainto_tsquery('english', %(query)s)) DESC,
    m.created_at DESC, m.sequence DESC
LIMIT 20
""",
}

# One statement our call ran, and its parameters.
Statement = tuple[str, Any]


def run(options: Options) -> Iterator[Table]:
    """Yield the history table, then the tables of a session's and an owner's search."""
    with (
        corpus(
            history_messages=options.history_messages,
            search_messages=options.search_messages,
            cache=not options.quick,
        ) as data,
        connect(connection.settings_dict, like_django=True) as replaying,
        connect(connection.settings_dict, like_django=False) as by_hand,
    ):
        yield _history_table(data, replaying, by_hand, options)
        for mode in SEARCH_BY_HAND:
            yield _search_table(data, mode, replaying, by_hand, options)


def _history_table(
    data: Corpus, replaying: psycopg.Connection, by_hand: psycopg.Connection, options: Options
) -> Table:
    """Time reading the active branch of the long session, in milliseconds per read."""
    ours = partial(get_session_store().get_history, data.history_session)
    statements = _recorded(ours)
    runs = replace(options, iterations=min(options.iterations, HISTORY_RUNS), warmup=1)
    calls = runs.warmup + runs.iterations
    sides = [
        _Side([ours] * calls, lambda messages: [message.id for message in messages]),
        _Side([partial(_replay, replaying, statements)] * calls),
        _Side(
            [partial(_fetch, by_hand, HISTORY_BY_HAND, [data.history_session])] * calls,
            lambda rows: [row[0] for row in rows],
        ),
    ]
    timings = interleave(sides, runs)
    for found, expected in zip(sides[0].found, sides[2].found, strict=True):
        if found != expected or len(found) != data.active_branch:
            raise RuntimeError(
                f"get_history returned {len(found)} messages (first {found[:3]}) where the "
                f"hand-written walk returned {len(expected)} (first {expected[:3]}) and the "
                f"active branch holds {data.active_branch}."
            )
    medians = [statistics.median(ns) / 1e6 for ns in timings]
    row = Row(
        metric="p50 ms",
        orm=medians[0],
        lenient_raw=medians[1],
        strict_raw=medians[2],
        target=HISTORY_RATIO_TARGET,
        precision=1,
    )
    return Table(
        title=(
            f"get_history of the active branch, {data.active_branch:,} of a session's "
            f"{data.history_messages:,} messages ({runs.iterations} interleaved runs per side "
            "after 1 warm-up)"
        ),
        rows=[row],
        notes=[
            f"data: {data.origin}",
            *_sql_notes(statements, HISTORY_BY_HAND, options.show_sql),
            "runs (ms): "
            + "; ".join(
                f"{column} " + ", ".join(f"{ns / 1e6:.0f}" for ns in side)
                for column, side in zip(COLUMNS, timings, strict=True)
            ),
            f"ours and by hand returned the same {data.active_branch:,} messages in the same "
            "order, root first, every run",
        ],
        columns=COLUMNS,
    )


def _search_table(
    data: Corpus,
    mode: SearchMode,
    replaying: psycopg.Connection,
    by_hand: psycopg.Connection,
    options: Options,
) -> Table:
    """Time searches for queries drawn from `QUERIES`, in milliseconds per search."""
    store = get_session_store()
    search = store.search_messages if mode == "phrase" else store.search_owner_messages
    scopes: Sequence[str | int] = data.search_sessions if mode == "phrase" else data.owners
    rng = random.Random(SEED)
    draws = [
        (rng.choice(QUERIES), rng.choice(scopes))
        for _ in range(options.warmup + options.iterations)
    ]
    ours = [partial(search, scope, query) for query, scope in draws]
    recorded = [_recorded(call) for call in ours]
    sides = [
        _Side(ours, lambda hits: [hit.message_id for hit in hits], warm=True),
        _Side([partial(_replay, replaying, statements) for statements in recorded], warm=True),
        _Side(
            [
                partial(_fetch, by_hand, SEARCH_BY_HAND[mode], {"query": query, "scope": scope})
                for query, scope in draws
            ],
            lambda rows: [row[0] for row in rows],
            warm=True,
        ),
    ]
    timings = interleave(sides, options)
    for draw, found, expected in zip(draws, sides[0].found, sides[2].found, strict=True):
        if found != expected:
            raise RuntimeError(
                f"Searching {draw}, ours found {found} where by hand found {expected}."
            )
    rows = [
        Row(
            metric=f"p{percent} ms",
            orm=percentile_ms(timings[0], percent),
            lenient_raw=percentile_ms(timings[1], percent),
            strict_raw=percentile_ms(timings[2], percent),
            target=SEARCH_RATIO_TARGET if percent == 50 else None,
        )
        for percent in (50, 99)
    ]
    rows.append(Row(metric="p50 ms", orm=rows[0].orm, target=SEARCH_P50_TARGET_MS))
    hits = [len(found) for found in sides[2].found]
    paired = statistics.median(a / b for a, b in zip(timings[0], timings[2], strict=True))
    per_session = data.search_messages // len(data.search_sessions)
    if mode == "phrase":
        title = f"search_messages, a phrase in one session of {per_session:,} messages"
    else:
        sessions = len(data.search_sessions) // len(data.owners)
        title = (
            f"search_owner_messages, all words across one owner's {sessions:,} sessions "
            f"({sessions * per_session:,} messages)"
        )
    return Table(
        title=(
            f"{title}, {data.search_messages:,} messages in all ({options.iterations} queries "
            f"per side, interleaved, after {options.warmup} warm-up)"
        ),
        rows=rows,
        notes=[
            "Rows: p50 and p99 against both raw sides, then our p50 against its own target; "
            f"the median of each query's ratio to by hand is {paired:.2f}. Each side makes "
            "each search twice in a row and times the second, so which side goes first in a "
            "round does not decide who reads pages cold.",
            *_sql_notes(recorded[0], SEARCH_BY_HAND[mode], options.show_sql),
            f"queries drawn at random (seed {SEED}) from {len(QUERIES)}: "
            + ", ".join(f'"{query}"' for query in QUERIES),
            f"hits per query (at most 20): median {statistics.median(hits):.0f}, none for "
            f"{hits.count(0)} and 20 for {hits.count(20)} of {len(hits)}; ours and by hand "
            "found the same messages in the same order every time",
        ],
        columns=COLUMNS,
    )


class _Side:
    """Make the next of its calls each round, timing it and keeping the ids of what it found.

    With `warm`, each call is first made untimed, so that which side goes first in a round does
    not decide who reads pages cold.
    """

    def __init__(
        self,
        calls: Sequence[Callable[[], Any]],
        ids: Callable[[Any], list[str]] | None = None,
        *,
        warm: bool = False,
    ) -> None:
        self.calls = calls
        self.ids = ids
        self.warm = warm
        self.made = 0
        self.found: list[list[str]] = []

    def __call__(self) -> int:
        call = self.calls[self.made]
        self.made += 1
        if self.warm:
            call()
        start = time.perf_counter_ns()
        result = call()
        elapsed = time.perf_counter_ns() - start
        if self.ids is not None:
            self.found.append(self.ids(result))
        return elapsed


def _recorded(call: Callable[[], object]) -> list[Statement]:
    """Make the call through Django's connection and return the statements it ran."""
    statements: list[Statement] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, *args: Any) -> Any:
        statements.append((sql, params))
        return execute(sql, params, *args)

    with connection.execute_wrapper(record):
        call()
    return statements


def _replay(raw: psycopg.Connection, statements: list[Statement]) -> None:
    """Run the statements on the raw connection, fetching every row."""
    with raw.cursor() as cursor:
        for sql, params in statements:
            cursor.execute(sql, params).fetchall()


def _fetch(raw: psycopg.Connection, sql: str, params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on the raw connection and return every row."""
    with raw.cursor() as cursor:
        return cursor.execute(sql, params).fetchall()


def _sql_notes(statements: list[Statement], by_hand: str, show: bool) -> list[str]:
    """Return a note on the SQL of both sides, and the statements themselves if `show`."""
    note = f"SQL: statements per call, ours {len(statements)}, by hand 1"
    notes = sql_notes([sql for sql, _ in statements], note, show)
    return [*notes, f"  by hand: {' '.join(by_hand.split())}"] if show else notes
