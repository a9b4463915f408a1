"""`StreamManager` on the Django ORM, for SQLite and PostgreSQL.

Every write locks the stream's row, so sequences are assigned one writer at a time and committed
in order: a reader never sees sequence n+1 before n. Readers are rung through the channel layer
(`streams_app.backends.doorbell`) only after the transaction commits.
"""

import functools
import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from sessions_app.errors import HelixError
from sessions_app.stores.rules import check_identifier
from sessions_app.stores.statements import (
    column,
    execute,
    fetch_all,
    fetch_one,
    qualified,
    table,
)
from sessions_app.stores.values import db_values
from streams_app.backends import notices
from streams_app.backends.base import StreamManager, StreamWriter
from streams_app.backends.doorbell import ChannelSubscription, bell
from streams_app.backends.reader import Subscription
from streams_app.backends.rules import LIVE_STATUSES, check_can, notice_for
from streams_app.backends.types import (
    ChunkBatch,
    ChunkPage,
    SequencedChunk,
    Snapshot,
    StreamInfo,
    StreamStatus,
)
from streams_app.errors import StreamNotFound, WriterSuperseded
from streams_app.models import Stream, StreamChunk

ACTIVE = StreamStatus.ACTIVE.value


class ORMStreamManager(StreamManager):
    def create_writer(
        self, stream_id: str, run_id: str, agent_type: str, *, exclusive: bool = False
    ) -> StreamWriter:
        check_identifier("stream id", stream_id)
        sql = _write_statements(connection.vendor).open_writer
        if sql is None:
            opened = self._open(stream_id, run_id, agent_type, exclusive)
        else:  # One statement creates or opens the stream: one round trip.
            now = timezone.now()
            params = [stream_id, stream_id, run_id, agent_type, ACTIVE, int(exclusive), now, now]
            opened = fetch_one(sql, [*params, ACTIVE])
        writer_epoch, previous_status, last_sequence = opened
        if previous_status != ACTIVE:
            _ring_changed(stream_id)
        return StreamWriter(
            self,
            stream_id,
            run_id,
            agent_type,
            writer_epoch if exclusive else None,
            last_sequence=last_sequence,
        )

    def _open(
        self, stream_id: str, run_id: str, agent_type: str, exclusive: bool
    ) -> tuple[int, str, int]:
        """Create or reopen the stream where no one statement does (SQLite); return its writer
        epoch, its status before, and its last sequence."""
        with transaction.atomic():
            Stream.objects.bulk_create([Stream(id=stream_id)], ignore_conflicts=True)
            locked = _lock(stream_id, "status", "writer_epoch", "last_sequence")
            writer_epoch = locked["writer_epoch"] + (1 if exclusive else 0)
            reopened = {} if locked["status"] == ACTIVE else {"updated_at": timezone.now()}
            _stream(stream_id).update(
                run_id=run_id,
                agent_type=agent_type,
                status=StreamStatus.ACTIVE,
                final_output=None,
                error="",
                writer_epoch=writer_epoch,
                **reopened,
            )
        return writer_epoch, locked["status"], locked["last_sequence"]

    def append_chunks(
        self, stream_id: str, chunks: list[dict[str, Any]], *, epoch: int | None = None
    ) -> list[int]:
        sql = _write_statements(connection.vendor)
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        fence = [] if epoch is None else [epoch]
        reserve = sql.reserve if epoch is None else sql.reserve_fenced
        reserve_params = [len(chunks), len(chunks), stream_id, ACTIVE, *fence]
        if sql.append is not None and self.max_chunks is None:
            # One statement reserves and inserts: one round trip, atomic on its own.
            rows = _json_rows(
                {"position": n, "step": c["step"], "type": c["type"], "body": c}
                for n, c in enumerate(chunks, 1)
            )
            appended = fetch_all(
                sql.append_fenced if epoch is not None else sql.append,
                [*reserve_params, stream_id, len(chunks), now, rows],
            )
            sequences = sorted(sequence for (sequence,) in appended)
            if sequences:
                sequenced = list(zip(sequences, chunks, strict=True))
                notice = notice_for(sequenced, encoded_within=len(rows))
                transaction.on_commit(functools.partial(bell.ring, stream_id, notice))
                return sequences
        to_json = StreamChunk._meta.get_field("chunk").get_db_prep_save
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(reserve, reserve_params)
            reserved = cursor.fetchone()
            if reserved is None:  # Missing, not active or fenced, unless resumed since: look.
                locked = _lock(stream_id, "status", "writer_epoch")
                if epoch is not None and epoch != locked["writer_epoch"]:
                    raise WriterSuperseded(stream_id)
                check_can(stream_id, locked["status"], "write to", {StreamStatus.ACTIVE})
                cursor.execute(reserve, reserve_params)
                reserved = cursor.fetchone()
            last_sequence, count = reserved
            first = last_sequence - len(chunks) + 1
            sequenced = [(first + offset, chunk) for offset, chunk in enumerate(chunks)]
            cursor.executemany(
                sql.insert,
                [
                    (
                        stream_id,
                        sequence,
                        chunk["step"],
                        chunk["type"],
                        to_json(chunk, connection),
                        now,
                    )
                    for sequence, chunk in sequenced
                ],
            )
            if self.max_chunks is not None and count > self.max_chunks:
                self._trim(stream_id, count)
            transaction.on_commit(functools.partial(bell.ring, stream_id, notice_for(sequenced)))
        return [sequence for sequence, _ in sequenced]

    def append_batches(self, batches: Sequence[ChunkBatch]) -> list[list[int] | HelixError]:
        sql = _write_statements(connection.vendor).append_batches
        if sql is None or self.max_chunks is not None or len(batches) < 2:
            return super().append_batches(batches)
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        rows = _json_rows(
            {
                "stream_id": batch.stream_id,
                "position": n,
                "step": chunk["step"],
                "type": chunk["type"],
                "body": chunk,
            }
            for batch in batches
            for n, chunk in enumerate(batch.chunks, 1)
        )
        # One statement reserves and inserts for every stream: one round trip, atomic on its
        # own. A batch it cannot store (stream missing, not active, or fenced) reserves
        # nothing; the one-stream path then says why.
        sizes = _json_rows(
            {"stream_id": b.stream_id, "epoch": b.epoch, "size": len(b.chunks)} for b in batches
        )
        reserved = dict(fetch_all(sql, [sizes, ACTIVE, now, rows]))
        results: list[list[int] | HelixError] = []
        rings = []
        for batch in batches:
            if batch.stream_id not in reserved:
                results += super().append_batches([batch])
                continue
            last = reserved[batch.stream_id]
            sequences = list(range(last - len(batch.chunks) + 1, last + 1))
            sequenced = list(zip(sequences, batch.chunks, strict=True))
            rings.append((batch.stream_id, notice_for(sequenced, encoded_within=len(rows))))
            results.append(sequences)
        if rings:  # One ring for all: the bell's lock taken, and its sender woken, once.
            transaction.on_commit(functools.partial(bell.ring_streams, rings))
        return results

    def end_stream(self, stream_id: str, final_output: Any = None) -> None:
        self._finish(stream_id, StreamStatus.ENDED, "end", "final_output", final_output)

    def fail_stream(self, stream_id: str, error: str) -> None:
        self._finish(stream_id, StreamStatus.FAILED, "fail", "error", error)

    def pause_stream(self, stream_id: str) -> None:
        self._move(stream_id, {StreamStatus.ACTIVE}, StreamStatus.PAUSED, "pause")

    def resume_stream(self, stream_id: str) -> None:
        self._move(stream_id, {StreamStatus.PAUSED}, StreamStatus.ACTIVE, "resume")

    def get_stream_info(self, stream_id: str) -> StreamInfo | None:
        row = _stream(stream_id).first()
        if row is None:
            return None
        return StreamInfo(
            stream_id=row.id,
            status=StreamStatus(row.status),
            total_chunks=row.chunk_count,
            latest_sequence=row.last_sequence,
            run_id=row.run_id or None,
            agent_type=row.agent_type or None,
            error=row.error or None,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )

    def get_chunks(self, stream_id: str, *, after_sequence: int = 0, limit: int = 100) -> ChunkPage:
        latest = _require(stream_id, "last_sequence")["last_sequence"]
        rows = _sequenced(_rows(stream_id).filter(sequence__gt=after_sequence)[: limit + 1])
        return ChunkPage(chunks=rows[:limit], has_more=len(rows) > limit, latest_sequence=latest)

    def get_all_chunks(self, stream_id: str) -> list[SequencedChunk]:
        _require(stream_id)
        return _sequenced(_rows(stream_id))

    def get_chunks_from_step(self, stream_id: str, from_step: int) -> list[SequencedChunk]:
        _require(stream_id)
        return _sequenced(_rows(stream_id).filter(step__gte=from_step))

    def read_snapshot(self, stream_id: str, after: int, limit: int) -> Snapshot:
        sql = _read_snapshot_statement(connection.vendor)
        if sql is None:
            row, following, at_cursor = self._read_apart(stream_id, after, limit)
        else:  # One statement, one snapshot: the stream's row and the chunks agree.
            read = fetch_one(sql, [stream_id, after, limit + 1, after, stream_id])
            status, trimmed_through, final_output, error, chunks, at_cursor = read
            final_field = Stream._meta.get_field("final_output")
            row = {
                "status": status or StreamStatus.ACTIVE,
                "trimmed_through": trimmed_through or 0,
                "final_output": final_field.from_db_value(final_output, None, connection),
                "error": error or "",
            }
            following = [SequencedChunk(*item) for item in json.loads(chunks)]
        retracted_to = None
        if after > row["trimmed_through"] and not at_cursor:
            earlier = _chunks(stream_id).filter(sequence__lt=after)
            retracted_to = earlier.aggregate(last=Max("sequence"))["last"] or 0
        return Snapshot(
            status=StreamStatus(row["status"]),
            trimmed_through=row["trimmed_through"],
            final_output=row["final_output"],
            error=row["error"],
            chunks=following[:limit],
            complete=len(following) <= limit,
            cursor_retracted_to=retracted_to,
        )

    def _read_apart(
        self, stream_id: str, after: int, limit: int
    ) -> tuple[dict[str, Any], list[SequencedChunk], bool]:
        """Read a snapshot's parts in three statements (SQLite): the stream's row, up to
        `limit + 1` chunks after `after`, and whether the chunk at `after` is still there."""
        # The stream row first: a terminal status read before the chunks covers all of them.
        row = _stream(stream_id).values("status", "trimmed_through", "final_output", "error")
        row = row.first() or {
            "status": StreamStatus.ACTIVE,
            "trimmed_through": 0,
            "final_output": None,
            "error": "",
        }
        following = _sequenced(_rows(stream_id).filter(sequence__gt=after)[: limit + 1])
        return row, following, _chunks(stream_id).filter(sequence=after).exists()

    def subscribe(self, stream_id: str) -> Subscription:
        return ChannelSubscription(stream_id)

    def cleanup_to_step(self, stream_id: str, step: int) -> int:
        with transaction.atomic():
            locked = _lock(stream_id, "chunk_count", "last_sequence")
            removed, _ = StreamChunk.objects.filter(stream_id=stream_id, step__gt=step).delete()
            if removed:
                _retract(stream_id, locked, chunk_count=locked["chunk_count"] - removed)
        return removed

    def reset_stream(self, stream_id: str) -> None:
        with transaction.atomic():
            locked = _lock(stream_id, "chunk_count", "last_sequence")
            StreamChunk.objects.filter(stream_id=stream_id).delete()
            _retract(
                stream_id,
                locked,
                chunk_count=0,
                trimmed_through=0,
                status=StreamStatus.ACTIVE,
                final_output=None,
                error="",
            )

    def delete_stream(self, stream_id: str) -> bool:
        deleted, _ = _stream(stream_id).delete()
        return deleted > 0

    def purge_streams(self, finished_before: datetime, *, limit: int | None = None) -> int:
        finished = Stream.objects.filter(
            status__in=[StreamStatus.ENDED, StreamStatus.FAILED], updated_at__lt=finished_before
        )
        if limit is not None:
            oldest = finished.order_by("updated_at").values("pk")[:limit]
            finished = Stream.objects.filter(pk__in=list(oldest.values_list("pk", flat=True)))
        deleted, _ = finished.delete()  # Chunks go by database cascade, uncounted.
        return deleted

    def fail_streams(self, stream_ids: Collection[str], error: str) -> int:
        with transaction.atomic():
            live = Stream.objects.select_for_update().filter(
                pk__in=list(stream_ids), status__in=LIVE_STATUSES
            )
            failed = list(live.values_list("pk", flat=True))
            Stream.objects.filter(pk__in=failed).update(
                status=StreamStatus.FAILED, error=error, updated_at=timezone.now()
            )
        return len(failed)

    def delete_streams(self, stream_ids: Collection[str]) -> int:
        deleted, _ = Stream.objects.filter(pk__in=list(stream_ids)).delete()
        return deleted

    def _trim(self, stream_id: str, count: int) -> None:
        """Delete the oldest chunks of a stream holding `count`, more than `max_chunks`."""
        oldest = _chunks(stream_id).values_list("sequence", flat=True)
        cut = oldest[count - self.max_chunks - 1]
        _chunks(stream_id).filter(sequence__lte=cut).delete()
        _stream(stream_id).update(chunk_count=self.max_chunks, trimmed_through=cut)

    def _finish(
        self, stream_id: str, status: StreamStatus, action: str, field: str, value: Any
    ) -> None:
        """Set a live stream's `status` and its `field` (final output or error) to `value`."""
        # One statement finishes a live stream; only when it finds none does it look why.
        names = ("status", "updated_at", field)
        params = db_values(Stream, names, (status, timezone.now(), value))
        finished = execute(_finish_statement(field), [*params, stream_id, *LIVE_STATUSES])
        if finished:
            _ring_changed(stream_id)
            return
        current = _require(stream_id, "status")["status"]
        if current != status:
            check_can(stream_id, current, action, LIVE_STATUSES)

    def _move(
        self, stream_id: str, sources: set[StreamStatus], target: StreamStatus, action: str
    ) -> None:
        with transaction.atomic():
            current = _lock(stream_id, "status")["status"]
            if current == target:
                return
            check_can(stream_id, current, action, sources)
            _stream(stream_id).update(status=target, updated_at=timezone.now())
            _ring_changed(stream_id)


