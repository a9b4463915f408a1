"""Stored messages as AI SDK UI messages."""

import pytest
from rest_framework.test import APIClient

from agents_app.chat.ui_messages import ui_messages
from sessions_app.stores import get_session_store
from sessions_app.stores.types import Message, MessageRole


def stored(role: MessageRole, sequence: int, **fields) -> Message:
    return Message(role=role, id=f"m-{sequence}", sequence=sequence, **fields)


def test_a_tool_result_joins_the_part_of_the_call_it_answers():
    file = {"type": "file", "mediaType": "text/plain", "url": "data:text/plain;base64,aGk="}
    messages = [
        stored(MessageRole.USER, 1, content="Look it up", parts=[file], metadata={"a": 1}),
        stored(
            MessageRole.ASSISTANT,
            2,
            content="Searching.",
            tool_calls=[{"id": "c-1", "name": "search", "arguments": {"q": "x"}}],
        ),
        stored(MessageRole.TOOL, 3, content='{"hits": 2}', tool_call_id="c-1", name="search"),
        stored(MessageRole.ASSISTANT, 4, content="Two hits."),
    ]

    ui = ui_messages(messages)

    assert [(m["id"], m["role"]) for m in ui] == [
        ("m-1", "user"),
        ("m-2", "assistant"),
        ("m-4", "assistant"),
    ]
    assert ui[0]["parts"] == [{"type": "text", "text": "Look it up"}, file]
    assert ui[0]["metadata"] == {"a": 1, "sequence": 1}
    assert ui[1]["parts"] == [
        {"type": "text", "text": "Searching."},
        {
            "type": "dynamic-tool",
            "toolName": "search",
            "toolCallId": "c-1",
            "state": "output-available",
            "input": {"q": "x"},
            "output": {"hits": 2},
        },
    ]


def test_a_result_whose_call_is_not_converted_stands_alone_and_an_unanswered_call_waits():
    messages = [
        stored(MessageRole.TOOL, 7, content="plain text", tool_call_id="c-0", name="search"),
        stored(
            MessageRole.ASSISTANT,
            8,
            tool_calls=[{"id": "c-1", "name": "final_output", "arguments": {"a": 1}}],
        ),
    ]

    ui = ui_messages(messages)

    assert ui[0]["role"] == "assistant"
    assert ui[0]["parts"] == [
        {
            "type": "dynamic-tool",
            "toolName": "search",
            "toolCallId": "c-0",
            "state": "output-available",
            "input": None,
            "output": "plain text",
        }
    ]
    assert ui[1]["parts"][0]["state"] == "input-available"


@pytest.mark.parametrize(
    "content",
    ["[" * 100_000 + "]" * 100_000, "NaN", "1e400", '{"score": -1e400}'],
    ids=["deep", "nan", "huge", "huge-inside"],
)
def test_a_tool_result_that_is_json_no_response_can_carry_stays_text(content):
    # Any client may append such a tool message through the conversation API.
    ui = ui_messages([stored(MessageRole.TOOL, 1, content=content, tool_call_id="c-1")])

    assert ui[0]["parts"][0]["output"] == content


@pytest.mark.django_db
def test_the_messages_api_reads_back_a_tool_result_of_deeply_nested_text(owner):
    client = APIClient()
    client.force_authenticate(owner)
    get_session_store().create_session("s-1", agent_type="researcher", owner_id=owner.pk)
    content = "[" * 100_000 + "]" * 100_000
    message = {"role": "tool", "content": content, "toolCallId": "c-1", "name": "search"}
    appended = client.post("/api/sessions/s-1/conversation", {"messages": [message]}, format="json")

    response = client.get("/api/sessions/s-1/messages")

    assert appended.status_code == 201
    assert response.status_code == 200
    assert response.json()["messages"][0]["parts"][0]["output"] == content
