"""The OpenAI-compatible adapter against a real local server speaking streaming chat completions."""

import json
import socket
import threading
import time

import pytest
from django.test import override_settings

from agents_app.llm.base import (
    AdapterContext,
    Finish,
    LLMError,
    LLMRequest,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
    build_adapter,
)
from agents_app.llm.openai_compat import OpenAICompatAdapter
from sessions_app.stores.types import Message, MessageRole
from tests.agents_app.llm.chat_server import Status, Stream, chunk, text_reply

CONTEXT = AdapterContext(session_id="s-1", agent_type="openai-test", run_id="run-1")
USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
IMAGE = "data:image/png;base64,iVBORw0KGgo="


def adapter(server, **options) -> OpenAICompatAdapter:
    return OpenAICompatAdapter({"base_url": server.url, "model": "test-model", **options}, CONTEXT)


def ask(text: str = "hi", **fields) -> LLMRequest:
    return LLMRequest("Be brief.", [Message(role=MessageRole.USER, content=text)], **fields)


def call_fragment(index: int, *, id=None, name=None, arguments=None) -> dict:
    function = {k: v for k, v in (("name", name), ("arguments", arguments)) if v is not None}
    fragment = {"index": index, "function": function}
    if id is not None:
        fragment |= {"id": id, "type": "function"}
    return {"tool_calls": [fragment]}


def test_text_streams_as_deltas_then_usage_then_finish(chat_server):
    chat_server.reply(text_reply("Hel", "lo", " world"))

    got = list(adapter(chat_server).stream(ask()))

    assert got == [
        TextDelta("Hel"),
        TextDelta("lo"),
        TextDelta(" world"),
        Usage("served-model", prompt_tokens=7, completion_tokens=3, total_tokens=10),
        Finish("stop"),
    ]


def test_deltas_arrive_while_the_server_is_still_streaming(chat_server):
    pieces = [chunk({"content": "first"}), chunk({"content": " second"}), chunk(finish="stop")]
    chat_server.reply(Stream(pieces, delay=0.5))
    stream = iter(adapter(chat_server).stream(ask()))

    started = time.monotonic()
    assert next(stream) == TextDelta("first")

    assert time.monotonic() - started < 0.4
    assert list(stream)[-1] == Finish("stop")


def test_tool_call_arguments_split_across_chunks_assemble_into_two_parallel_calls(chat_server):
    chat_server.reply(
        Stream(
            [
                chunk({"role": "assistant", "content": "Checking both."}),
                chunk(call_fragment(0, id="call_a", name="weather", arguments="")),
                chunk(call_fragment(0, arguments='{"city": ')),
                chunk(call_fragment(1, id="call_b", name="time", arguments='{"zone"')),
                chunk(call_fragment(0, arguments='"Paris", "days"')),
                chunk(call_fragment(1, arguments=': "CET"}')),
                chunk(call_fragment(0, arguments=": 2}")),
                chunk(finish="tool_calls"),
                chunk(usage=USAGE),
            ]
        )
    )

    got = list(adapter(chat_server).stream(ask()))

    assert got[:3] == [
        TextDelta("Checking both."),
        ToolCall("call_a", "weather", {"city": "Paris", "days": 2}),
        ToolCall("call_b", "time", {"zone": "CET"}),
    ]
    assert [type(e) for e in got[3:]] == [Usage, Finish]
    assert got[-1] == Finish("tool_calls")


def test_calls_with_the_same_index_but_new_ids_stay_apart(chat_server):
    chat_server.reply(
        Stream(
            [
                chunk(call_fragment(0, id="one", name="a", arguments='{"n": 1}')),
                chunk(call_fragment(0, id="two", name="b", arguments='{"n": 2}')),
                chunk(finish="tool_calls"),
            ]
        )
    )

    calls = [e for e in adapter(chat_server).stream(ask()) if isinstance(e, ToolCall)]

    assert calls == [ToolCall("one", "a", {"n": 1}), ToolCall("two", "b", {"n": 2})]


def test_invalid_json_arguments_arrive_raw_and_flagged(chat_server):
    chat_server.reply(
        Stream(
            [
                chunk(call_fragment(0, id="c1", name="search", arguments='{"q": "unterminated')),
                chunk(call_fragment(1, id="c2", name="ping", arguments="")),
                chunk(finish="tool_calls"),
            ]
        )
    )

    calls = [e for e in adapter(chat_server).stream(ask()) if isinstance(e, ToolCall)]

    assert calls == [
        ToolCall("c1", "search", {"_raw": '{"q": "unterminated'}, invalid_arguments=True),
        ToolCall("c2", "ping", {}),
    ]


