"""Chunks and streams the stream suites write: a labelled text delta, a writer that wrote some,
a stream written and ended or failed."""

from streams_app.backends import get_stream_manager
from streams_app.backends.base import StreamManager


def text(label: str, *, step: int = 0) -> dict:
    """Return a text delta chunk saying `label`."""
    return {"type": "text_delta", "step": step, "sessionId": "s-1", "delta": label}


def writer_with(manager: StreamManager, *labels: str, stream_id: str = "st"):
    """Return a writer of a new stream that wrote a text delta for each label."""
    writer = manager.create_writer(stream_id, "run-1", "researcher")
    for label in labels:
        writer.write(text(label))
    return writer


def write(session_id: str, *labels: str, end: object = None, fail: str | None = None) -> None:
    """Write the session's stream a text delta for each label, then fail or end it if asked."""
    manager = get_stream_manager()
    writer = manager.create_writer(session_id, "run-1", "researcher")
    writer.write_many([text(label) for label in labels])
    if fail is not None:
        manager.fail_stream(session_id, fail)
    elif end is not None:
        manager.end_stream(session_id, end)
