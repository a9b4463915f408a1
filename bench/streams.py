"""Benchmark stream writes, live delivery and replay against raw psycopg and raw Redis pub/sub."""

# The write table follows bench.stores: each side appends to its own stream, the SQL is compared
# before timing and the stored rows after. The live tables run Daphne on the throwaway database
# and its clients in this process; every client must receive every chunk once, in order.

import os
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, connections
from django.test import Client

from bench import settings_database_url
from bench.delivery import Pacing, delivery_tables
from bench.harness import ORM_COLUMNS, Options, Row, Table, interleave
from bench.live import Live, daphne
from bench.raw import connect
from bench.raw_chunks import AGENT_TYPE, DELTA, RawChunkWriter, delta_input, wire_delta
from bench.replay import replay_table
from bench.trace import same_sql, sql_notes
from streams_app.backends import get_stream_manager

LEGEND = (
    "Streams: StreamWriter.write against raw psycopg as above. Delivery times each chunk from "
    "the start of its write to its arrival at each subscriber, against raw Redis pub/sub "
    "subscribers in the same run: raw write+publish writes the chunk row with raw psycopg and "
    "our SQL, then PUBLISHes the chunk event's JSON (the durable baseline targets hold "
    "against); raw pub/sub only PUBLISHes it."
)
SUBSCRIBER_COUNTS = (1, 10, 100)
DELIVERY_P50_TARGETS = {1: 2.0, 10: 2.0, 100: 4.0}
SSE_SUBSCRIBERS = 10
DAPHNE_APPLICATION_NAME = "helix-bench-daphne"
DAPHNE_POOL = 4  # Daphne's pooled database connections.
REPLAY_CHUNKS, QUICK_REPLAY_CHUNKS = 10_000, 2_000
REPLAYS, QUICK_REPLAYS = 5, 2
REPLAY_TARGET_MS = 1000.0

_FOOTPRINT = """
SELECT count(*), coalesce(sum(octet_length(chunk::text)), 0), coalesce(sum(sequence), 0),
    count(*) FILTER (WHERE type = 'text_delta' AND step = 0),
    (SELECT last_sequence FROM streams_app_stream WHERE id = %(id)s),
    (SELECT chunk_count FROM streams_app_stream WHERE id = %(id)s),
    (SELECT chunk - 'timestamp' - 'sessionId' FROM streams_app_streamchunk
     WHERE stream_id = %(id)s ORDER BY sequence LIMIT 1)
FROM streams_app_streamchunk WHERE stream_id = %(id)s
"""
_FOOTPRINT_NAMES = (
    "chunks",
    "chunk bytes",
    "sum of sequences",
    "step 0 text deltas",
    "last_sequence",
    "chunk_count",
)


def run(options: Options) -> Iterator[Table]:
    """Yield the write table, the delivery tables of each subscriber count, then replay's."""
    yield _write_table(options)
    pacing = Pacing.of(options.deliveries, options.pause)
    with _live() as live:
        for count in SUBSCRIBER_COUNTS:
            yield from delivery_tables(
                live,
                count,
                sse=count == SSE_SUBSCRIBERS,
                pacing=pacing,
                target=DELIVERY_P50_TARGETS[count],
            )
        yield replay_table(
            live,
            QUICK_REPLAY_CHUNKS if options.quick else REPLAY_CHUNKS,
            QUICK_REPLAYS if options.quick else REPLAYS,
            REPLAY_TARGET_MS,
        )


