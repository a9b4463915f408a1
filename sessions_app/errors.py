"""Domain errors of the durable record.

Each carries a machine-readable `code` and a `details` dict; the API layer maps them once to HTTP
status codes and `{"error": {"code", "message", "details"}}` bodies.
"""

from collections.abc import Iterable, Mapping
from typing import Any


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    """Return the JSON body of an error; `details` is a dict, or a list of problems."""
    return {"error": {"code": code, "message": message, "details": details or {}}}


class HelixError(Exception):
    """Base of every domain error Helix raises on purpose."""

    code = "helix-error"
    http_status = 400
    http_headers: Mapping[str, str] = {}

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def http_body(self) -> dict[str, Any]:
        """Return the JSON body this error answers an HTTP request with."""
        return error_body(self.code, self.message, self.details)


class SessionNotFound(HelixError):
    code = "session-not-found"
    http_status = 404

    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session {session_id!r} does not exist.", session_id=session_id)
        self.session_id = session_id


class SessionAlreadyExists(HelixError):
    code = "session-exists"
    http_status = 409

    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session {session_id!r} already exists.", session_id=session_id)
        self.session_id = session_id


class SessionBusy(HelixError):
    """A step of the session is running; the write would make its commit fail."""

    code = "session-busy"
    http_status = 409

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"A step of session {session_id!r} is running; try again when it has committed.",
            session_id=session_id,
        )
        self.session_id = session_id


class VersionConflict(HelixError):
    """A write named an expected version that is no longer current; nothing was written."""

    code = "version-conflict"
    http_status = 409

    def __init__(self, session_id: str, *, expected_version: int, current_version: int) -> None:
        super().__init__(
            f"Session {session_id!r} is at version {current_version}, "
            f"not the expected {expected_version}.",
            session_id=session_id,
            expected_version=expected_version,
            current_version=current_version,
        )
        self.session_id = session_id
        self.expected_version = expected_version
        self.current_version = current_version


class StateSizeExceeded(HelixError):
    """A tool call's staged state writes are larger than the configured limit."""

    code = "state-size-exceeded"
    http_status = 413

    def __init__(
        self,
        session_id: str,
        *,
        tool_call_id: str,
        total_bytes: int,
        limit: int,
        changed_keys: list[str],
    ) -> None:
        super().__init__(
            f"Tool call {tool_call_id!r} wrote {total_bytes} bytes of state (limit {limit}); "
            f"changed keys: {', '.join(changed_keys) or '(none)'}. Keep large artifacts out of "
            "agent state and store a reference instead.",
            session_id=session_id,
            tool_call_id=tool_call_id,
            total_bytes=total_bytes,
            limit=limit,
            changed_keys=changed_keys,
        )
        self.session_id = session_id
        self.tool_call_id = tool_call_id
        self.total_bytes = total_bytes
        self.limit = limit
        self.changed_keys = changed_keys


class MessageNotFound(HelixError):
    code = "message-not-found"
    http_status = 404

    def __init__(self, session_id: str, message_id: str) -> None:
        super().__init__(
            f"Session {session_id!r} has no message {message_id!r}.",
            session_id=session_id,
            message_id=message_id,
        )


class MessageIdConflict(HelixError):
    """A message id the caller chose already belongs to another session."""

    code = "message-id-conflict"
    http_status = 409

    def __init__(self, message_id: str) -> None:
        super().__init__(
            f"Message id {message_id!r} is already used by another session.",
            message_id=message_id,
        )
        self.message_id = message_id


class RunNotFound(HelixError):
    code = "run-not-found"
    http_status = 404

    def __init__(self, run_id: str) -> None:
        super().__init__(f"Run {run_id!r} does not exist.", run_id=run_id)
        self.run_id = run_id


class RunAlreadyExists(HelixError):
    """The run id, or the session's turn number, is taken."""

    code = "run-exists"
    http_status = 409

    def __init__(self, session_id: str, *, run_id: str, turn: int) -> None:
        super().__init__(
            f"Run {run_id!r} or turn {turn} of session {session_id!r} already exists.",
            session_id=session_id,
            run_id=run_id,
            turn=turn,
        )


class SubSessionRefNotFound(HelixError):
    code = "sub-session-ref-not-found"
    http_status = 404

    def __init__(self, session_id: str, sub_session_id: str) -> None:
        super().__init__(
            f"Session {session_id!r} has no sub-session {sub_session_id!r}.",
            session_id=session_id,
            sub_session_id=sub_session_id,
        )


class InvalidInput(HelixError, ValueError):
    """An argument a store was given is not valid; nothing was written.

    It is a `ValueError` too, like the argument checks of the session store.
    """

    code = "invalid-input"
    http_status = 400


class InvalidUsageEntry(InvalidInput):
    """A usage entry is malformed; `index` is its place in the batch that was refused."""

    code = "invalid-usage-entry"

    def __init__(self, message: str, *, field: str, index: int = 0) -> None:
        super().__init__(message, field=field, index=index)
        self.field = field
        self.index = index


class InvalidUsageQuery(InvalidInput):
    """A usage read was given an argument it cannot use (an unknown kind, a bad page, ...)."""

    code = "invalid-usage-query"

    def __init__(self, message: str, *, argument: str) -> None:
        super().__init__(message, argument=argument)
        self.argument = argument


class SearchUnsupported(HelixError):
    """The configured session store has no full-text search."""

    code = "search-unsupported"
    http_status = 501

    def __init__(self, backend: str) -> None:
        super().__init__(f"The session store {backend} has no full-text search.", backend=backend)


class InvalidJSON(InvalidInput):
    """A request body or WebSocket frame is not JSON that Helix takes."""

    code = "invalid-json"


class InvalidFrame(HelixError):
    """A WebSocket frame is not one of its socket's protocol."""

    code = "invalid-frame"


class UnknownFrameType(InvalidFrame):
    code = "unknown-type"

    def __init__(self, frame_type: str, *, known: Iterable[str]) -> None:
        names = sorted(known)
        super().__init__(
            f"This socket takes no frames of type {frame_type!r}; it takes {', '.join(names)}.",
            type=frame_type,
            known=names,
        )
