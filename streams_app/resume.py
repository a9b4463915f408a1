"""Where a client resumes a stream: after the sequence it last received."""

from sessions_app.stores.rules import MAX_POSITION
from streams_app.errors import InvalidResumePoint


def resume_point(*, from_sequence: str | None, last_event_id: str | None = None) -> int:
    """Return the sequence to resume after; `Last-Event-ID` wins over `?fromSequence=`.

    A browser's EventSource resends the URL it started with and adds `Last-Event-ID`, so the
    header is the more recent of the two.
    """
    value = last_event_id if last_event_id is not None else from_sequence
    if value is None or value == "":
        return 0
    if not value.isascii() or not value.isdigit() or int(value) > MAX_POSITION:
        raise InvalidResumePoint(value)
    return int(value)
