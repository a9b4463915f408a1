"""The values a stream manager hands out: stream info, chunk pages, the events a reader sees,
and the snapshot a reader takes in one look at the store."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal

from streams_app.models import Stream

StreamStatus = Stream.Status
TERMINAL_STATUSES = frozenset({StreamStatus.ENDED, StreamStatus.FAILED})


@dataclass(frozen=True, slots=True)
class SequencedChunk:
    sequence: int
    chunk: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamInfo:
    stream_id: str
    status: StreamStatus
    total_chunks: int
    latest_sequence: int
    run_id: str | None
    agent_type: str | None
    error: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class ChunkPage:
    chunks: list[SequencedChunk]
    has_more: bool
    latest_sequence: int


@dataclass(frozen=True, slots=True)
class ChunkEvent:
    kind: ClassVar[str] = "chunk"
    sequence: int
    chunk: dict[str, Any]

    def to_wire(self) -> dict[str, Any]:
        return {"type": "chunk", "sequence": self.sequence, "chunk": self.chunk}


@dataclass(frozen=True, slots=True)
class EndEvent:
    kind: ClassVar[str] = "end"
    final_output: Any = None

    def to_wire(self) -> dict[str, Any]:
        return {"type": "end", "finalOutput": self.final_output}


@dataclass(frozen=True, slots=True)
class FailEvent:
    kind: ClassVar[str] = "fail"
    error: str

    def to_wire(self) -> dict[str, Any]:
        return {"type": "fail", "error": self.error}


@dataclass(frozen=True, slots=True)
class ResyncEvent:
    """Drop what you hold after `from_sequence`; the events that follow continue from there."""

    kind: ClassVar[str] = "resync"
    from_sequence: int
    reason: Literal["trimmed", "retracted"]

    def to_wire(self) -> dict[str, Any]:
        return {"type": "resync", "fromSequence": self.from_sequence, "reason": self.reason}


StreamEvent = ChunkEvent | EndEvent | FailEvent | ResyncEvent


@dataclass(frozen=True, slots=True)
class ChunkBatch:
    """Wire-form chunks for one stream, from the exclusive writer of `epoch` if it is set."""

    stream_id: str
    chunks: list[dict[str, Any]]
    epoch: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Snapshot:
    """What a reader sees in one look at the store, taken status first, chunks second.

    Because a stream ends only after its last chunk is committed, a terminal `status` read
    before the chunks means `chunks` hold everything there is once `complete` is true.
    """

    status: StreamStatus
    trimmed_through: int
    final_output: Any
    error: str
    chunks: list[SequencedChunk]
    complete: bool
    cursor_retracted_to: int | None = None