@dataclass(frozen=True)
class _WriteStatements:
    """The SQL of the stream's hot writes, written out, not compiled: `append_chunks`, which
    every streamed delta runs, and, on PostgreSQL, opening a writer, which every step does.

    One `UPDATE ... RETURNING` checks the stream is active, reserves the sequences and holds the
    stream's row lock until commit; one INSERT stores the chunks. On PostgreSQL, `append` does
    both in one statement (the UPDATE in a CTE), so a delta costs one round trip; it inserts
    nothing when the stream is missing, not active or fenced, and the two-statement path then
    finds out which. All are built from the models' metadata.
    """

    reserve: str
    # `reserve` for an exclusive writer: only while its epoch is the stream's latest.
    reserve_fenced: str
    insert: str
    append: str | None
    append_fenced: str | None
    # Appends to several streams (PostgreSQL): parameters the streams' ids, epochs (or
    # nulls) and chunk counts as arrays, now, the active status, now, then per chunk its
    # stream id, position in its batch (from 1), step, type and JSON as arrays. Returns each
    # stream it stored chunks in with its new last sequence.
    append_batches: str | None
    # Creates or opens a stream to a run's writer (PostgreSQL): parameters stream id twice, run
    # id, agent type, the active status, 1 to fence earlier writers off (else 0), now twice,
    # and the active status again. Returns the writer epoch, the status before (active for a
    # new stream) and the last sequence.
    open_writer: str | None


