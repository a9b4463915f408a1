"""Append stream chunks on a bare psycopg connection with the ORM's own SQL."""

import json
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

# The SQL text ORMStreamManager.append_chunks sends on PostgreSQL for a write, letter for letter
# (bench.streams checks this before timing), with the same parameters: one statement whose CTE
# reserves the sequences under the stream's row lock while its INSERT stores the chunks.
APPEND_CHUNKS = (
    'WITH reserved AS (UPDATE "streams_app_stream" SET "last_sequence" = "last_sequence" + %s, '
    '"chunk_count" = "chunk_count" + %s WHERE "id" = %s AND "status" = %s '
    'RETURNING "last_sequence") INSERT INTO "streams_app_streamchunk" ("stream_id", "sequence", '
    '"step", "type", "chunk", "created_at") SELECT %s, reserved."last_sequence" - %s + '
    "chunk.position, chunk.step, chunk.type, chunk.body, %s FROM reserved, "
    "jsonb_to_recordset(%s::jsonb) AS chunk(position integer, step integer, type varchar, "
    'body jsonb) ORDER BY chunk.position RETURNING "sequence"'
)


AGENT_TYPE = "bench"
# 100 bytes of text, about what a model streams between two flushes.
_WORDS = "Each delta carries the next few words of the answer, streamed as the model writes. "
DELTA = (_WORDS * 2)[:100]


def delta_input(session_id: str) -> dict[str, Any]:
    """Return a `text_delta` chunk as an agent hands it to its `StreamWriter`."""
    return {"type": "text_delta", "step": 0, "sessionId": session_id, "delta": DELTA}


def wire_delta(session_id: str) -> dict[str, Any]:
    """Return the same chunk in the wire form the writer validates it into and stores."""
    return {
        "step": 0,
        "sessionId": session_id,
        "agentType": AGENT_TYPE,
        "timestamp": time.time_ns() // 1_000_000,
        "type": "text_delta",
        "delta": DELTA,
        "messageId": None,
    }


class RawChunkWriter:
    """Append wire-form chunks one per statement, as `ORMStreamManager.append_chunks` does."""

    def __init__(self, connection: psycopg.Connection) -> None:
        self.connection = connection

    def statement_for(self, orm_sql: str) -> str:
        """Return the statement this writer runs where the ORM runs `orm_sql`: the same one."""
        return orm_sql

    def write(self, stream_id: str, chunk: dict[str, Any]) -> int:
        """Append one chunk in one autocommitted statement; return its sequence."""
        now = datetime.now(UTC)
        with self.connection.cursor() as cursor:
            reserve = [1, 1, stream_id, "active"]
            row = {"position": 1, "step": chunk["step"], "type": chunk["type"], "body": chunk}
            insert = [stream_id, 1, now, json.dumps([row])]
            cursor.execute(APPEND_CHUNKS, [*reserve, *insert])
            row = cursor.fetchone()
        if row is None:
            raise LookupError(f"no active stream {stream_id}")
        return row[0]