def test_a_server_that_says_stop_after_tool_calls_finishes_with_tool_calls(chat_server):
    chat_server.reply(
        Stream([chunk(call_fragment(0, id="c", name="t", arguments="{}")), chunk(finish="stop")])
    )

    got = list(adapter(chat_server).stream(ask()))

    assert got == [ToolCall("c", "t", {}), Finish("tool_calls")]


@pytest.mark.parametrize(
    ("sent", "reason"),
    [("length", "length"), ("content_filter", "content_filter"), ("eos_token", "other")],
)
def test_finish_reasons_map_to_the_protocols(chat_server, sent, reason):
    chat_server.reply(Stream([chunk({"content": "x"}), chunk(finish=sent)]))

    assert list(adapter(chat_server).stream(ask()))[-1] == Finish(reason)


def test_usage_includes_reasoning_and_cached_tokens(chat_server):
    usage = {
        "prompt_tokens": 120,
        "completion_tokens": 40,
        "total_tokens": 160,
        "completion_tokens_details": {"reasoning_tokens": 25},
        "prompt_tokens_details": {"cached_tokens": 100},
    }
    chat_server.reply(Stream([chunk({"content": "ok"}), chunk(finish="stop"), chunk(usage=usage)]))

    got = [e for e in adapter(chat_server).stream(ask()) if isinstance(e, Usage)]

    assert got == [
        Usage(
            "served-model",
            prompt_tokens=120,
            completion_tokens=40,
            reasoning_tokens=25,
            cached_tokens=100,
            total_tokens=160,
        )
    ]


def test_reasoning_content_streams_as_reasoning_deltas(chat_server):
    chat_server.reply(
        Stream(
            [
                chunk({"role": "assistant", "reasoning_content": "Let me"}),
                chunk({"reasoning_content": " think."}),
                chunk({"reasoning": "Newer servers"}),
                chunk({"content": "Answer."}),
                chunk(finish="stop"),
            ]
        )
    )

    got = list(adapter(chat_server).stream(ask()))

    assert got == [
        ReasoningDelta("Let me"),
        ReasoningDelta(" think."),
        ReasoningDelta("Newer servers"),
        TextDelta("Answer."),
        Finish("stop"),
    ]


def test_the_request_carries_model_messages_tools_and_stream_options(chat_server):
    chat_server.reply(text_reply("ok"))
    messages = [
        Message(
            role=MessageRole.USER,
            content="What is in these?",
            parts=[
                {"type": "file", "mediaType": "image/png", "url": IMAGE, "filename": "a.png"},
                {
                    "type": "file",
                    "mediaType": "application/pdf",
                    "url": "data:application/pdf;base64,JVBERi0=",
                    "filename": "report.pdf",
                },
            ],
        ),
        Message(
            role=MessageRole.ASSISTANT,
            content="",
            tool_calls=[{"id": "call_1", "name": "lookup", "arguments": {"q": "png"}}],
        ),
        Message(
            role=MessageRole.TOOL, content='{"found": 1}', tool_call_id="call_1", name="lookup"
        ),
        Message(role=MessageRole.ASSISTANT, content="One image, one report."),
        Message(role=MessageRole.USER, content="Thanks"),
    ]
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    request = LLMRequest(
        "You are helpful.",
        messages,
        [ToolSpec("lookup", "Look something up.", schema)],
        temperature=0.2,
        max_tokens=64,
        tool_choice="lookup",
        extra={"top_k": 5},
    )

    list(adapter(chat_server, api_key="sk-test", extra_body={"seed": 1}).stream(request))

    [sent] = chat_server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.body == {
        "model": "test-model",
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
        "max_tokens": 64,
        "top_k": 5,
        "seed": 1,
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "description": "Look something up.",
                    "parameters": schema,
                },
            }
        ],
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in these?"},
                    {"type": "image_url", "image_url": {"url": IMAGE}},
                    {
                        "type": "text",
                        "text": "[Attached file report.pdf (application/pdf); "
                        "its content is not shown.]",
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q": "png"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"found": 1}'},
            {"role": "assistant", "content": "One image, one report."},
            {"role": "user", "content": "Thanks"},
        ],
    }


