"""Compaction: boundaries that keep tool calls whole, summaries, overlays per branch."""

import pytest

from sessions_app.memory import compaction
from sessions_app.memory.compaction import compact, summarizing_compactor
from sessions_app.memory.tokens import estimate_message_tokens, estimate_string_tokens
from sessions_app.stores.types import Message, MessageRole


def user(text: str, id: str, **fields) -> Message:
    return Message(role=MessageRole.USER, content=text, id=id, **fields)


def assistant(text: str, id: str, **fields) -> Message:
    return Message(role=MessageRole.ASSISTANT, content=text, id=id, **fields)


def calling(id: str, *call_ids: str) -> Message:
    calls = [{"id": c, "name": "lookup", "arguments": {"q": c}} for c in call_ids]
    return Message(role=MessageRole.ASSISTANT, id=id, tool_calls=calls)


def result(id: str, call_id: str) -> Message:
    return Message(role=MessageRole.TOOL, content="found", id=id, tool_call_id=call_id)


def ids(messages) -> list[str]:
    return [m.id for m in messages]


class Summarizer:
    """Records each prompt; answers with a fixed summary."""

    def __init__(self, summary: str = "## Topic\nTrips") -> None:
        self.summary = summary
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.summary


# Token estimates


def test_a_string_counts_the_larger_of_characters_over_four_and_words_times_1_3():
    assert estimate_string_tokens("") == 0
    assert estimate_string_tokens("a b c d e f g h i j") == 13  # 10 words * 1.3 > 19 / 4
    assert estimate_string_tokens("x" * 41) == 11  # ceil(41 / 4) > 1.3


def test_a_message_counts_framing_text_tool_arguments_and_tool_parts():
    plain = Message(role=MessageRole.USER, content="hello there")
    parts_only = Message(role=MessageRole.USER, parts=[{"type": "text", "text": "hello there"}])
    both = Message(
        role=MessageRole.USER, content="hello there", parts=[{"type": "text", "text": "hello"}]
    )
    tool_part = Message(
        role=MessageRole.ASSISTANT,
        parts=[{"type": "tool-lookup", "toolCallId": "c1", "input": {"q": 1}, "output": "ok"}],
    )

    assert estimate_message_tokens([plain]) == 4 + 3
    assert estimate_message_tokens([parts_only]) == 4 + 3
    assert estimate_message_tokens([both]) == 4 + 3
    assert estimate_message_tokens([tool_part]) == 4 + estimate_string_tokens('{"q":1}') + 2
    assert estimate_message_tokens([calling("a", "c1")]) == 4 + estimate_string_tokens('{"q":"c1"}')


def test_a_configured_token_counter_replaces_the_estimate(settings):
    settings.HELIX = {"TOKEN_COUNTER": "tests.sessions_app.test_memory_compaction.count_ten"}

    assert compaction.message_token_counter()([user("x", "m1")]) == 10


def count_ten(messages) -> int:
    return 10 * len(list(messages))


# Boundaries


def test_boundaries_never_split_a_tool_call_from_its_results():
    history = [
        user("q", "m1"),
        calling("m2", "c1", "c2"),
        result("m3", "c1"),
        result("m4", "c2"),
        assistant("a", "m5"),
    ]

    assert compaction.align_forward(history, 3) == 4
    assert compaction.align_forward(history, 2) == 4
    assert compaction.align_forward(history, 1) == 1
    assert compaction.align_backward(history, 3) == 1
    assert compaction.align_backward(history, 2) == 1
    assert compaction.align_backward(history, 4) == 4


def test_the_tail_keeps_its_token_budget_and_at_least_min_messages():
    history = [user("word " * 40, f"m{n}") for n in range(10)]  # 56 tokens each
    counter = estimate_message_tokens

    assert compaction.tail_start(history, 3, counter, budget=120, min_messages=2) == 8
    assert compaction.tail_start(history, 3, counter, budget=200, min_messages=2) == 7
    assert compaction.tail_start(history, 3, counter, budget=10, min_messages=4) == 6


