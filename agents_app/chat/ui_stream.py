"""A run's stream as the Vercel AI SDK's UI message stream (protocol v1, over SSE).

`UIStreamEncoder` turns the run's stored chunks, in sequence order, into UI message chunks:
one assistant message per run (`start` ... `finish`), a `start-step`/`finish-step` pair per
agent step, text and reasoning blocks, and `dynamic-tool` calls with their outputs (an approval
tool's call with its approval request). The run's structured output is a `data-output` part;
custom chunks are `data-<name>` parts. The stream ends at the run's end (completed,
interrupted, suspended or failed) with `data: [DONE]`.
"""

import json
from collections.abc import AsyncIterator
from typing import Any

from streams_app.backends.reader import StreamReader
from streams_app.backends.types import ChunkEvent, EndEvent, FailEvent, StreamEvent

HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "x-vercel-ai-ui-message-stream": "v1",
}
DONE = b"data: [DONE]\n\n"
HEARTBEAT = b": heartbeat\n\n"
# The run's last chunk, and the reason `finish` gives for it.
ENDINGS = {
    "run_completed": "stop",
    "run_interrupted": "other",
    "run_suspended": "tool-calls",
    "run_failed": "error",
}
# Chunks drawn in the assistant message; the others (state, sub-agents, ...) are left out.
DRAWN = {
    "text_delta",
    "reasoning_delta",
    "tool_call_start",
    "tool_approval_request",
    "tool_result",
    "custom",
}


class UIStreamEncoder:
    """Encode one run's chunks; `finished` once its last chunk (or the stream's end) is seen.

    With a `session_id`, the chunks of other sessions (sub-agents', copied into the stream) are
    left out: a sub-agent shows as its tool call and result.
    """

    def __init__(self, message_id: str, session_id: str | None = None) -> None:
        self.message_id = message_id
        self.session_id = session_id
        self.finished = False
        self._started = False
        self._step: int | None = None
        self._open: tuple[str, str] | None = None  # The open text or reasoning block.

    def encode(self, event: StreamEvent) -> list[dict[str, Any]]:
        """Return the UI message chunks one stream event makes."""
        if self.finished:
            return []
        parts = self._start()
        if isinstance(event, ChunkEvent):
            if self.session_id is None or event.chunk.get("sessionId") == self.session_id:
                parts += self._chunk(event.chunk)
        elif isinstance(event, EndEvent | FailEvent):  # Ended without a run's last chunk.
            if isinstance(event, FailEvent):
                parts.append({"type": "error", "errorText": event.error})
            parts += self._finish("error" if isinstance(event, FailEvent) else "stop")
        return parts

    def _start(self) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        return [{"type": "start", "messageId": self.message_id}]

    def _chunk(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        kind = chunk["type"]
        if kind in ENDINGS:
            parts = []
            if kind == "run_completed" and chunk.get("output") is not None:
                parts.append({"type": "data-output", "data": chunk["output"]})
            if kind == "run_failed":
                parts.append({"type": "error", "errorText": chunk["error"]})
            return self._close_block() + parts + self._finish(ENDINGS[kind])
        if kind not in DRAWN:
            return []
        parts = self._step_for(chunk.get("step"))
        match kind:
            case "text_delta" | "reasoning_delta":
                block = "text" if kind == "text_delta" else "reasoning"
                parts += self._block(block, chunk.get("messageId") or f"{self.message_id}:{block}")
                parts.append(
                    {"type": f"{block}-delta", "id": self._open[1], "delta": chunk["delta"]}
                )
            case "tool_call_start":
                parts += self._close_block()
                parts.append(
                    {
                        "type": "tool-input-available",
                        "toolCallId": chunk["toolCallId"],
                        "toolName": chunk["toolName"],
                        "input": chunk.get("input"),
                        "dynamic": True,
                    }
                )
            case "tool_approval_request":  # The call's id is its approval's id.
                parts.append(
                    {
                        "type": "tool-approval-request",
                        "approvalId": chunk["toolCallId"],
                        "toolCallId": chunk["toolCallId"],
                    }
                )
            case "tool_result":
                parts += self._close_block()
                if chunk.get("isError"):
                    error = chunk.get("result")
                    text = error.get("error") if isinstance(error, dict) else None
                    parts.append(
                        {
                            "type": "tool-output-error",
                            "toolCallId": chunk["toolCallId"],
                            "errorText": str(text or error),
                            "dynamic": True,
                        }
                    )
                else:
                    parts.append(
                        {
                            "type": "tool-output-available",
                            "toolCallId": chunk["toolCallId"],
                            "output": chunk.get("result"),
                            "dynamic": True,
                        }
                    )
            case "custom":
                parts.append({"type": f"data-{chunk['name']}", "data": chunk.get("data")})
        return parts

    def _step_for(self, step: int | None) -> list[dict[str, Any]]:
        if step == self._step:
            return []
        parts = self._close_step()
        self._step = step
        return [*parts, {"type": "start-step"}]

    def _block(self, block: str, block_id: str) -> list[dict[str, Any]]:
        if self._open == (block, block_id):
            return []
        parts = self._close_block()
        self._open = (block, block_id)
        return [*parts, {"type": f"{block}-start", "id": block_id}]

    def _close_block(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        block, block_id = self._open
        self._open = None
        return [{"type": f"{block}-end", "id": block_id}]

    def _close_step(self) -> list[dict[str, Any]]:
        parts = self._close_block()
        if self._step is None:
            return parts
        self._step = None
        return [*parts, {"type": "finish-step"}]

    def _finish(self, reason: str) -> list[dict[str, Any]]:
        self.finished = True
        return [*self._close_step(), {"type": "finish", "finishReason": reason}]


async def ui_message_stream(
    reader: StreamReader, message_id: str, session_id: str, heartbeat: float
) -> AsyncIterator[bytes]:
    """Yield the session's run that `reader` follows as UI message stream SSE, then `[DONE]`."""
    encoder = UIStreamEncoder(message_id, session_id)
    try:
        while not encoder.finished and not reader.finished:
            events = await reader.next_events(timeout=heartbeat)
            yield _sse(encoder, events) if events else HEARTBEAT
        yield DONE
    finally:
        await reader.aclose()


async def failed_stream(message_id: str, error: str) -> AsyncIterator[bytes]:
    """Yield a run whose stream has failed already: its error, then `[DONE]`."""
    yield _sse(UIStreamEncoder(message_id), [FailEvent(error)]) + DONE


def _sse(encoder: UIStreamEncoder, events: list[StreamEvent]) -> bytes:
    parts = [part for event in events for part in encoder.encode(event)]
    return b"".join(f"data: {json.dumps(part)}\n\n".encode() for part in parts)
