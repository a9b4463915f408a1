"""The offline scripted adapter: deltas, tool calls, steps, usage, errors, closing, scripts."""

import threading
import time

import pytest
from django.core.exceptions import ImproperlyConfigured

from agents_app.llm.base import (
    AdapterContext,
    Finish,
    LLMError,
    LLMRequest,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    Usage,
)
from agents_app.llm.scripted import (
    ScriptedAdapter,
    ScriptedToolCall,
    Turn,
    register_script,
    script_for,
    sequence_script,
    unregister_script,
    word_pieces,
)
from sessions_app.stores.types import Message, MessageRole

CONTEXT = AdapterContext(session_id="s-1", agent_type="scripted-test", run_id="run-123456789abc")


def request(*messages: Message, system: str = "Be brief.", model: str | None = None):
    return LLMRequest(system, list(messages) or [user("hi there")], model=model)


def user(text: str) -> Message:
    return Message(role=MessageRole.USER, content=text)


def assistant(text: str = "", **fields) -> Message:
    return Message(role=MessageRole.ASSISTANT, content=text, **fields)


def tool(content: str) -> Message:
    return Message(role=MessageRole.TOOL, content=content, tool_call_id="c", name="t")


def play(turn: Turn, req: LLMRequest | None = None, **options) -> list:
    adapter = ScriptedAdapter({"script": lambda request, context: turn, **options}, CONTEXT)
    return list(adapter.stream(req or request()))


def texts(events: list) -> list[str]:
    return [e.text for e in events if isinstance(e, TextDelta)]


@pytest.fixture
def script():
    """Register a script for the test agent type; forget it afterwards."""

    def register(fn):
        register_script(CONTEXT.agent_type, fn)
        return fn

    yield register
    unregister_script(CONTEXT.agent_type)


def test_without_a_script_the_model_echoes_the_last_user_message():
    got = list(ScriptedAdapter({}, CONTEXT).stream(request(user("first"), user("ping pong"))))

    assert "".join(texts(got)) == "You said: ping pong"
    assert [type(e) for e in got[-2:]] == [Usage, Finish]
    assert got[-1] == Finish("stop")
    assert not any(isinstance(e, ToolCall) for e in got)


