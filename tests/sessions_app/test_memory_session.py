"""A session's conversation memory and the session manager, on the database store."""

import time

import pytest

from sessions_app.errors import MessageNotFound, SessionNotFound
from sessions_app.memory.compaction import CompactionProposal
from sessions_app.memory.context import ContextBlockSpec
from sessions_app.memory.manager import SessionManager
from sessions_app.memory.providers import TextProvider
from sessions_app.memory.session import ConversationMemory, MemoryConfig
from sessions_app.stores import get_session_store
from sessions_app.stores.types import NEW_ROOT, Message, MessageRole
from sessions_app.usage import get_usage_store

pytestmark = pytest.mark.django_db


def user(text: str, id: str, **fields) -> Message:
    return Message(role=MessageRole.USER, content=text, id=id, **fields)


def assistant(text: str, id: str, **fields) -> Message:
    return Message(role=MessageRole.ASSISTANT, content=text, id=id, **fields)


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def halve(history: list[Message]) -> CompactionProposal | None:
    """Summarise every message but the last two."""
    stored = [m for m in history[:-2] if not m.id.startswith("compaction_")]
    if not stored:
        return None
    return CompactionProposal(
        from_message_id=stored[0].id, to_message_id=stored[-1].id, summary="summary"
    )


def explode(history: list[Message]) -> CompactionProposal | None:
    raise RuntimeError("model down")


@pytest.fixture
def session_id() -> str:
    return get_session_store().create_session(agent_type="assistant").session_id


# Compaction after appends


def test_an_append_past_the_threshold_compacts_the_branch(session_id):
    memory = ConversationMemory(session_id, MemoryConfig(compactor=halve, compact_after=20))

    quiet = memory.append(user("short", "m1"))
    loud = memory.append_all([assistant("word " * 10, "m2"), user("more words here", "m3")])

    assert quiet.compaction is None
    assert loud.compaction is not None
    measured = memory.compact_if_needed()  # Nothing more to compact: the branch comes back.
    assert measured.compaction is None
    assert measured.history == memory.get_history()
    assert ids(memory.get_history()) == [f"compaction_{loud.compaction.compaction_id}", "m2", "m3"]
    assert memory.get_path_length() == 3


def test_the_threshold_counts_the_system_prompt(session_id):
    soul = ContextBlockSpec("soul", provider=TextProvider("x " * 40))
    memory = ConversationMemory(
        session_id, MemoryConfig(context=[soul], compactor=halve, compact_after=40)
    )
    memory.append_all([user("a", "m1"), assistant("b", "m2")])
    with_prompt = memory.estimate_tokens()

    outcome = memory.append(user("c", "m3"))

    assert with_prompt > 40 > with_prompt - 52  # The 40-word soul is 52 of the tokens.
    assert outcome.compaction is not None
    assert memory.estimate_tokens(other_prompt="y " * 40) == memory.estimate_tokens() + 52


def test_a_failed_compaction_is_reported_and_loses_nothing(session_id):
    reported = []
    memory = ConversationMemory(
        session_id,
        MemoryConfig(compactor=explode, compact_after=1),
        on_compaction_error=lambda sid, message: reported.append((sid, message)),
    )

    outcome = memory.append(user("hello there", "m1"))

    assert outcome.compaction_error == "Compaction failed: model down"
    assert reported == [(session_id, "Compaction failed: model down")]
    assert ids(memory.get_history()) == ["m1"]
    assert get_session_store().get_compactions(session_id) == []


def test_compact_after_needs_a_compactor():
    with pytest.raises(ValueError, match="compactor"):
        MemoryConfig(compact_after=10)


# Skills


class Library:
    """A skill provider of two fixed documents."""

    docs = {"guide": "How to do it, at length.", "faq": "Answers."}

    def get(self) -> str:
        return "\n".join(f"- {key}" for key in self.docs)

    def load(self, key: str) -> str | None:
        return self.docs.get(key)


def loading(memory: ConversationMemory, tool: str, call_id: str, reply_id: str, **arguments):
    """Store a context tool call and its result as the runtime does."""
    result = next(t for t in memory.tools() if t.name == tool)
    reply = result.execute(result.input_model(**arguments))
    memory.append_all(
        [
            Message(
                role=MessageRole.ASSISTANT,
                id=call_id,
                tool_calls=[{"id": call_id, "name": tool, "arguments": arguments}],
            ),
            Message(role=MessageRole.TOOL, id=reply_id, content=reply, tool_call_id=call_id),
        ]
    )
    return reply


