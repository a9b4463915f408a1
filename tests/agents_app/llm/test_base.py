"""The adapter factory, tool-argument parsing and the error type every adapter raises."""

import pickle

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from agents_app.llm.base import (
    AdapterContext,
    LLMError,
    LLMRequest,
    TextDelta,
    build_adapter,
    parse_tool_arguments,
)
from agents_app.llm.openai_compat import OpenAICompatAdapter
from agents_app.llm.scripted import ScriptedAdapter, Turn
from sessions_app.stores.types import Message, MessageRole

CONTEXT = AdapterContext(session_id="s-1", agent_type="base-test", run_id="run-1")
DEEP_ARGUMENTS = '{"q": ' + "[" * 100_000 + "]" * 100_000 + "}"  # A model gone astray.
received: list[tuple[dict, AdapterContext]] = []


def recording_factory(options: dict, context: AdapterContext) -> ScriptedAdapter:
    """A factory backend: records what it was given, then builds a scripted adapter."""
    received.append((options, context))
    return ScriptedAdapter(options, context)


def reply_with_options(request: LLMRequest, context: AdapterContext) -> Turn:
    return Turn(text=f"{request.model} for {context.agent_type}")


@override_settings(HELIX={})
def test_without_helix_llm_the_factory_builds_the_offline_scripted_adapter():
    assert isinstance(build_adapter(CONTEXT), ScriptedAdapter)


def test_the_factory_calls_the_configured_backend_with_options_under_the_agents_config():
    received.clear()
    helix = {
        "LLM": {
            "BACKEND": "tests.agents_app.llm.test_base.recording_factory",
            "OPTIONS": {"model": "base-model", "temperature": 0.1, "seed": 7},
        }
    }
    with override_settings(HELIX=helix):
        build_adapter(CONTEXT, {"model": "agent-model", "temperature": 0.9})

    assert received == [
        ({"model": "agent-model", "temperature": 0.9, "seed": 7}, CONTEXT),
    ]


def test_the_factory_reads_the_setting_when_called_not_once():
    with override_settings(HELIX={"LLM": {"OPTIONS": {"model": "first"}}}):
        first = build_adapter(CONTEXT)
    openai_compat = {
        "BACKEND": "agents_app.llm.openai_compat.OpenAICompatAdapter",
        "OPTIONS": {"base_url": "http://127.0.0.1:9/v1"},
    }
    with override_settings(HELIX={"LLM": openai_compat}):
        second = build_adapter(CONTEXT)

    assert isinstance(first, ScriptedAdapter)
    assert first.model == "first"
    assert isinstance(second, OpenAICompatAdapter)


def test_a_backend_that_cannot_be_imported_is_a_configuration_error():
    with (
        override_settings(HELIX={"LLM": {"BACKEND": "agents_app.llm.nowhere.Adapter"}}),
        pytest.raises(ImproperlyConfigured, match="nowhere"),
    ):
        build_adapter(CONTEXT)


def test_the_agents_config_reaches_the_script_through_the_factory():
    script = "tests.agents_app.llm.test_base.reply_with_options"
    with override_settings(HELIX={"LLM": {"OPTIONS": {"script": script}}}):
        adapter = build_adapter(CONTEXT)
    request = LLMRequest("", [Message(role=MessageRole.USER, content="hi")], model="agent-model")

    text = "".join(e.text for e in adapter.stream(request) if isinstance(e, TextDelta))

    assert text == "agent-model for base-test"


@pytest.mark.parametrize(
    ("raw", "arguments", "invalid"),
    [
        ('{"q": "x", "n": 2}', {"q": "x", "n": 2}, False),
        ("", {}, False),
        ("  ", {}, False),
        ('{"q": "x"', {"_raw": '{"q": "x"'}, True),
        ("[1, 2]", {"_raw": "[1, 2]"}, True),
        ('"text"', {"_raw": '"text"'}, True),
        ('{"n": NaN}', {"_raw": '{"n": NaN}'}, True),
        ('{"n": 1e400}', {"_raw": '{"n": 1e400}'}, True),
        (DEEP_ARGUMENTS, {"_raw": DEEP_ARGUMENTS}, True),
    ],
    ids=["object", "empty", "blank", "truncated", "array", "string", "nan", "huge", "deep"],
)
def test_tool_arguments_parse_to_an_object_or_are_flagged_invalid(raw, arguments, invalid):
    assert parse_tool_arguments(raw) == (arguments, invalid)


def test_an_llm_error_survives_pickling_with_its_flags():
    error = LLMError("slow down", retryable=True, status_code=429)

    copy = pickle.loads(pickle.dumps(error))

    assert (str(copy), copy.retryable, copy.status_code) == ("slow down", True, 429)
