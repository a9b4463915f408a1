"""Domain errors of the live record (see `sessions_app.errors` for the base and the mapping)."""

from pydantic import ValidationError

from sessions_app.errors import HelixError


class StreamNotFound(HelixError):
    code = "stream-not-found"
    http_status = 404

    def __init__(self, stream_id: str) -> None:
        super().__init__(f"Stream {stream_id!r} does not exist.", stream_id=stream_id)
        self.stream_id = stream_id


class StreamClosed(HelixError):
    """The stream's status does not allow the operation (writing to an ended stream, say)."""

    code = "stream-closed"
    http_status = 409

    def __init__(self, stream_id: str, status: str, action: str) -> None:
        super().__init__(
            f"Cannot {action} stream {stream_id!r}: it is {status}.",
            stream_id=stream_id,
            status=status,
            action=action,
        )
        self.stream_id = stream_id
        self.status = status


class WriterSuperseded(HelixError):
    """An exclusive writer wrote after a newer exclusive writer of its stream was opened."""

    code = "writer-superseded"
    http_status = 409

    def __init__(self, stream_id: str) -> None:
        super().__init__(
            f"A newer writer of stream {stream_id!r} took over; this one may not write.",
            stream_id=stream_id,
        )
        self.stream_id = stream_id


class InvalidChunk(HelixError):
    code = "invalid-chunk"
    http_status = 400

    def __init__(self, error: ValidationError) -> None:
        problems = [
            {"location": ".".join(str(part) for part in item["loc"]), "problem": item["msg"]}
            for item in error.errors(include_url=False)
        ]
        summary = "; ".join(f"{p['location'] or 'chunk'}: {p['problem']}" for p in problems)
        super().__init__(f"Invalid chunk: {summary}", problems=problems)


class UnstorableChunks(HelixError):
    """The database refused a writer's chunks as they are (a NUL character in a text, say)."""

    code = "unstorable-chunks"
    http_status = 422

    def __init__(self, stream_id: str, reason: str) -> None:
        super().__init__(
            f"The database cannot store the chunks written to stream {stream_id!r}: {reason}",
            stream_id=stream_id,
        )
        self.stream_id = stream_id


class InvalidResumePoint(HelixError):
    code = "invalid-from-sequence"
    http_status = 400

    def __init__(self, value: str) -> None:
        super().__init__(
            f"The sequence to resume after must be a non-negative integer, not {value!r}.",
            value=value,
        )