def test_the_compactor_summarises_the_middle_with_the_four_sections():
    history = [user(f"message {n}", f"m{n}") for n in range(1, 9)]
    summarize = Summarizer()

    proposal = summarizing_compactor(summarize, protect_head=2, tail_token_budget=10)(history)

    assert (proposal.from_message_id, proposal.to_message_id) == ("m3", "m6")
    assert proposal.summary == "## Topic\nTrips"
    (prompt,) = summarize.prompts
    assert "CONVERSATION TO SUMMARIZE:\n[user]\nmessage 3\n\n---\n\n[user]\nmessage 4" in prompt
    for section in ("## Topic", "## Key Points", "## Current State", "## Open Items"):
        assert section in prompt
    assert "message 2" not in prompt
    assert "message 7" not in prompt
    assert "Target ~100 tokens." in prompt


def test_the_compactor_keeps_a_tool_call_group_out_of_the_range_it_would_split():
    history = [
        user("q", "m1"),
        assistant("thinking", "m2"),
        calling("m3", "c1"),
        result("m4", "c1"),
        assistant("a", "m5"),
        user("q2", "m6"),
        calling("m7", "c2"),
        result("m8", "c2"),
    ]

    proposal = summarizing_compactor(
        Summarizer(), protect_head=3, tail_token_budget=0, min_tail_messages=1
    )(history)

    assert (proposal.from_message_id, proposal.to_message_id) == ("m5", "m6")


def test_a_short_history_or_an_empty_summary_proposes_nothing():
    history = [user(f"m{n}", f"m{n}") for n in range(5)]

    assert summarizing_compactor(Summarizer())(history) is None
    assert (
        summarizing_compactor(Summarizer("  "), protect_head=1, tail_token_budget=0)(history)
        is None
    )


# Overlays in the store


@pytest.fixture
def chat(store, session_id):
    store.append_messages(session_id, [user(f"message {n}", f"m{n}") for n in range(1, 9)])
    return store, session_id


def test_compact_stores_an_overlay_the_history_shows_and_keeps_originals(chat):
    store, session_id = chat

    overlay = compact(store, session_id, summarizing_compactor(Summarizer(), tail_token_budget=10))

    assert (overlay.from_message_id, overlay.to_message_id) == ("m4", "m6")
    assert ids(store.get_history(session_id)) == [
        "m1",
        "m2",
        "m3",
        f"compaction_{overlay.compaction_id}",
        "m7",
        "m8",
    ]
    assert len(store.get_path(session_id)) == 8


def test_a_second_compaction_updates_the_summary_from_where_the_first_began(chat):
    store, session_id = chat
    first = compact(
        store, session_id, summarizing_compactor(Summarizer("first"), tail_token_budget=10)
    )
    store.append_messages(session_id, [user(f"message {n}", f"m{n}") for n in range(9, 13)])
    summarize = Summarizer("second")

    second = compact(store, session_id, summarizing_compactor(summarize, tail_token_budget=10))

    assert (second.from_message_id, second.to_message_id) == (first.from_message_id, "m10")
    assert "PREVIOUS SUMMARY:\nfirst" in summarize.prompts[0]
    assert "[user]\nmessage 8" in summarize.prompts[0]
    history = store.get_history(session_id)
    assert ids(history) == ["m1", "m2", "m3", f"compaction_{second.compaction_id}", "m11", "m12"]
    assert history[3].content == "second"


def test_a_compaction_of_one_branch_leaves_the_other_whole(chat):
    store, session_id = chat
    store.append_messages(session_id, [assistant("elsewhere", "b5", parent_id="m4")])

    overlay = compact(
        store, session_id, summarizing_compactor(Summarizer(), tail_token_budget=10), "m8"
    )

    assert f"compaction_{overlay.compaction_id}" in ids(store.get_history(session_id, "m8"))
    assert ids(store.get_history(session_id)) == ["m1", "m2", "m3", "m4", "b5"]


def test_a_failing_summariser_writes_nothing(chat):
    store, session_id = chat

    def broken(prompt: str) -> str:
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError):
        compact(store, session_id, summarizing_compactor(broken, tail_token_budget=10))
    assert store.get_compactions(session_id) == []