# The columns of a chunk row the PostgreSQL appends read from their JSON parameter.
_CHUNK_ROW = "position integer, step integer, type varchar, body jsonb"


def _json_rows(rows: Iterable[dict[str, Any]]) -> str:
    """Return rows as the one JSON array a PostgreSQL append reads with `jsonb_to_recordset`.

    One string to send: a `jsonb[]` of each chunk's JSON had psycopg pick and build a dumper
    for every element, which cost a busy worker more than the statement.
    """
    return json.dumps(list(rows))


@functools.cache
def _write_statements(vendor: str) -> _WriteStatements:
    """Return the write statements in the dialect of the `vendor` database."""
    last, count = column(Stream, "last_sequence"), column(Stream, "chunk_count")
    chunk_columns = ", ".join(
        column(StreamChunk, name)
        for name in ("stream", "sequence", "step", "type", "chunk", "created_at")
    )
    update = (
        f"UPDATE {table(Stream)} SET {last} = {last} + %s, {count} = {count} + %s "
        f"WHERE {column(Stream, 'id')} = %s AND {column(Stream, 'status')} = %s"
    )
    fenced = f"{update} AND {column(Stream, 'writer_epoch')} = %s"
    returning = f" RETURNING {last}, {count}"

    def append(reserve: str) -> str:
        # Parameters after the reserve's: stream id, chunk count, created at, then the chunks
        # as one JSON array of rows (`_json_rows`).
        return (
            f"WITH reserved AS ({reserve} RETURNING {last}) "
            f"INSERT INTO {table(StreamChunk)} ({chunk_columns}) "
            f"SELECT %s, reserved.{last} - %s + chunk.position, chunk.step, chunk.type, "
            "chunk.body, %s FROM reserved, "
            f"jsonb_to_recordset(%s::jsonb) AS chunk({_CHUNK_ROW}) "
            f"ORDER BY chunk.position RETURNING {column(StreamChunk, 'sequence')}"
        )

    identifier, status, epoch = (column(Stream, name) for name in ("id", "status", "writer_epoch"))
    updated = column(Stream, "updated_at")
    inserted = ", ".join(
        column(Stream, name)
        for name in (
            "id", "run_id", "agent_type", "status", "last_sequence", "trimmed_through",
            "chunk_count", "writer_epoch", "final_output", "error", "created_at", "updated_at",
        )
    )  # fmt: skip
    open_writer = (
        f"WITH previous AS (SELECT {identifier}, {status} FROM {table(Stream)} "
        f"WHERE {identifier} = %s FOR UPDATE), "
        f"opened AS (INSERT INTO {table(Stream)} AS stream ({inserted}) "
        "VALUES (%s, %s, %s, %s, 0, 0, 0, %s, NULL, '', %s, %s) "
        f"ON CONFLICT ({identifier}) DO UPDATE SET "
        + ", ".join(
            f"{column(Stream, name)} = EXCLUDED.{column(Stream, name)}"
            for name in ("run_id", "agent_type", "status", "final_output", "error")
        )
        + f", {updated} = CASE WHEN stream.{status} = EXCLUDED.{status} THEN stream.{updated} "
        f"ELSE EXCLUDED.{updated} END, {epoch} = stream.{epoch} + EXCLUDED.{epoch} "
        f"RETURNING stream.{epoch}, stream.{column(Stream, 'last_sequence')}) "
        f"SELECT opened.{epoch}, COALESCE(previous.{status}, %s), "
        f"opened.{column(Stream, 'last_sequence')} FROM opened LEFT JOIN previous ON TRUE"
    )
    append_batches = (
        "WITH batch AS (SELECT * FROM jsonb_to_recordset(%s::jsonb) "
        "AS batch(stream_id varchar, epoch integer, size integer)), "
        f"reserved AS (UPDATE {table(Stream)} AS stream "
        f"SET {last} = stream.{last} + batch.size, {count} = stream.{count} + batch.size "
        "FROM batch "
        f"WHERE stream.{identifier} = batch.stream_id AND stream.{status} = %s "
        f"AND (batch.epoch IS NULL OR stream.{epoch} = batch.epoch) "
        f"RETURNING stream.{identifier} AS stream_id, stream.{last} AS last, batch.size), "
        f"inserted AS (INSERT INTO {table(StreamChunk)} ({chunk_columns}) "
        "SELECT chunk.stream_id, reserved.last - reserved.size + chunk.position, chunk.step, "
        "chunk.type, chunk.body, %s FROM jsonb_to_recordset(%s::jsonb) "
        f"AS chunk(stream_id varchar, {_CHUNK_ROW}) "
        "JOIN reserved ON reserved.stream_id = chunk.stream_id) "
        "SELECT stream_id, last FROM reserved"
    )
    postgres = vendor == "postgresql"
    return _WriteStatements(
        reserve=update + returning,
        reserve_fenced=fenced + returning,
        insert=f"INSERT INTO {table(StreamChunk)} ({chunk_columns}) "
        f"VALUES ({', '.join(['%s'] * 6)})",
        append=append(update) if postgres else None,
        append_fenced=append(fenced) if postgres else None,
        append_batches=append_batches if postgres else None,
        open_writer=open_writer if postgres else None,
    )


