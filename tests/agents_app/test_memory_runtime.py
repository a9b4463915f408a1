"""Conversation memory in real runs: context tools, the frozen prompt, compaction on a worker."""

import pytest

from agents_app.memory.session import memory_of
from agents_app.runs import services
from sessions_app.stores import get_session_store
from sessions_app.stores.types import MessageRole
from streams_app.backends import get_stream_manager
from tests.agents_app.runs import finished

pytestmark = pytest.mark.django_db(transaction=True)


def talk(owner, agent_type: str, message: str, session_id: str = "s-1") -> str:
    """Run one turn; return the reply's text."""
    services.agent_start(user=owner, agent_type=agent_type, session_id=session_id, message=message)
    finished(session_id)
    return get_session_store().get_history(session_id)[-1].content


def test_set_context_writes_the_block_and_the_next_prompt_shows_it_after_refresh(
    worker,
    owner,
):
    talk(owner, "memorizer", "Remember: User likes coffee.")
    store = get_session_store()
    memory = memory_of(store.load_state("s-1"))

    tool_reply = next(m for m in store.get_history("s-1") if m.role == MessageRole.TOOL)
    assert tool_reply.content == "Written to memory. Usage: 0% (5/1100 tokens)"
    assert memory.context.get_block("memory").content == "User likes coffee."

    frozen = talk(owner, "memorizer", "What do I like?")
    assert frozen.startswith("Prompt: You remember.\n\n" + "═" * 46 + "\nMEMORY (Learned facts)")
    assert "User likes coffee." not in frozen

    memory.refresh_system_prompt()
    refreshed = talk(owner, "memorizer", "And now?")

    assert refreshed == (
        "Prompt: You remember.\n\n"
        + "═" * 46
        + "\nMEMORY (Learned facts) [0% — 5/1100 tokens] [writable]\n"
        + "═" * 46
        + "\nUser likes coffee."
    )


def test_a_long_branch_is_compacted_when_a_step_begins_past_the_threshold(
    worker,
    owner,
):
    first = talk(owner, "memorizer", "word " * 150)
    second = talk(owner, "memorizer", "more " * 150)  # Past 400 tokens: the first is summarised.

    third = talk(owner, "memorizer", "Short question?")

    store = get_session_store()
    (compaction,) = store.get_compactions("s-1")
    path = store.get_path("s-1")
    history = store.get_history("s-1")
    assert compaction.from_message_id == compaction.to_message_id == path[0].id
    assert history[0].id == f"compaction_{compaction.compaction_id}"
    assert history[0].content == "## Topic\nWhat the user told me.\ufffd"
    assert [m.content for m in history[1:]] == [
        first,
        "more " * 150,
        second,
        "Short question?",
        third,
    ]
    assert len(path) == 6


def test_a_failed_compaction_is_streamed_as_an_error_and_the_run_goes_on(
    worker,
    owner,
):
    talk(owner, "forgetful", "Hello")

    reply = talk(owner, "forgetful", "Hello again")

    state = get_session_store().load_state("s-1")
    errors = [
        c.chunk
        for c in get_stream_manager().get_all_chunks(state.stream_id)
        if c.chunk["type"] == "error"
    ]
    assert reply == "Seen 3 messages"
    assert errors
    assert errors[-1]["code"] == "compaction-failed"
    assert errors[-1]["recoverable"] is True
    assert "summaries are down" in errors[-1]["error"]
    assert get_session_store().get_compactions("s-1") == []