def _write_table(options: Options) -> Table:
    """Measure one-chunk writes in chunks per second, each side on its own stream."""
    with (
        connect(connection.settings_dict, like_django=True) as lenient,
        connect(connection.settings_dict, like_django=False) as strict,
    ):
        raws = (RawChunkWriter(lenient), RawChunkWriter(strict))
        probes = [_Appender(None), *(_Appender(raw) for raw in raws)]
        orm_sql = same_sql(
            raws,
            [probe.append for probe in probes],
            bring="bench/raw_chunks.py in line with streams_app/backends/orm.py",
        )
        sides = [_Appender(None), *(_Appender(raw) for raw in raws)]
        timings = interleave(sides, options)
        work = _same_work(lenient, [side.stream_id for side in sides])
    orm, lenient_raw, strict_raw = (len(ns) / sum(ns) * 1e9 for ns in timings)
    row = Row(
        metric="chunks/s",
        orm=orm,
        lenient_raw=lenient_raw,
        strict_raw=strict_raw,
        higher_is_better=True,
        precision=0,
    )
    note = f"SQL: the same {len(orm_sql)} statements per write on every side"
    return Table(
        title=(
            f"StreamWriter.write, one {len(DELTA)}-byte text_delta per call and transaction "
            f"({options.iterations} interleaved runs per side after {options.warmup} warm-up)"
        ),
        rows=[row],
        notes=[
            *sql_notes(orm_sql, note, options.show_sql),
            "Helix side: chunk validation, the SQL, and the doorbell ring after commit",
            work,
        ],
        columns=("Helix", *ORM_COLUMNS[1:]),
    )


class _Appender:
    """Append one text delta per call to a stream of its own, by the ORM writer or a raw side."""

    def __init__(self, raw: RawChunkWriter | None) -> None:
        self.raw = raw
        self.writer = get_stream_manager().create_writer(str(uuid.uuid4()), "run-bench", AGENT_TYPE)
        self.stream_id = self.writer.stream_id

    def __call__(self) -> int:
        start = time.perf_counter_ns()
        self.append()
        return time.perf_counter_ns() - start

    def append(self) -> None:
        """Append the next chunk."""
        if self.raw is None:
            self.writer.write(delta_input(self.stream_id))
        else:
            self.raw.write(self.stream_id, wire_delta(self.stream_id))


def _same_work(raw: psycopg.Connection, stream_ids: list[str]) -> str:
    """Return a note on the chunks each side stored, or raise if they differ."""
    with raw.cursor() as cursor:
        footprints = [cursor.execute(_FOOTPRINT, {"id": id_}).fetchone() for id_ in stream_ids]
    if any(footprint != footprints[0] for footprint in footprints):
        raise RuntimeError(f"The sides stored different chunks (ORM first): {footprints}")
    return "work, identical per side: " + ", ".join(
        f"{name} {value:,}"
        # The last column, the first chunk without its time and session, is compared only.
        for name, value in zip(_FOOTPRINT_NAMES, footprints[0], strict=False)
        if value
    )


@contextmanager
def _live() -> Iterator[Live]:
    """Run Daphne on the throwaway database, with an owner logged in and a writer thread."""
    owner = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:12]}")
    client = Client()
    client.force_login(owner)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    with (
        daphne(daphne_env(connection.settings_dict)) as server,
        connect(connection.settings_dict, like_django=True) as raw_connection,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-writer") as executor,
    ):
        try:
            yield Live(
                server=server,
                owner_id=owner.pk,
                cookie=cookie,
                redis_url=settings.REDIS_URL,
                raw_writer=RawChunkWriter(raw_connection),
                executor=executor,
            )
        finally:
            executor.submit(connections.close_all).result()


def daphne_env(database: dict[str, Any]) -> dict[str, str]:
    """Return Daphne's environment: the throwaway database, Redis, default hosts, production mode.

    Daphne runs with DEBUG off, as in production (DEBUG logs every query it makes), and with
    this process's secret key, which the session cookies the benchmark signs in with need.

    Daphne pools its database connections, as in production: without a pool every
    `database_sync_to_async` call opens one, and 100 subscribers connecting at once queue some
    300 connects on one thread, past Daphne's 5 s handshake timeout on a loaded machine.
    """
    env = {name: value for name, value in os.environ.items() if name != "ALLOWED_HOSTS"}
    return {
        **env,
        "DATABASE_URL": settings_database_url(database),
        "REDIS_URL": settings.REDIS_URL,
        "DATABASE_POOL_MAX_SIZE": str(DAPHNE_POOL),
        "PGAPPNAME": DAPHNE_APPLICATION_NAME,  # The connections' name in `pg_stat_activity`.
        "DEBUG": "false",
        "SECRET_KEY": settings.SECRET_KEY,
        "PYTHONUNBUFFERED": "1",
    }