def test_loaded_skills_are_read_back_from_the_branch_and_unloading_reclaims_them(session_id):
    config = MemoryConfig(context=[ContextBlockSpec("skills", provider=Library())])
    memory = ConversationMemory(session_id, config)
    assert loading(memory, "load_context", "c1", "r1", label="skills", key="guide") == (
        "How to do it, at length."
    )

    later = ConversationMemory(session_id, config)  # A later step, in another worker.
    assert later.context.loaded_skills() == ["skills:guide"]
    reply = loading(later, "unload_context", "c2", "r2", label="skills", key="guide")

    assert reply == 'Unloaded "guide" from skills. Context reclaimed.'
    assert later.get_message("r1").content == "[skill unloaded: guide]"
    assert ConversationMemory(session_id, config).context.loaded_skills() == []


def test_clearing_forgets_messages_skills_and_refreshes_the_prompt(session_id):
    config = MemoryConfig(context=[ContextBlockSpec("notes")])
    memory = ConversationMemory(session_id, config)
    memory.append(user("hi", "m1"))
    frozen = memory.freeze_system_prompt()
    memory.context.replace_block("notes", "Likes tea.")

    assert memory.clear() == 1

    assert memory.get_history() == []
    assert "Likes tea." not in frozen
    assert "Likes tea." in memory.freeze_system_prompt()


# The manager


@pytest.fixture
def owners(django_user_model):
    return (
        django_user_model.objects.create_user("ada", password="x"),
        django_user_model.objects.create_user("bob", password="x"),
    )


def test_the_manager_creates_lists_renames_and_deletes_its_owners_sessions(owners):
    ada, bob = owners
    manager = SessionManager(agent_type="assistant", owner_id=ada.pk)
    first = manager.create("First", model="gpt-x", source="web", metadata={"team": "a"})
    second = manager.create("Second")
    SessionManager(agent_type="assistant", owner_id=bob.pk).create("Bob's")
    time.sleep(0.002)

    manager.append(first.session_id, user("hello", "m1"))

    assert [s.session_id for s in manager.list_sessions().sessions] == [
        first.session_id,
        second.session_id,
    ]
    assert manager.get(first.session_id).model == "gpt-x"
    manager.rename(second.session_id, "Renamed")
    assert manager.get(second.session_id).name == "Renamed"
    assert manager.list_sessions(limit=1).has_more
    assert manager.delete(second.session_id)
    assert manager.get(second.session_id) is None


def test_the_manager_refuses_other_owners_sessions_as_missing(owners):
    ada, bob = owners
    theirs = SessionManager(agent_type="assistant", owner_id=bob.pk).create("Bob's")
    manager = SessionManager(agent_type="assistant", owner_id=ada.pk)

    assert manager.get(theirs.session_id) is None
    for call in (
        lambda: manager.append(theirs.session_id, user("x", "m1")),
        lambda: manager.rename(theirs.session_id, "mine"),
        lambda: manager.delete(theirs.session_id),
        lambda: manager.get_history(theirs.session_id),
        lambda: manager.fork(theirs.session_id, "m1"),
        lambda: manager.add_usage(theirs.session_id, 1, 1),
        lambda: manager.create("child", parent_session_id=theirs.session_id),
    ):
        with pytest.raises(SessionNotFound):
            call()
    assert get_session_store().get_message_count(theirs.session_id) == 0


def test_every_message_write_touches_updated_at(owners):
    manager = SessionManager(agent_type="assistant", owner_id=owners[0].pk)
    session_id = manager.create("Chat").session_id
    writes = [
        lambda: manager.append(session_id, user("one", "m1")),
        lambda: manager.append_all(session_id, [user("two", "m2"), user("three", "m3")]),
        lambda: manager.upsert(session_id, user("one, again", "m1")),
        lambda: manager.upsert(session_id, user("four", "m4")),
        lambda: manager.delete_messages(session_id, ["m2"]),
        lambda: manager.clear_messages(session_id),
    ]
    for write in writes:
        before = manager.get(session_id).updated_at
        time.sleep(0.002)
        write()
        assert manager.get(session_id).updated_at > before