@functools.cache
def _finish_statement(field: str) -> str:
    """Return the UPDATE finishing a live stream, as the ORM compiles it: parameters its status,
    updated at and `field`, then its id and the live statuses."""
    live = ", ".join(["%s"] * len(LIVE_STATUSES))
    return (
        f"UPDATE {table(Stream)} SET {column(Stream, 'status')} = %s, "
        f"{column(Stream, 'updated_at')} = %s, {column(Stream, field)} = %s "
        f"WHERE ({qualified(Stream, 'id')} = %s AND {qualified(Stream, 'status')} IN ({live}))"
    )


@functools.cache
def _read_snapshot_statement(vendor: str) -> str | None:
    """Return, on PostgreSQL, one statement reading a snapshot: the stream's status, trimmed
    through, final output and error (nulls for a missing stream), up to a limit of the chunks
    after a cursor as one JSON array of [sequence, chunk], and whether the cursor's chunk is
    still there. Parameters: stream id, cursor, limit, cursor, stream id."""
    if vendor != "postgresql":
        return None
    chunks, stream_id, sequence = (
        table(StreamChunk),
        column(StreamChunk, "stream"),
        column(StreamChunk, "sequence"),
    )
    following = (
        f"SELECT {sequence}, {column(StreamChunk, 'chunk')} AS body FROM {chunks} "
        f"WHERE {stream_id} = %s AND {sequence} > %s ORDER BY {sequence} LIMIT %s"
    )
    return (
        "SELECT "
        + ", ".join(
            f"stream.{column(Stream, name)}"
            for name in ("status", "trimmed_through", "final_output", "error")
        )
        + f", (SELECT COALESCE(jsonb_agg(jsonb_build_array(chunk.{sequence}, chunk.body) "
        f"ORDER BY chunk.{sequence}), '[]') FROM ({following}) AS chunk), "
        f"EXISTS (SELECT 1 FROM {chunks} WHERE {stream_id} = wanted.id AND {sequence} = %s) "
        f"FROM (SELECT %s::varchar AS id) AS wanted "
        f"LEFT JOIN {table(Stream)} AS stream ON stream.{column(Stream, 'id')} = wanted.id"
    )