def test_a_request_logs_no_line_of_its_http_client_at_info(chat_server, caplog):
    # One a step, with its URL whole: a token in the URL's query would land in the logs.
    chat_server.reply(text_reply("ok"))

    list(adapter(chat_server).stream(ask()))

    assert chat_server.requests
    assert [r.getMessage() for r in caplog.records if r.name.startswith("httpx")] == []


def test_options_fill_what_the_request_leaves_unset(chat_server):
    chat_server.reply(text_reply("ok"))
    options = {
        "temperature": 0.7,
        "max_tokens": 99,
        "max_tokens_param": "max_completion_tokens",
        "tool_choice": "required",
    }
    tools = [ToolSpec("t", "A tool.", {"type": "object", "properties": {}})]

    list(adapter(chat_server, **options).stream(ask(tools=tools, model="request-model")))

    body = chat_server.requests[0].body
    assert (body["model"], body["temperature"], body["tool_choice"]) == (
        "request-model",
        0.7,
        "required",
    )
    assert body["max_completion_tokens"] == 99
    assert "max_tokens" not in body


def test_build_adapter_sends_the_agents_model_over_the_configured_one(chat_server):
    chat_server.reply(text_reply("ok"))
    helix = {
        "LLM": {
            "BACKEND": "agents_app.llm.openai_compat.OpenAICompatAdapter",
            "OPTIONS": {"base_url": chat_server.url, "model": "base-model", "api_key": "k"},
        }
    }
    with override_settings(HELIX=helix):
        built = build_adapter(CONTEXT, {"model": "agent-model", "temperature": 0.0})

    list(built.stream(ask()))

    body = chat_server.requests[0].body
    assert (body["model"], body["temperature"]) == ("agent-model", 0.0)


def test_the_api_key_comes_from_the_environment_when_not_configured(chat_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    chat_server.reply(text_reply("ok"))

    list(adapter(chat_server).stream(ask()))

    assert chat_server.requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_without_a_model_the_adapter_fails_without_calling_the_server(chat_server):
    bare = OpenAICompatAdapter({"base_url": chat_server.url}, CONTEXT)

    with pytest.raises(LLMError, match="No model") as caught:
        list(bare.stream(ask()))

    assert caught.value.retryable is False
    assert chat_server.requests == []


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(429, True), (500, True), (503, True), (400, False), (401, False), (404, False)],
)
def test_http_errors_map_to_llm_errors_retryable_when_waiting_may_help(
    chat_server, status, retryable
):
    chat_server.reply(Status(status, {"error": {"message": f"status {status}", "type": "x"}}))

    with pytest.raises(LLMError) as caught:
        list(adapter(chat_server).stream(ask()))

    assert caught.value.retryable is retryable
    assert caught.value.status_code == status
    assert f"status {status}" in str(caught.value)
    assert len(chat_server.requests) == 1  # The SDK did not retry on its own.


def test_an_exhausted_quota_is_not_retryable(chat_server):
    chat_server.reply(Status(429, {"error": {"message": "quota", "code": "insufficient_quota"}}))

    with pytest.raises(LLMError) as caught:
        list(adapter(chat_server).stream(ask()))

    assert caught.value.retryable is False