def test_upsert_updates_a_stored_message_and_appends_a_new_one(owners):
    manager = SessionManager(agent_type="assistant", owner_id=owners[0].pk)
    session_id = manager.create("Chat").session_id
    manager.append(session_id, user("one", "m1"))

    updated = manager.upsert(session_id, user("one, edited", "m1"))
    appended = manager.upsert(session_id, assistant("two", "m2"))

    assert updated.updated.content == "one, edited"
    assert ids(appended.appended) == ["m2"]
    assert [m.content for m in manager.get_history(session_id)] == ["one, edited", "two"]
    assert manager.get_message_count(session_id) == 2


def test_fork_copies_the_branch_up_to_a_message_with_overlays_and_fresh_ids(owners):
    manager = SessionManager(agent_type="assistant", owner_id=owners[0].pk)
    source = manager.create("Chat", model="gpt-x").session_id
    manager.append_all(source, [user(f"message {n}", f"m{n}") for n in range(1, 6)])
    manager.append(source, assistant("other branch", "b3", parent_id="m2"))
    get_session_store().add_compaction(source, "Summary of 1..2", "m1", "m2")

    forked = manager.fork(source, "m4", "Fork")

    history = manager.get_history(forked.session_id)
    assert [m.content for m in history] == ["Summary of 1..2", "message 3", "message 4"]
    assert not {m.id for m in history} & {"m1", "m2", "m3", "m4"}
    assert history[0].parent_id is None
    assert [m.parent_id for m in history[1:]] == [m.id for m in history[:-1]]
    assert (forked.parent_session_id, forked.name, forked.model) == (source, "Fork", "gpt-x")
    with pytest.raises(MessageNotFound):
        manager.fork(source, "missing")


def test_a_fork_at_a_message_of_a_new_root_starts_from_that_root(owners):
    manager = SessionManager(agent_type="assistant", owner_id=owners[0].pk)
    source = manager.create("Chat").session_id
    manager.append_all(source, [user("old", "m1"), user("fresh", "r1", parent_id=NEW_ROOT)])

    forked = manager.fork(source, "r1")

    assert [m.content for m in manager.get_history(forked.session_id)] == ["fresh"]


def test_add_usage_records_tokens_and_cost(owners):
    manager = SessionManager(agent_type="assistant", owner_id=owners[0].pk)
    session_id = manager.create("Chat", model="gpt-x").session_id

    manager.add_usage(session_id, 100, 20, 0.5)
    manager.add_usage(session_id, 10, 2, 0.25)

    rollup = get_usage_store().get_rollup(session_id)
    assert (rollup.tokens.prompt, rollup.tokens.completion) == (110, 22)
    assert rollup.tokens_by_model["gpt-x"].total == 132
    assert rollup.custom == {"cost": {"cost": 0.75}}
    unnamed = manager.create("No model").session_id
    manager.add_usage(unnamed, 5, 1)
    assert get_usage_store().get_rollup(unnamed).tokens_by_model["unknown"].total == 6


def test_search_and_its_tool_cover_all_the_owners_sessions_only(owners):
    ada, bob = owners
    manager = SessionManager(agent_type="assistant", owner_id=ada.pk)
    other_agent = SessionManager(agent_type="planner", owner_id=ada.pk)
    manager.append(manager.create("A").session_id, user("We are deploying on Friday", "a1"))
    other_agent.append(other_agent.create("B").session_id, assistant("Deployment done", "b1"))
    bobs = SessionManager(agent_type="assistant", owner_id=bob.pk)
    bobs.append(bobs.create("C").session_id, user("deployment of bob", "c1"))

    hits = manager.search("deployment")
    (tool,) = manager.tools()

    assert sorted(hit.message_id for hit in hits) == ["a1", "b1"]
    assert tool.name == "session_search"
    assert tool.input_model.model_json_schema() == {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "Search query"}},
        "required": ["query"],
    }
    reply = tool.execute(tool.input_model(query="deploying Friday"))
    assert reply == "[user] We are deploying on Friday"
    assert tool.execute(tool.input_model(query="nothing like it")) == "No results found."