@pytest.mark.parametrize(
    "text",
    ["one two three four five", "  lead\nand  double  spaces\ttabs trail  ", "single", "   "],
)
def test_text_streams_in_deltas_of_a_few_words_that_concatenate_to_it(text):
    deltas = texts(play(Turn(text=text)))

    assert "".join(deltas) == text
    assert all(len(delta.split()) <= 3 for delta in deltas)
    assert len(deltas) == max(1, -(-len(text.split()) // 3))


def test_text_is_split_on_word_boundaries():
    assert word_pieces("one two three four five") == ["one two three", " four five"]
    assert word_pieces("") == []


def test_reasoning_streams_before_the_text():
    got = play(Turn(reasoning="think about it", text="answer"))

    assert got[:2] == [ReasoningDelta("think about it"), TextDelta("answer")]


def test_tool_calls_follow_the_text_with_ids_stable_across_runs_of_the_step():
    turn = Turn(
        text="Looking.",
        tool_calls=[
            ScriptedToolCall(name="search", arguments={"q": "x"}),
            ScriptedToolCall(name="fetch", arguments={"url": "u"}, id="mine"),
        ],
    )

    first, again = play(turn), play(turn)

    calls = [e for e in first if isinstance(e, ToolCall)]
    assert calls == [
        ToolCall("call_run-12345678_0_0", "search", {"q": "x"}),
        ToolCall("mine", "fetch", {"url": "u"}),
    ]
    assert [e for e in again if isinstance(e, ToolCall)] == calls
    assert [type(e) for e in first] == [TextDelta, ToolCall, ToolCall, Usage, Finish]
    assert first[-1] == Finish("tool_calls")


def test_tool_call_ids_differ_by_step_and_run():
    turn = Turn(tool_calls=[ScriptedToolCall(name="search")])
    later = request(user("go"), assistant("x"), tool("{}"))
    other_run = AdapterContext("s-1", CONTEXT.agent_type, "run-other000000")

    at_step_one = [e.id for e in play(turn, later) if isinstance(e, ToolCall)]
    elsewhere = ScriptedAdapter({"script": lambda r, c: turn}, other_run).stream(request())

    assert at_step_one == ["call_run-12345678_1_0"]
    assert [e.id for e in elsewhere if isinstance(e, ToolCall)] == ["call_run-other000_0_0"]


def test_string_arguments_are_parsed_like_a_models_and_flagged_when_invalid():
    turn = Turn(
        tool_calls=[
            ScriptedToolCall(name="good", arguments='{"a": 1}'),
            ScriptedToolCall(name="bad", arguments='{"a": '),
        ]
    )

    calls = [e for e in play(turn) if isinstance(e, ToolCall)]

    assert [(c.arguments, c.invalid_arguments) for c in calls] == [
        ({"a": 1}, False),
        ({"_raw": '{"a": '}, True),
    ]


def test_a_sequence_script_plays_turn_i_at_step_i_of_the_turn(script):
    script(sequence_script(Turn(text="first"), Turn(text="second"), Turn(text="third")))
    adapter = ScriptedAdapter({}, CONTEXT)
    steps = [
        request(user("go")),
        request(user("go"), assistant("first"), tool("{}")),
        request(user("go"), assistant("first"), tool("{}"), assistant("second")),
        request(user("go"), *[assistant("x")] * 5),
        # A new user message starts a new turn: step 0 again.
        request(user("go"), assistant("first"), assistant("second"), user("again")),
    ]

    assert [texts(list(adapter.stream(r))) for r in steps] == [
        ["first"],
        ["second"],
        ["third"],
        ["third"],
        ["first"],
    ]


def test_usage_counts_words_with_the_model_from_options_or_request():
    req = request(
        user("one two three"),
        assistant("four", tool_calls=[{"id": "c", "name": "t", "arguments": {"k": "v"}}]),
        system="sys tem",
    )
    turn = Turn(text="a b c d", reasoning="r s", tool_calls=[ScriptedToolCall(name="t")])

    usage = next(e for e in play(turn, req, model="tiny") if isinstance(e, Usage))
    by_request = next(e for e in play(turn, request(model="big")) if isinstance(e, Usage))

    # Prompt: 2 system + 3 user + 1 assistant + 7 in the JSON of its tool calls.
    # Completion: 4 text + 2 reasoning + 1 for the call's "{}" arguments.
    assert usage == Usage(
        model="tiny",
        prompt_tokens=13,
        completion_tokens=7,
        reasoning_tokens=2,
        cached_tokens=0,
        total_tokens=20,
    )
    assert by_request.model == "big"


def test_a_turn_can_set_its_usage_and_finish_reason():
    fixed = Usage(model="m", prompt_tokens=1, completion_tokens=2, total_tokens=3)

    got = play(Turn(text="cut", usage=fixed, finish="length"))

    assert got[-2:] == [fixed, Finish("length")]


def test_the_default_model_name_is_scripted():
    usage = next(e for e in play(Turn(text="x")) if isinstance(e, Usage))

    assert usage.model == "scripted"


def test_an_error_turn_raises_after_its_text_by_default():
    turn = Turn(text="half", error=LLMError("overloaded", retryable=True))
    stream = iter(ScriptedAdapter({"script": lambda r, c: turn}, CONTEXT).stream(request()))

    assert next(stream) == TextDelta("half")
    with pytest.raises(LLMError, match="overloaded") as caught:
        next(stream)
    assert caught.value.retryable is True


@pytest.mark.parametrize(("error_after", "before"), [(0, []), (1, ["a b c"]), (9, ["a b c", " d"])])
def test_an_error_turn_can_raise_before_or_between_its_deltas(error_after, before):
    turn = Turn(
        text="a b c d",
        tool_calls=[ScriptedToolCall(name="never")],
        error=LLMError("bad request", retryable=False),
        error_after=error_after,
    )
    got: list = []

    with pytest.raises(LLMError) as caught:
        got.extend(ScriptedAdapter({"script": lambda r, c: turn}, CONTEXT).stream(request()))

    assert texts(got) == before
    assert not any(isinstance(e, ToolCall) for e in got)
    assert caught.value.retryable is False


def test_an_error_turn_raises_every_time_it_is_played():
    turn = Turn(error=LLMError("overloaded", retryable=True))

    for _ in range(3):
        with pytest.raises(LLMError):
            play(turn)


def test_closing_from_another_thread_stops_a_slow_stream_within_one_delay():
    stream = ScriptedAdapter(
        {"script": lambda r, c: Turn(text=" ".join(["word"] * 300), delay=0.05)}, CONTEXT
    ).stream(request())
    threading.Timer(0.2, stream.close).start()

    started = time.monotonic()
    got = list(stream)

    assert time.monotonic() - started < 0.3
    assert 0 < len(got) < 10
    assert all(isinstance(e, TextDelta) for e in got)


def test_deltas_are_due_on_the_turns_own_clock_so_a_late_reader_finds_them_waiting():
    text = " ".join(["word"] * 45)
    stream = ScriptedAdapter({"script": lambda r, c: Turn(text=text, delay=0.02)}, CONTEXT).stream(
        request()
    )
    due = len(word_pieces(text)) * 0.02

    started = time.monotonic()
    arrived = []
    for event in stream:
        if isinstance(event, TextDelta):
            arrived.append(time.monotonic() - started)
            if len(arrived) == 2:
                time.sleep(0.2)  # The reader falls ten deltas behind.

    assert arrived[0] >= 0.02  # None comes before it is due,
    assert arrived[-1] >= due
    assert arrived[-1] < due + 0.15  # and the reply takes no longer for the reader's absence.


def test_a_stream_closed_before_iteration_yields_nothing_and_runs_no_script():
    calls = []
    adapter = ScriptedAdapter(
        {"script": lambda r, c: calls.append(r) or Turn(text="hello")}, CONTEXT
    )
    stream = adapter.stream(request())

    stream.close()

    assert list(stream) == []
    assert calls == []


def test_closing_after_the_text_drops_the_tool_calls():
    turn = Turn(text="one", tool_calls=[ScriptedToolCall(name="t")])
    stream = ScriptedAdapter({"script": lambda r, c: turn}, CONTEXT).stream(request())
    got = []

    for event in stream:
        got.append(event)
        stream.close()

    assert got == [TextDelta("one")]


def test_the_registry_registers_finds_and_forgets_scripts(script):
    def answer(request, context):
        return Turn(text=f"registered for {context.agent_type}")

    assert script_for(CONTEXT.agent_type) is None
    script(answer)

    assert script_for(CONTEXT.agent_type) is answer
    assert texts(list(ScriptedAdapter({}, CONTEXT).stream(request()))) == [
        "registered for scripted-test"
    ]
    unregister_script(CONTEXT.agent_type)
    assert script_for(CONTEXT.agent_type) is None
    unregister_script(CONTEXT.agent_type)  # Forgetting twice is fine.


def test_a_script_named_in_the_options_wins_over_the_registry(script):
    script(lambda r, c: Turn(text="registered"))
    named = "tests.agents_app.llm.test_scripted.shout"

    by_path = ScriptedAdapter({"script": named}, CONTEXT)
    by_function = ScriptedAdapter({"script": shout}, CONTEXT)

    assert texts(list(by_path.stream(request()))) == ["HI THERE"]
    assert texts(list(by_function.stream(request()))) == ["HI THERE"]


def test_a_script_path_that_cannot_be_imported_is_a_configuration_error():
    with pytest.raises(ImproperlyConfigured, match="no_such_script"):
        ScriptedAdapter({"script": "tests.agents_app.llm.test_scripted.no_such_script"}, CONTEXT)


def shout(request: LLMRequest, context: AdapterContext) -> Turn:
    return Turn(text=request.messages[-1].content.upper())