def test_a_refused_connection_is_retryable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    refused = OpenAICompatAdapter(
        {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m"}, CONTEXT
    )

    with pytest.raises(LLMError, match="Cannot reach") as caught:
        list(refused.stream(ask()))

    assert caught.value.retryable is True


def test_an_error_event_mid_stream_is_retryable(chat_server):
    chat_server.reply(
        Stream([chunk({"content": "par"}), {"error": {"message": "engine overloaded"}}])
    )
    got: list = []

    with pytest.raises(LLMError, match="engine overloaded") as caught:
        got.extend(adapter(chat_server).stream(ask()))

    assert got == [TextDelta("par")]
    assert caught.value.retryable is True


@pytest.mark.parametrize("event", ["data: {not json\n\n", 'data: {"choices": "none"}\n\n'])
def test_an_event_that_is_not_a_chunk_is_a_retryable_malformed_stream(chat_server, event):
    chat_server.reply(Stream([chunk({"content": "par"}), event, chunk(finish="stop")]))
    got: list = []

    with pytest.raises(LLMError, match="malformed stream") as caught:
        got.extend(adapter(chat_server).stream(ask()))

    assert got == [TextDelta("par")]
    assert caught.value.retryable is True


def test_a_stream_cut_off_before_the_finish_is_retryable(chat_server):
    chat_server.reply(Stream([chunk({"content": "half"})], done=False))

    with pytest.raises(LLMError, match="ended before") as caught:
        list(adapter(chat_server).stream(ask()))

    assert caught.value.retryable is True


def test_a_read_timeout_is_retryable(chat_server):
    chat_server.reply(Stream([chunk({"content": "a"}), chunk({"content": "b"})], delay=2))

    with pytest.raises(LLMError, match="timed out") as caught:
        list(adapter(chat_server, timeout=0.3).stream(ask()))

    assert caught.value.retryable is True


def test_comments_other_fields_and_data_over_several_lines_read_as_server_sent_events(
    chat_server,
):
    over_lines = json.dumps(chunk({"content": "two lines"}), indent=1).replace("\n", "\ndata: ")
    chat_server.reply(
        Stream(
            [
                ": keep-alive\n\n",
                chunk({"content": "one, "}),
                f"event: message\nid: 7\ndata: {over_lines}\n\n",
                chunk(finish="stop"),
            ]
        )
    )

    got = list(adapter(chat_server).stream(ask()))

    assert got == [TextDelta("one, "), TextDelta("two lines"), Finish("stop")]


def test_a_reply_is_read_in_the_iterating_thread_with_no_other_left_waiting(chat_server):
    # A step waiting on its model holds one thread: the request's own is gone once the
    # server has answered.
    words = [chunk({"content": f"w{n} "}) for n in range(4)]
    chat_server.reply(Stream([*words, chunk(finish="stop")], delay=0.1))
    helpers = None

    for event in adapter(chat_server).stream(ask()):
        if event == TextDelta("w2 "):
            helpers = [t.name for t in threading.enumerate() if t.name.startswith("helix-llm")]

    assert helpers == []


def test_replies_one_after_another_share_one_connection(chat_server):
    # No new TCP (and, to a hosted model, TLS) handshake a step.
    chat_server.reply(text_reply("one"), text_reply("two"))
    model = adapter(chat_server)

    first, second = list(model.stream(ask())), list(model.stream(ask()))

    assert TextDelta("one") in first
    assert TextDelta("two") in second
    assert chat_server.requests[0].port == chat_server.requests[1].port


def test_closing_a_stream_after_its_reply_leaves_its_connection_to_the_next(chat_server):
    # The watcher may close a step's stream late; the connection may serve another step by then.
    words = [chunk({"content": f"w{n} "}) for n in range(5)]
    chat_server.reply(text_reply("done"), Stream([*words, chunk(finish="stop")], delay=0.1))
    model = adapter(chat_server)
    ended = model.stream(ask())
    list(ended)
    got = []

    for event in model.stream(ask()):
        got.append(event)
        ended.close()

    assert chat_server.requests[0].port == chat_server.requests[1].port
    assert got == [*(TextDelta(f"w{n} ") for n in range(5)), Finish("stop")]
    assert not chat_server.hung_up.is_set()


def test_closing_mid_stream_from_another_thread_ends_iteration_and_the_connection(chat_server):
    words = [chunk({"content": f"w{n} "}) for n in range(50)]
    chat_server.reply(Stream(words, delay=5))
    stream = adapter(chat_server).stream(ask())
    got = []

    started = time.monotonic()
    for event in stream:
        got.append(event)
        threading.Timer(0.2, stream.close).start()

    assert time.monotonic() - started < 1.0
    assert got == [TextDelta("w0 ")]
    # The server, idle until its next chunk, sees the client hang up at once.
    assert chat_server.hung_up.wait(1.0)


def test_closing_before_the_server_answers_ends_iteration_at_once(chat_server):
    chat_server.reply(Stream([chunk({"content": "late"}), chunk(finish="stop")], head_delay=3))
    stream = adapter(chat_server).stream(ask())
    threading.Timer(0.2, stream.close).start()

    started = time.monotonic()
    got = list(stream)

    assert time.monotonic() - started < 1.0
    assert got == []


def test_a_stream_closed_before_iteration_sends_nothing(chat_server):
    stream = adapter(chat_server).stream(ask())

    stream.close()

    assert list(stream) == []
    assert chat_server.requests == []


def test_a_stream_is_iterated_once(chat_server):
    chat_server.reply(text_reply("ok"))
    stream = adapter(chat_server).stream(ask())
    list(stream)

    with pytest.raises(RuntimeError, match="once"):
        list(stream)


def test_without_credentials_for_openai_itself_the_adapter_fails_for_good(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    with pytest.raises(LLMError, match="Missing credentials") as caught:
        OpenAICompatAdapter({"model": "gpt-test"}, CONTEXT)

    assert caught.value.retryable is False
