"""A run's chunks as the AI SDK's UI message stream."""

from agents_app.chat.ui_stream import UIStreamEncoder
from streams_app.backends.types import ChunkEvent, EndEvent, FailEvent


def chunk(sequence: int, type: str, step: int = 1, **fields) -> ChunkEvent:
    return ChunkEvent(sequence=sequence, chunk={"type": type, "step": step, **fields})


def encode(*events) -> list[dict]:
    encoder = UIStreamEncoder("run-1")
    return [part for event in events for part in encoder.encode(event)]


def test_a_run_becomes_one_message_with_a_step_per_agent_step():
    parts = encode(
        chunk(1, "run_resumed", step=0, runId="run-1"),  # Not drawn.
        chunk(2, "text_delta", delta="Let me ", messageId="m-1"),
        chunk(3, "text_delta", delta="look.", messageId="m-1"),
        chunk(4, "tool_call_start", toolCallId="c-1", toolName="search", input={"q": "x"}),
        chunk(5, "tool_result", toolCallId="c-1", toolName="search", result={"hits": 1}),
        chunk(6, "reasoning_delta", step=2, delta="Hm.", messageId="m-2"),
        chunk(7, "text_delta", step=2, delta="Found it.", messageId="m-2"),
        chunk(8, "custom", step=2, name="note", data={"n": 1}),
        chunk(9, "run_completed", step=2, output={"answer": 1}),
        chunk(10, "text_delta", step=3, delta="after the end"),
    )

    assert parts == [
        {"type": "start", "messageId": "run-1"},
        {"type": "start-step"},
        {"type": "text-start", "id": "m-1"},
        {"type": "text-delta", "id": "m-1", "delta": "Let me "},
        {"type": "text-delta", "id": "m-1", "delta": "look."},
        {"type": "text-end", "id": "m-1"},
        {
            "type": "tool-input-available",
            "toolCallId": "c-1",
            "toolName": "search",
            "input": {"q": "x"},
            "dynamic": True,
        },
        {
            "type": "tool-output-available",
            "toolCallId": "c-1",
            "output": {"hits": 1},
            "dynamic": True,
        },
        {"type": "finish-step"},
        {"type": "start-step"},
        {"type": "reasoning-start", "id": "m-2"},
        {"type": "reasoning-delta", "id": "m-2", "delta": "Hm."},
        {"type": "reasoning-end", "id": "m-2"},
        {"type": "text-start", "id": "m-2"},
        {"type": "text-delta", "id": "m-2", "delta": "Found it."},
        {"type": "data-note", "data": {"n": 1}},
        {"type": "text-end", "id": "m-2"},
        {"type": "data-output", "data": {"answer": 1}},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "stop"},
    ]


def test_a_tool_error_and_a_failed_run():
    parts = encode(
        chunk(1, "tool_call_start", toolCallId="c-1", toolName="explode", input={}),
        chunk(
            2,
            "tool_result",
            toolCallId="c-1",
            toolName="explode",
            result={"error": "boom"},
            isError=True,
        ),
        chunk(3, "run_failed", error="The model failed."),
    )

    assert parts[3] == {
        "type": "tool-output-error",
        "toolCallId": "c-1",
        "errorText": "boom",
        "dynamic": True,
    }
    assert parts[-3:] == [
        {"type": "error", "errorText": "The model failed."},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "error"},
    ]


def test_an_interrupted_run_and_a_stream_that_ends_or_fails_without_a_last_chunk():
    assert encode(chunk(1, "run_interrupted", reason="enough"))[-1] == {
        "type": "finish",
        "finishReason": "other",
    }
    assert encode(EndEvent(final_output=None))[-1] == {"type": "finish", "finishReason": "stop"}
    assert encode(FailEvent("gone"))[-2:] == [
        {"type": "error", "errorText": "gone"},
        {"type": "finish", "finishReason": "error"},
    ]


def test_a_suspended_run_shows_its_held_calls_and_asks_for_approval():
    parts = encode(
        chunk(1, "tool_call_start", toolCallId="c-1", toolName="ask", input={"q": "?"}),
        chunk(2, "tool_call_start", toolCallId="c-2", toolName="pay", input={"amount": 5}),
        chunk(3, "tool_approval_request", toolCallId="c-2", toolName="pay", input={"amount": 5}),
        chunk(4, "run_suspended", reason="client_tool", pendingToolCallIds=["c-1", "c-2"]),
    )

    assert [p["type"] for p in parts] == [
        "start",
        "start-step",
        "tool-input-available",
        "tool-input-available",
        "tool-approval-request",
        "finish-step",
        "finish",
    ]
    assert parts[4] == {"type": "tool-approval-request", "approvalId": "c-2", "toolCallId": "c-2"}
    assert parts[-1] == {"type": "finish", "finishReason": "tool-calls"}


def test_a_sub_agents_chunks_in_the_stream_are_left_out():
    encoder = UIStreamEncoder("run-1", session_id="p")
    events = [
        chunk(1, "subagent_start", sessionId="p", subSessionId="c"),
        chunk(2, "text_delta", sessionId="c", delta="child text"),
        chunk(3, "run_completed", sessionId="c", output="child output"),
        chunk(4, "subagent_end", sessionId="p", subSessionId="c"),
        chunk(5, "text_delta", step=2, sessionId="p", delta="parent text", messageId="m"),
        chunk(6, "run_completed", step=2, sessionId="p", output=None),
    ]

    parts = [part for event in events for part in encoder.encode(event)]

    assert [p["type"] for p in parts] == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    assert parts[3]["delta"] == "parent text"
