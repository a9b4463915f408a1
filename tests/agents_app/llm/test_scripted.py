"""The offline scripted adapter, and the factory that builds adapters from settings."""

import threading
import time

import pytest
from django.test import override_settings

from agents_app.llm.base import (
    AdapterContext,
    Finish,
    LLMError,
    LLMRequest,
    TextDelta,
    ToolCall,
    Usage,
    build_adapter,
)
from agents_app.llm.scripted import (
    ScriptedAdapter,
    ScriptedToolCall,
    Turn,
    register_script,
    sequence_script,
    unregister_script,
)
from sessions_app.stores.types import Message, MessageRole

CONTEXT = AdapterContext(session_id="s-1", agent_type="scripted-test", run_id="run-123456789abc")


def request(*messages: Message) -> LLMRequest:
    return LLMRequest(system="Be brief.", messages=list(messages) or [user("hi there")])


def user(text: str) -> Message:
    return Message(role=MessageRole.USER, content=text)


def events(adapter, req: LLMRequest) -> list:
    return list(adapter.stream(req))


@pytest.fixture
def script():
    """Register a script for the test agent type; forget it afterwards."""

    def register(fn):
        register_script(CONTEXT.agent_type, fn)
        return fn

    yield register
    unregister_script(CONTEXT.agent_type)


def test_without_a_script_the_model_echoes_the_user(script):
    got = events(ScriptedAdapter({}, CONTEXT), request(user("ping pong")))

    deltas = [e.text for e in got if isinstance(e, TextDelta)]
    assert "".join(deltas) == "You said: ping pong"
    assert isinstance(got[-1], Finish)
    assert got[-1].reason == "stop"


def test_text_streams_in_deltas_then_tool_calls_with_stable_ids_then_usage(script):
    script(
        sequence_script(
            Turn(
                text="one two three four five",
                tool_calls=[ScriptedToolCall(name="search", arguments={"q": "x"})],
            )
        )
    )
    adapter = ScriptedAdapter({"model": "tiny"}, CONTEXT)

    first, again = events(adapter, request()), events(adapter, request())

    assert [e.text for e in first if isinstance(e, TextDelta)] == ["one two three", " four five"]
    calls = [e for e in first if isinstance(e, ToolCall)]
    assert calls == [ToolCall(id="call_run-12345678_0_0", name="search", arguments={"q": "x"})]
    assert calls == [e for e in again if isinstance(e, ToolCall)]
    usage = next(e for e in first if isinstance(e, Usage))
    assert usage.model == "tiny"
    assert usage.total_tokens == usage.prompt_tokens + 6
    assert first[-1] == Finish("tool_calls")


def test_a_sequence_script_plays_the_turn_of_each_step(script):
    script(sequence_script(Turn(text="first"), Turn(text="second")))
    adapter = ScriptedAdapter({}, CONTEXT)
    after_one = request(user("go"), Message(role=MessageRole.ASSISTANT, content="first"))

    assert [e.text for e in events(adapter, request()) if isinstance(e, TextDelta)] == ["first"]
    assert [e.text for e in events(adapter, after_one) if isinstance(e, TextDelta)] == ["second"]


def test_an_error_turn_raises_after_its_text(script):
    script(sequence_script(Turn(text="half", error=LLMError("overloaded", retryable=True))))
    stream = iter(ScriptedAdapter({}, CONTEXT).stream(request()))

    assert next(stream) == TextDelta("half")
    with pytest.raises(LLMError) as caught:
        next(stream)
    assert caught.value.retryable is True


def test_closing_from_another_thread_stops_a_slow_stream_promptly(script):
    script(sequence_script(Turn(text=" ".join(["word"] * 300), delay=0.05)))
    stream = ScriptedAdapter({}, CONTEXT).stream(request())
    threading.Timer(0.2, stream.close).start()

    started = time.monotonic()
    got = list(stream)

    assert time.monotonic() - started < 0.5
    assert 0 < len(got) < 100
    assert all(isinstance(e, TextDelta) for e in got)


def test_the_factory_uses_helix_llm_and_merges_the_agents_config():
    options = {"script": "tests.agents_app.llm.test_scripted.shout", "model": "base"}
    with override_settings(HELIX={"LLM": {"BACKEND": "agents_app.llm.scripted.ScriptedAdapter",
                                          "OPTIONS": options}}):  # fmt: skip
        adapter = build_adapter(CONTEXT, {"model": "agent-model"})

    assert isinstance(adapter, ScriptedAdapter)
    assert adapter.model == "agent-model"
    assert [e.text for e in events(adapter, request()) if isinstance(e, TextDelta)] == ["HI THERE"]


def shout(request: LLMRequest, context: AdapterContext) -> Turn:
    return Turn(text=request.messages[-1].content.upper())
