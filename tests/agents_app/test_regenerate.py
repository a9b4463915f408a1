"""Regenerating a reply: a new run answers the last user message again, on a branch."""

import pytest

from agents_app.errors import InvalidResume
from agents_app.runs import services
from agents_app.selectors import agent_snapshot
from sessions_app.stores import get_session_store
from tests.agents_app.chat_requests import post_chat
from tests.agents_app.runs import finished

pytestmark = pytest.mark.django_db(transaction=True)


def talk(owner, message: str) -> None:
    services.agent_start(user=owner, agent_type="recounter", session_id="s-1", message=message)
    finished("s-1")


def contents(messages) -> list[str]:
    return [message.content for message in messages]


def test_a_regenerated_reply_branches_from_the_user_message(worker, owner):
    talk(owner, "Hi")
    talk(owner, "Again")
    store = get_session_store()
    before = store.get_history("s-1")

    services.agent_regenerate(user=owner, session_id="s-1")
    finished("s-1")

    history = store.get_history("s-1")
    asked = history[2]
    assert contents(before) == ["Hi", "Seen 1 messages", "Again", "Seen 3 messages"]
    assert contents(history) == ["Hi", "Seen 1 messages", "Again", "Seen 3 messages"]
    assert history[3].id != before[3].id  # A new reply: the model saw three messages, not four.
    assert [m.id for m in store.get_branches("s-1", asked.id)] == [before[3].id, history[3].id]
    assert store.get_message_count("s-1") == 5
    drawn = agent_snapshot(user=owner, session_id="s-1").messages  # The client draws the branch.
    assert [m["id"] for m in drawn] == [m.id for m in history]
    talk(owner, "More")
    assert contents(store.get_history("s-1"))[-2:] == ["More", "Seen 5 messages"]


def test_regenerating_needs_a_user_message(owner):
    get_session_store().create_session("s-1", agent_type="recounter", owner_id=owner.pk)

    with pytest.raises(InvalidResume):
        services.agent_regenerate(user=owner, session_id="s-1")


def test_the_chat_regenerates_with_the_ai_sdks_trigger(worker, owner):
    talk(owner, "Hi")

    status, _, parts = post_chat(
        owner, {"id": "s-1", "trigger": "regenerate-message", "messages": []}
    )

    assert status == 200
    text = "".join(p["delta"] for p in parts if isinstance(p, dict) and p["type"] == "text-delta")
    assert text == "Seen 1 messages"
    first = get_session_store().get_history("s-1")[0]
    assert len(get_session_store().get_branches("s-1", first.id)) == 2
