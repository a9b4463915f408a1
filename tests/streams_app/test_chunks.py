"""Chunk types: every type validates to its camelCase wire form; bad chunks say what is wrong."""

import pytest

from streams_app import chunks
from streams_app.chunks import chunk_to_wire, parse_chunk
from streams_app.errors import InvalidChunk

COMMON = {"step": 2, "sessionId": "s-1", "agentType": "researcher", "timestamp": 1700000000000}
EXAMPLES = {
    "text_delta": {"delta": "Hel", "messageId": "m-1"},
    "reasoning_delta": {"delta": "thinking"},
    "tool_call_start": {"toolCallId": "c-1", "toolName": "search", "input": {"q": "x"}},
    "tool_result": {"toolCallId": "c-1", "toolName": "search", "result": [1], "isError": False},
    "tool_approval_request": {"toolCallId": "c-2", "toolName": "pay", "input": {"amount": 5}},
    "tool_approval_response": {"toolCallId": "c-2", "decision": "reject", "reason": "too much"},
    "step_start": {"runId": "r-1"},
    "run_completed": {"output": {"summary": "done"}},
    "run_interrupted": {"reason": "user"},
    "run_failed": {"error": "LLM unavailable"},
    "run_resumed": {"runId": "r-2", "previousRunId": "r-1"},
    "run_suspended": {"reason": "client_tool", "pendingToolCallIds": ["c-3"]},
    "subagent_start": {"subSessionId": "child", "subAgentType": "critic", "toolCallId": "c-4"},
    "subagent_end": {"subSessionId": "child", "subAgentType": "critic", "toolCallId": "c-4"},
    "state_patch": {"patches": [{"op": "replace", "path": "/count", "value": 2}]},
    "state_snapshot": {"state": {"count": 2}},
    "custom": {"name": "progress", "data": {"percent": 40}},
    "error": {"error": "rate limited", "code": "429", "recoverable": True},
}


def test_every_chunk_type_of_the_union_has_an_example():
    union_types = {model.model_fields["type"].default for model in chunks.Chunk.__origin__.__args__}
    assert union_types == set(EXAMPLES)


@pytest.mark.parametrize("chunk_type", sorted(EXAMPLES))
def test_each_chunk_type_round_trips_in_wire_form(chunk_type):
    wire = {"type": chunk_type, **COMMON, **EXAMPLES[chunk_type]}

    parsed = parse_chunk(wire)
    dumped = chunk_to_wire(wire)

    assert parsed.type == chunk_type
    assert parsed.session_id == "s-1"
    assert {key: dumped[key] for key in wire} == wire
    assert chunk_to_wire(parsed) == dumped
    assert parse_chunk(parsed) is parsed  # Validated when it was made: not again.


def test_timestamp_defaults_to_now_in_milliseconds():
    wire = chunk_to_wire(
        {"type": "text_delta", "step": 0, "sessionId": "s", "agentType": "a", "delta": ""}
    )

    assert wire["timestamp"] > 1_700_000_000_000


@pytest.mark.parametrize(
    ("chunk", "location"),
    [
        ({"type": "mystery", **COMMON}, "chunk"),
        ({"type": "text_delta", **COMMON}, "text_delta.delta"),
        ({"type": "text_delta", **COMMON, "delta": "x", "step": -1}, "text_delta.step"),
        ({"type": "text_delta", **COMMON, "delta": "x", "surprise": 1}, "text_delta.surprise"),
        (
            {"type": "tool_approval_response", **COMMON, "toolCallId": "c", "decision": "maybe"},
            "decision",
        ),
        ({"type": "text_delta", "step": 0, "agentType": "a", "delta": "x"}, "text_delta.sessionId"),
    ],
)
def test_invalid_chunks_raise_a_clear_error(chunk, location):
    with pytest.raises(InvalidChunk) as caught:
        chunk_to_wire(chunk)

    assert caught.value.code == "invalid-chunk"
    locations = [problem["location"] for problem in caught.value.details["problems"]]
    assert any(location in found or (location == "chunk" and found == "") for found in locations), (
        locations
    )
