"""Domain errors of the runtime (see `sessions_app.errors` for the base and the mapping)."""

from collections.abc import Mapping
from typing import Any

from sessions_app.errors import HelixError, InvalidInput


class RunNotActive(HelixError):
    """The session's run is not in a state that allows the operation."""

    code = "run-not-active"
    http_status = 409

    def __init__(self, session_id: str, status: str, action: str) -> None:
        super().__init__(
            f"Cannot {action} session {session_id!r}: it is {status}.",
            session_id=session_id,
            status=status,
            action=action,
        )


class AgentTypeMismatch(HelixError):
    code = "agent-type-mismatch"
    http_status = 409

    def __init__(self, session_id: str, session_type: str, requested: str) -> None:
        super().__init__(
            f"Session {session_id!r} belongs to agent type {session_type!r}, not {requested!r}.",
            session_id=session_id,
            agent_type=session_type,
            requested=requested,
        )


class InvalidResume(HelixError):
    code = "invalid-resume"
    http_status = 400

    def __init__(self, session_id: str, problem: str) -> None:
        super().__init__(f"Cannot resume session {session_id!r}: {problem}.", session_id=session_id)


class UnknownToolCall(HelixError):
    """A tool result names a call the session does not wait for."""

    code = "unknown-tool-call"
    http_status = 409

    def __init__(self, session_id: str, tool_call_id: str) -> None:
        super().__init__(
            f"Session {session_id!r} is not waiting for a result of tool call {tool_call_id!r}.",
            session_id=session_id,
            tool_call_id=tool_call_id,
        )


class HookRefused(HelixError):
    """A `before_*` lifecycle hook refused the request; HTTP answers with the hook's response."""

    code = "refused-by-hook"

    def __init__(self, status: int, body: Mapping[str, Any], headers: Mapping[str, str]) -> None:
        super().__init__("A lifecycle hook refused the request.")
        self.http_status = status
        self.response_body = dict(body)
        self.http_headers = dict(headers)

    def http_body(self) -> dict[str, Any]:
        """Return the body the hook answered with, as it gave it."""
        return self.response_body


class InvalidChatMessage(InvalidInput):
    """A chat request does not carry what starting a run needs."""
