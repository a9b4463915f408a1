"""Stored messages as the Vercel AI SDK's UI messages (`{id, role, parts, metadata}`).

A tool result joins its call's `dynamic-tool` part in the assistant message that made the call;
a result whose call is not among the messages converted (an earlier page) becomes an assistant
message of its own holding that part.
"""

from collections.abc import Sequence
from typing import Any

from sessions_app.errors import InvalidJSON
from sessions_app.parsers import json_loads
from sessions_app.stores.types import Message, MessageRole


def ui_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Return `messages`, in order, as UI messages."""
    converted: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    for message in messages:
        if message.role == MessageRole.TOOL:
            part = calls.get(message.tool_call_id or "")
            if part is None:
                part = _tool_part(message.tool_call_id, message.name, None)
                converted.append(_ui_message(message, MessageRole.ASSISTANT, [part]))
            part.update(state="output-available", output=_json_or_text(message.content))
            continue
        parts = [{"type": "text", "text": message.content}] if message.content else []
        parts += message.parts
        for call in message.tool_calls:
            part = calls[call["id"]] = _tool_part(call["id"], call["name"], call["arguments"])
            parts.append(part)
        converted.append(_ui_message(message, message.role, parts))
    return converted


def _ui_message(message: Message, role: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    metadata = {**message.metadata, "sequence": message.sequence}
    if message.created_at is not None:
        metadata["createdAt"] = message.created_at.isoformat()
    return {"id": message.id, "role": str(role), "parts": parts, "metadata": metadata}


def _tool_part(call_id: str | None, name: str | None, arguments: Any) -> dict[str, Any]:
    return {
        "type": "dynamic-tool",
        "toolName": name or "",
        "toolCallId": call_id or "",
        "state": "input-available",
        "input": arguments,
    }


def _json_or_text(content: str) -> Any:
    """Return the JSON value `content` holds, or `content` itself if it holds none we can send."""
    try:
        return json_loads(content)
    except InvalidJSON:
        return content