def _stream(stream_id: str):
    return Stream.objects.filter(pk=stream_id)


def _chunks(stream_id: str):
    return StreamChunk.objects.filter(stream_id=stream_id).order_by("sequence")


def _lock(stream_id: str, *fields: str) -> dict[str, Any]:
    """Lock the stream's row for the current transaction; return the named fields."""
    for locked in Stream.objects.select_for_update().filter(pk=stream_id).values(*fields):
        return locked
    raise StreamNotFound(stream_id)


def _require(stream_id: str, *fields: str) -> dict[str, Any]:
    """Return the named fields of the stream; raise `StreamNotFound` if there is none."""
    row = _stream(stream_id).values("id", *fields).first()
    if row is None:
        raise StreamNotFound(stream_id)
    return row


def _retract(stream_id: str, locked: dict[str, Any], **fields: Any) -> None:
    """Record that chunks were taken away: skip a sequence and ring readers after commit."""
    _stream(stream_id).update(
        last_sequence=locked["last_sequence"] + 1, updated_at=timezone.now(), **fields
    )
    _ring_changed(stream_id)


def _ring_changed(stream_id: str) -> None:
    transaction.on_commit(functools.partial(bell.ring, stream_id, notices.changed_notice()))


def _rows(stream_id: str):
    return _chunks(stream_id).values_list("sequence", "chunk")


def _sequenced(rows) -> list[SequencedChunk]:
    return [SequencedChunk(sequence, chunk) for sequence, chunk in rows]
