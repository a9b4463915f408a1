"""Context blocks, providers, the frozen system prompt and the context tools (reference 002).

Runs on the configured database: SQLite, or PostgreSQL with DATABASE_URL (`.ci/run` runs both);
every expectation, search results included, is the same on both.
"""

import re

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, InMemoryStorage
from pydantic import ValidationError

from sessions_app.errors import SessionNotFound
from sessions_app.memory.context import ContextBlockSpec, SessionContext, render_system_prompt
from sessions_app.memory.errors import (
    ContextBlockConfigured,
    ContextBlockExists,
    ContextBlockKeyed,
    ContextBlockNotFound,
    ContextBlockReadonly,
    ContextBlockTooLarge,
    ContextBlockUnsupported,
    InvalidContextBlock,
    InvalidSkillKey,
)
from sessions_app.memory.keys import context_entry_key
from sessions_app.memory.providers import (
    DatabaseContextProvider,
    DatabaseSearchProvider,
    StorageSkillProvider,
)
from sessions_app.memory.tools import context_tools
from sessions_app.models import ContextBlock, ContextEntry, SystemPrompt
from sessions_app.stores import get_session_store

SEP = "═" * 46


class Static:
    """A read-only provider."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    def get(self) -> str | None:
        return self.text


class Skills:
    """A skill provider in memory; read-only unless `writable`."""

    def __init__(self, skills: dict[str, str], *, writable: bool = True) -> None:
        self.skills = dict(skills)
        self.descriptions: dict[str, str | None] = {}
        if writable:
            self.set = self._set

    def get(self) -> str | None:
        return "\n".join(f"- {key}" for key in sorted(self.skills)) or None

    def load(self, key: str) -> str | None:
        return self.skills.get(key)

    def _set(self, key: str, content: str, description: str | None = None) -> None:
        self.skills[key] = content
        self.descriptions[key] = description


class Finder:
    """A search provider without writes."""

    def get(self) -> str | None:
        return "Docs."

    def search(self, query: str) -> str | None:
        return f"[doc]\nabout {query}"


def new_session() -> str:
    return get_session_store().create_session(agent_type="assistant").session_id


@pytest.fixture
def session_id(db) -> str:
    return new_session()


def memory_spec(**fields) -> ContextBlockSpec:
    return ContextBlockSpec("memory", description="Learned facts", max_tokens=1100, **fields)


def tool(context: SessionContext, name: str):
    return {t.name: t for t in context_tools(context)}[name]


def call(context: SessionContext, name: str, **arguments) -> str:
    found = tool(context, name)
    return found.execute(found.input_model.model_validate(arguments))


# The system prompt


def test_the_prompt_frames_each_block_with_its_header_and_kind(session_id):
    DatabaseContextProvider(session_id, "memory").set("x" * 1980)  # 495 tokens
    DatabaseContextProvider(session_id, "scratch").set("abcdefghijklmnopqrst")  # 5 tokens
    context = SessionContext(
        session_id,
        [
            ContextBlockSpec("soul", description="Identity", provider=Static("You are helpful.")),
            ContextBlockSpec("empty", provider=Static(None)),
            memory_spec(),
            ContextBlockSpec("scratch", max_tokens=200),
            ContextBlockSpec("notes"),
            ContextBlockSpec("skills", provider=Skills({"review": "Review well."})),
            ContextBlockSpec("knowledge", provider=DatabaseSearchProvider),
        ],
    )

    assert context.freeze_system_prompt() == (
        f"{SEP}\nSOUL (Identity) [readonly]\n{SEP}\nYou are helpful.\n\n"
        f"{SEP}\nMEMORY (Learned facts) [45% — 495/1100 tokens] [writable]\n{SEP}\n{'x' * 1980}\n\n"
        f"{SEP}\nSCRATCH [3% — 5/200 tokens] [writable]\n{SEP}\nabcdefghijklmnopqrst\n\n"
        f"{SEP}\nNOTES [writable]\n{SEP}\n\n\n"
        f"{SEP}\nSKILLS [loadable]\n{SEP}\n- review\n\n"
        f"{SEP}\nKNOWLEDGE [searchable]\n{SEP}\n"
    )


def test_a_block_both_skill_and_searchable_is_tagged_searchable(session_id):
    class Both(Skills, Finder):
        pass

    context = SessionContext(session_id, [ContextBlockSpec("docs", provider=Both({}))])

    assert render_system_prompt(context.get_blocks()) == f"{SEP}\nDOCS [searchable]\n{SEP}\n"


def test_the_frozen_prompt_ignores_block_writes_until_it_is_refreshed(session_id):
    context = SessionContext(session_id, [memory_spec()])
    frozen = context.freeze_system_prompt()

    context.replace_block("memory", "User likes coffee.")

    assert context.freeze_system_prompt() == frozen
    assert context.system_prompt_for_estimate() == frozen
    assert SessionContext(session_id, [memory_spec()]).freeze_system_prompt() == frozen
    refreshed = context.refresh_system_prompt()
    assert refreshed.endswith("[writable]\n" + SEP + "\nUser likes coffee.")
    assert refreshed != frozen
    assert SessionContext(session_id, [memory_spec()]).freeze_system_prompt() == refreshed


def test_refresh_rereads_every_provider(session_id):
    soul = Static("v1")
    context = SessionContext(session_id, [ContextBlockSpec("soul", provider=soul)])
    context.freeze_system_prompt()

    soul.text = "v2"

    assert context.freeze_system_prompt().endswith("v1")
    assert context.refresh_system_prompt().endswith("v2")
    assert context.get_block("soul").content == "v2"


def test_the_estimate_prompt_renders_the_current_blocks_without_storing_them(session_id):
    context = SessionContext(session_id, [memory_spec()])
    context.replace_block("memory", "Prefers tea.")

    assert context.system_prompt_for_estimate().endswith("Prefers tea.")
    assert not SystemPrompt.objects.filter(session_id=session_id).exists()


def test_each_session_has_its_own_prompt_and_blocks(session_id):
    other = new_session()
    SessionContext(session_id, [memory_spec()]).replace_block("memory", "Mine.")

    assert SessionContext(other, [memory_spec()]).get_block("memory").content == ""
    assert SessionContext(other, [memory_spec()]).freeze_system_prompt().endswith(f"{SEP}\n")


def test_deleting_a_session_deletes_its_blocks_entries_and_prompt(session_id):
    context = SessionContext(session_id, [memory_spec()])
    context.replace_block("memory", "Likes tea.")
    context.add_block(ContextBlockSpec("extra"))
    DatabaseSearchProvider(session_id, "knowledge").set("tea", "Green tea.")
    context.freeze_system_prompt()

    get_session_store().delete_session(session_id)

    assert not ContextBlock.objects.filter(session_id=session_id).exists()
    assert not ContextEntry.objects.filter(session_id=session_id).exists()
    assert not SystemPrompt.objects.filter(session_id=session_id).exists()


def test_a_missing_session_has_no_context(db):
    with pytest.raises(SessionNotFound):
        SessionContext("no-such-session", [memory_spec()]).get_blocks()


# Providers and blocks


def test_a_providers_methods_decide_the_blocks_kind(session_id):
    context = SessionContext(
        session_id,
        [
            ContextBlockSpec("soul", provider=Static("Be kind.")),
            ContextBlockSpec("memory"),
            ContextBlockSpec("skills", provider=Skills({"a": "A"})),
            ContextBlockSpec("manuals", provider=Skills({"b": "B"}, writable=False)),
            ContextBlockSpec("knowledge", provider=DatabaseSearchProvider),
            ContextBlockSpec("docs", provider=Finder()),
        ],
    )

    kinds = {b.label: (b.writable, b.is_skill, b.is_searchable) for b in context.get_blocks()}
    assert kinds == {
        "soul": (False, False, False),
        "memory": (True, False, False),
        "skills": (True, True, False),
        "manuals": (False, True, False),
        "knowledge": (True, False, True),
        "docs": (False, False, True),
    }
    assert context.get_block("soul").to_wire() == {
        "label": "soul",
        "description": "",
        "content": "Be kind.",
        "tokens": 3,
        "maxTokens": None,
        "writable": False,
        "isSkill": False,
        "isSearchable": False,
    }
    assert context.get_block("nope") is None


def test_a_factory_makes_a_provider_per_session_and_label(session_id):
    made = []

    def factory(sid: str, label: str) -> Static:
        made.append((sid, label))
        return Static(f"{label} of {sid}")

    context = SessionContext(session_id, [ContextBlockSpec("about", provider=factory)])

    assert context.get_block("about").content == f"about of {session_id}"
    assert made == [(session_id, "about")]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"label": ""}, "not valid"),
        ({"label": "has space"}, "not valid"),
        ({"label": "a:b"}, "not valid"),
        ({"label": "m", "max_tokens": 0}, "maxTokens must be a positive integer"),
        ({"label": "m", "max_tokens": True}, "maxTokens must be a positive integer"),
        ({"label": "m", "provider": "memory"}, "get() method"),
    ],
)
def test_a_spec_with_a_bad_label_limit_or_provider_is_refused(fields, problem):
    with pytest.raises(InvalidContextBlock, match=re.escape(problem)):
        ContextBlockSpec(**fields)


def test_two_specs_with_one_label_are_refused(session_id):
    with pytest.raises(ContextBlockExists, match='Block "memory" already exists'):
        SessionContext(session_id, [ContextBlockSpec("memory"), ContextBlockSpec("memory")])


def test_a_write_over_max_tokens_is_refused_and_writes_nothing(session_id):
    context = SessionContext(session_id, [ContextBlockSpec("memory", max_tokens=10)])
    context.replace_block("memory", "Short.")

    with pytest.raises(ContextBlockTooLarge) as refused:
        context.replace_block("memory", "x" * 44)
    with pytest.raises(ContextBlockTooLarge, match=r'^Block "memory" exceeds maxTokens: 12 > 10$'):
        context.append_block("memory", "x" * 40)

    assert str(refused.value) == 'Block "memory" exceeds maxTokens: 11 > 10'
    assert (refused.value.code, refused.value.http_status) == ("context-block-too-large", 422)
    assert refused.value.details == {"label": "memory", "tokens": 11, "max_tokens": 10}
    assert context.get_block("memory").content == "Short."
    assert DatabaseContextProvider(session_id, "memory").get() == "Short."


def test_read_only_unknown_and_keyed_blocks_refuse_whole_writes(session_id):
    context = SessionContext(
        session_id,
        [
            ContextBlockSpec("soul", provider=Static("Be kind.")),
            ContextBlockSpec("knowledge", provider=DatabaseSearchProvider),
        ],
    )

    with pytest.raises(ContextBlockReadonly, match=r'^Block "soul" is readonly$') as readonly:
        context.replace_block("soul", "Be rude.")
    with pytest.raises(ContextBlockNotFound, match=r'^Block "nope" not found$') as missing:
        context.append_block("nope", "x")
    with pytest.raises(ContextBlockKeyed, match=r'^Block "knowledge" is a keyed provider'):
        context.replace_block("knowledge", "x")

    assert (readonly.value.code, readonly.value.http_status) == ("context-block-readonly", 409)
    assert (missing.value.code, missing.value.http_status) == ("context-block-not-found", 404)
    assert context.get_block("soul").content == "Be kind."


def test_append_puts_content_on_a_new_line_unless_it_starts_one(session_id):
    context = SessionContext(session_id, [ContextBlockSpec("memory")])

    context.append_block("memory", "Likes coffee.")
    context.append_block("memory", "Dark roast.")
    block = context.append_block("memory", "\nNo sugar.")

    assert block.content == "Likes coffee.\nDark roast.\nNo sugar."
    assert block.tokens == 9  # ceil(6 words * 1.3) < ceil(35 / 4)
    assert DatabaseContextProvider(session_id, "memory").get() == block.content


def test_a_block_added_at_run_time_is_stored_for_every_later_context(session_id):
    context = SessionContext(session_id, [memory_spec()])
    added = context.add_block(
        ContextBlockSpec("extension-notes", description="From extension X", max_tokens=500)
    )
    context.replace_block("extension-notes", "Note one.")

    later = SessionContext(session_id, [memory_spec()])
    assert added.writable
    assert [b.label for b in later.get_blocks()] == ["memory", "extension-notes"]
    assert later.get_block("extension-notes").to_wire() == {
        "label": "extension-notes",
        "description": "From extension X",
        "content": "Note one.",
        "tokens": 3,
        "maxTokens": 500,
        "writable": True,
        "isSkill": False,
        "isSearchable": False,
    }
    with pytest.raises(ContextBlockTooLarge):
        later.replace_block("extension-notes", "x" * 2004)
    assert "EXTENSION-NOTES (From extension X) [1% — 3/500 tokens]" in (
        later.refresh_system_prompt()
    )
    assert SessionContext(new_session(), [memory_spec()]).get_block("extension-notes") is None


def test_adding_a_block_twice_or_with_a_provider_is_refused(session_id):
    context = SessionContext(session_id, [memory_spec()])
    context.add_block(ContextBlockSpec("extra"))

    with pytest.raises(ContextBlockExists, match='Block "memory" already exists'):
        context.add_block(ContextBlockSpec("memory"))
    with pytest.raises(ContextBlockExists, match='Block "extra" already exists') as twice:
        SessionContext(session_id, [memory_spec()]).add_block(ContextBlockSpec("extra"))
    with pytest.raises(InvalidContextBlock, match="takes no provider"):
        context.add_block(ContextBlockSpec("other", provider=Static("x")))

    assert (twice.value.code, twice.value.http_status) == ("context-block-exists", 409)
    assert ContextBlock.objects.filter(session_id=session_id, label="other").count() == 0


def test_only_blocks_added_at_run_time_can_be_removed(session_id):
    context = SessionContext(session_id, [memory_spec()])
    context.add_block(ContextBlockSpec("extra"))
    context.replace_block("extra", "Temporary.")

    with pytest.raises(ContextBlockConfigured) as configured:
        context.remove_block("memory")
    assert SessionContext(session_id, [memory_spec()]).remove_block("extra") is True
    assert context.remove_block("extra") is False
    assert context.remove_block("never") is False

    assert configured.value.code == "context-block-configured"
    assert context.get_block("extra") is None
    assert [b.label for b in SessionContext(session_id, [memory_spec()]).get_blocks()] == ["memory"]
    assert context.add_block(ContextBlockSpec("extra")).content == ""


# Keyed entries, skills and search


def test_entry_keys_are_the_references_keys():
    assert context_entry_key(None, "User likes coffee.") == "user-likes-coffee-bg0tv8"
    assert context_entry_key("Deploy Checklist", "whatever") == "deploy-checklist"
    assert context_entry_key(None, "!!!") == "entry-ckr8de"
    assert context_entry_key("???", "x") == "entry-yciw7o"
    assert context_entry_key("  ", "Body of the note") == "body-of-the-note-z19m7r"
    assert context_entry_key(None, "Ünïcödé 😀 text über alles") == "n-c-d-text-ber-alles-1xssddc"
    assert context_entry_key(None, "a" * 100) == "a" * 60 + "-2scd7d"
    assert context_entry_key(None, "") == "entry-ztntfp"


def test_set_entry_writes_keyed_entries_and_refreshes_the_listing(session_id):
    skills = Skills({})
    context = SessionContext(
        session_id,
        [
            ContextBlockSpec("skills", provider=skills),
            ContextBlockSpec("knowledge", provider=DatabaseSearchProvider),
            ContextBlockSpec("memory"),
        ],
    )

    assert context.set_entry("skills", "Steps...", title="Code Review") == "code-review"
    assert context.set_entry("skills", "More", title="Debug", description="Find bugs") == "debug"
    assert context.set_entry("knowledge", "User likes coffee.") == "user-likes-coffee-bg0tv8"

    assert skills.descriptions == {"code-review": "Code Review", "debug": "Find bugs"}
    assert context.get_block("skills").content == "- code-review\n- debug"
    assert context.get_block("knowledge").content == "1 entries indexed."
    with pytest.raises(ContextBlockUnsupported, match='Block "memory" is not a skill or search'):
        context.set_entry("memory", "x")


def test_keyed_writes_to_a_provider_without_set_are_refused(session_id):
    context = SessionContext(session_id, [ContextBlockSpec("docs", provider=Finder())])

    with pytest.raises(ContextBlockUnsupported, match=r'^Block "docs" does not support writes$'):
        context.set_entry("docs", "x")


def test_loaded_skills_are_tracked_until_unloaded(session_id):
    unloaded = []
    context = SessionContext(
        session_id,
        [ContextBlockSpec("skills", provider=Skills({"a": "Skill A", "b": "Skill B"}))],
        on_skill_unload=lambda label, key: unloaded.append((label, key)),
    )

    assert context.load_skill("skills", "b") == "Skill B"
    assert context.load_skill("skills", "a") == "Skill A"
    assert context.load_skill("skills", "zz") is None
    assert context.loaded_skills() == ["skills:b", "skills:a"]
    assert context.unload_skill("skills", "b") is True
    assert context.unload_skill("skills", "b") is False
    assert unloaded == [("skills", "b")]
    context.restore_loaded_skills(["skills:x", "skills:y"])
    assert context.loaded_skills() == ["skills:x", "skills:y"]
    context.clear_skill_state()
    assert context.loaded_skills() == []
    with pytest.raises(ContextBlockUnsupported, match='Block "memory" is not a skill provider'):
        SessionContext(session_id, [ContextBlockSpec("memory")]).load_skill("memory", "a")


@pytest.fixture
def knowledge(session_id) -> DatabaseSearchProvider:
    provider = DatabaseSearchProvider(session_id, "knowledge")
    provider.set("deploy", "The deployment runs on Friday after the review.")
    provider.set("lunch", "Lunch is on Friday at noon.")
    provider.set("rollback", "Rollback steps: revert, redeploy, deploy again, verify the deploys.")
    return provider


def test_search_stems_words_and_wants_every_one(knowledge):
    assert knowledge.get() == "3 entries indexed."
    assert knowledge.search("deploying") == (
        "[rollback]\nRollback steps: revert, redeploy, deploy again, verify the deploys.\n\n"
        "[deploy]\nThe deployment runs on Friday after the review."
    )
    assert knowledge.search("friday deployments") == (
        "[deploy]\nThe deployment runs on Friday after the review."
    )
    assert knowledge.search("friday pizza") is None
    assert knowledge.search("the and of") is None
    assert knowledge.search("") is None


def test_search_takes_any_text_as_words(knowledge):
    for query in ['"deploy', "deploy OR lunch", "NEAR(deploy lunch)", "deploy*", "lunch's:"]:
        knowledge.search(query)  # No syntax error.
    assert knowledge.search("deploy OR lunch") is None
    assert knowledge.search('lunch" OR "x') is None
    assert knowledge.search("noon!") == "[lunch]\nLunch is on Friday at noon."


def test_search_set_replaces_the_keys_entry(knowledge):
    knowledge.set("lunch", "Lunch moved to Thursday.")

    assert knowledge.get() == "3 entries indexed."
    assert knowledge.search("noon") is None
    assert knowledge.search("thursday") == "[lunch]\nLunch moved to Thursday."


def test_search_is_scoped_to_its_session_and_label_and_returns_ten(knowledge, session_id):
    DatabaseSearchProvider(new_session(), "knowledge").set("other", "Friday elsewhere.")
    notes = DatabaseSearchProvider(session_id, "notes")
    for number in range(12):
        notes.set(f"n{number:02}", f"Friday note {number}.")

    assert knowledge.search("friday").count("[") == 2
    assert "other" not in knowledge.search("friday")
    assert notes.search("friday").count("\n\n") == 9
    assert notes.get() == "12 entries indexed."
    assert DatabaseSearchProvider(new_session(), "knowledge").get() is None


def test_a_search_block_searches_its_provider(session_id, knowledge):
    context = SessionContext(
        session_id, [ContextBlockSpec("knowledge", provider=DatabaseSearchProvider)]
    )

    assert context.search("knowledge", "noon") == "[lunch]\nLunch is on Friday at noon."
    with pytest.raises(ContextBlockNotFound):
        context.search("nope", "noon")


@pytest.fixture(params=["filesystem", "memory"])
def storage(request, tmp_path):
    if request.param == "filesystem":
        return FileSystemStorage(location=tmp_path)
    return InMemoryStorage()


def test_skills_in_storage_are_listed_loaded_and_saved(storage):
    skills = StorageSkillProvider(storage)
    assert skills.get() is None

    skills.set("code-review", "Read the diff.", "How to review a pull request")
    skills.set("debugging", "Bisect.")
    skills.set("debugging", "Bisect first.")

    assert skills.get() == "- code-review: How to review a pull request\n- debugging"
    assert skills.load("code-review") == "Read the diff."
    assert skills.load("debugging") == "Bisect first."
    assert skills.load("missing") is None
    with storage.open("skills/code-review.md") as file:
        assert file.read().decode() == (
            "---\ndescription: How to review a pull request\n---\nRead the diff."
        )


def test_skill_files_written_by_hand_are_read(storage):
    storage.save(
        "skills/deploy.md", ContentFile(b"---\nname: deploy\ndescription: Ship it\n---\nGo.")
    )
    storage.save("skills/plain.md", ContentFile(b"No front matter."))
    storage.save("skills/readme.txt", ContentFile(b"Not a skill."))
    skills = StorageSkillProvider(storage, keys=["deploy", "readme"])

    assert StorageSkillProvider(storage).get() == "- deploy: Ship it\n- plain"
    assert StorageSkillProvider(storage).load("plain") == "No front matter."
    assert skills.get() == "- deploy: Ship it"
    assert skills.load("deploy") == "Go."
    assert skills.load("plain") is None


@pytest.mark.parametrize("key", ["../secrets", "a/b", ".hidden", "", "a\\b"])
def test_skill_keys_cannot_leave_the_skill_folder(storage, key):
    storage.save("secrets.md", ContentFile(b"Top secret."))
    skills = StorageSkillProvider(storage)

    with pytest.raises(InvalidSkillKey):
        skills.set(key, "x")
    assert skills.load(key) is None


def test_a_skill_storage_can_be_named_by_its_alias(settings):
    settings.STORAGES = {
        **settings.STORAGES,
        "skills": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    }
    StorageSkillProvider("skills", prefix="").set("tips", "Be brief.")

    assert StorageSkillProvider("skills", prefix="").get() == "- tips"


# Context tools


def tool_context(session_id: str, **options) -> SessionContext:
    return SessionContext(
        session_id,
        [
            ContextBlockSpec("soul", provider=Static("Be kind.")),
            memory_spec(),
            ContextBlockSpec("notes"),
            ContextBlockSpec("skills", provider=Skills({"review": "Read the diff."})),
            ContextBlockSpec(
                "knowledge",
                description="Searchable knowledge base",
                provider=DatabaseSearchProvider,
            ),
        ],
        **options,
    )


def test_the_tools_follow_the_blocks_kinds(session_id):
    def names(*specs: ContextBlockSpec) -> list[str]:
        return [t.name for t in context_tools(SessionContext(session_id, specs))]

    assert names(ContextBlockSpec("soul", provider=Static("x"))) == []
    assert names(ContextBlockSpec("memory")) == ["set_context"]
    assert names(ContextBlockSpec("manuals", provider=Skills({}, writable=False))) == [
        "load_context",
        "unload_context",
    ]
    assert names(ContextBlockSpec("docs", provider=Finder())) == ["search_context"]
    assert [t.name for t in context_tools(tool_context(session_id))] == [
        "set_context",
        "load_context",
        "unload_context",
        "search_context",
    ]


def test_set_context_describes_the_writable_blocks_and_their_metadata(session_id):
    set_context = tool(tool_context(session_id), "set_context")

    assert set_context.description == (
        "Write to a context block. Available blocks:\n"
        '- "memory" (writable): Learned facts\n'
        '- "notes" (writable): no description\n'
        '- "skills" (skill collection, keyed entries): no description\n'
        '- "knowledge" (searchable, keyed entries): Searchable knowledge base\n\n'
        "Writes are durable and persist across sessions.\n\n"
        "For keyed blocks (skill collections / searchable), pass "
        "`metadata: { title, description }` — title stabilises updates, "
        "description helps the model pick entries. Metadata is optional; "
        "short content rarely needs it, long loadable entries benefit most."
    )
    assert set_context.input_model.model_json_schema() == {
        "type": "object",
        "properties": {
            "label": {
                "type": "string",
                "enum": ["memory", "notes", "skills", "knowledge"],
                "description": "Block label to write to",
            },
            "content": {"type": "string", "description": "The main content to write to the block."},
            "action": {
                "type": "string",
                "enum": ["replace", "append"],
                "description": "replace (default) or append",
            },
            "metadata": {
                "type": "object",
                "description": "Optional metadata for keyed entries (skill collections, "
                'searchable blocks: "skills", "knowledge"). Short content doesn\'t need '
                "metadata; longer loadable entries (skills) benefit from a title and "
                "description so the model can pick the right one without loading it.",
                "properties": {
                    "title": {
                        "type": "string",
                        "description": "Short title. Used as a stable identifier — entries with "
                        "the same title are updated in place, different titles create new entries.",
                    },
                    "description": {
                        "type": "string",
                        "description": "One-line summary shown alongside the title in the system "
                        "prompt so the model can decide when to load the entry.",
                    },
                },
            },
        },
        "required": ["label", "content"],
    }


def test_set_context_without_keyed_blocks_takes_no_metadata(session_id):
    set_context = tool(SessionContext(session_id, [memory_spec()]), "set_context")

    assert set_context.description == (
        "Write to a context block. Available blocks:\n"
        '- "memory" (writable): Learned facts\n\n'
        "Writes are durable and persist across sessions."
    )
    assert list(set_context.input_model.model_json_schema()["properties"]) == [
        "label",
        "content",
        "action",
    ]


def test_set_context_writes_and_reports_usage(session_id):
    context = tool_context(session_id)

    assert call(context, "set_context", label="memory", content="x" * 1980) == (
        "Written to memory. Usage: 45% (495/1100 tokens)"
    )
    assert call(context, "set_context", label="notes", content="Hello there.") == (
        "Written to notes. Usage: 3 tokens"
    )
    assert call(context, "set_context", label="notes", content="Bye.", action="append") == (
        "Written to notes. Usage: 5 tokens"
    )
    assert call(context, "set_context", label="notes", content="Reset.", action=None) == (
        "Written to notes. Usage: 2 tokens"
    )
    assert call(context, "set_context", label="memory", content="x" * 4404) == (
        'Error: Block "memory" exceeds maxTokens: 1101 > 1100'
    )
    assert DatabaseContextProvider(session_id, "memory").get() == "x" * 1980


def test_set_context_indexes_keyed_entries(session_id):
    skills = Skills({})
    context = SessionContext(
        session_id,
        [
            ContextBlockSpec("skills", provider=skills),
            ContextBlockSpec("knowledge", provider=DatabaseSearchProvider),
        ],
    )

    assert (
        call(
            context,
            "set_context",
            label="skills",
            content="Steps.",
            metadata={"title": "Code Review", "description": "How to review"},
        )
        == 'Indexed "code-review" in skills.'
    )
    assert call(context, "set_context", label="knowledge", content="User likes coffee.") == (
        'Indexed "user-likes-coffee-bg0tv8" in knowledge.'
    )
    assert skills.descriptions == {"code-review": "How to review"}
    assert context.search("knowledge", "coffee") == (
        "[user-likes-coffee-bg0tv8]\nUser likes coffee."
    )


def test_set_context_refuses_labels_it_does_not_offer(session_id):
    context = tool_context(session_id)
    context.add_block(ContextBlockSpec("extra"))
    set_context = tool(context, "set_context")
    context.remove_block("extra")

    with pytest.raises(ValidationError):
        set_context.input_model.model_validate({"label": "soul", "content": "x"})
    arguments = set_context.input_model.model_validate({"label": "extra", "content": "x"})
    assert set_context.execute(arguments) == 'Error: block "extra" not found'


def test_load_and_unload_context_track_the_loaded_skills(session_id):
    unloaded = []
    context = tool_context(session_id, on_skill_unload=lambda *skill: unloaded.append(skill))
    load = tool(context, "load_context")

    assert load.description == (
        'Load a document from a skill block by key. Available skill blocks: "skills". '
        "Check the system prompt for available keys."
    )
    assert load.input_model.model_json_schema() == {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": ["skills"], "description": "Skill block label"},
            "key": {"type": "string", "description": "Skill key to load"},
        },
        "required": ["label", "key"],
    }
    assert tool(context, "unload_context").description == (
        "Unload a previously loaded skill to free context space. "
        "The skill remains available for re-loading. No skills currently loaded."
    )
    assert call(context, "unload_context", label="skills", key="review") == (
        'Skill "review" is not currently loaded in "skills".'
    )
    assert call(context, "load_context", label="skills", key="nope") == "Not found: nope"
    assert call(context, "load_context", label="skills", key="review") == "Read the diff."
    assert tool(context, "unload_context").description.endswith(
        "re-loading. Currently loaded: skills:review."
    )
    assert call(context, "unload_context", label="skills", key="review") == (
        'Unloaded "review" from skills. Context reclaimed.'
    )
    assert unloaded == [("skills", "review")]
    assert tool(context, "unload_context").input_model.model_json_schema()["properties"]["key"] == {
        "type": "string",
        "description": "Skill key to unload",
    }


def test_search_context_searches_the_searchable_blocks(session_id, knowledge):
    context = tool_context(session_id)
    search = tool(context, "search_context")

    assert search.description == (
        "Search for information in a searchable context block. ONLY these blocks are "
        'searchable: "knowledge". Other blocks cannot be searched.'
    )
    assert search.input_model.model_json_schema() == {
        "type": "object",
        "properties": {
            "label": {
                "type": "string",
                "enum": ["knowledge"],
                "description": "Searchable block label",
            },
            "query": {"type": "string", "description": "Search query"},
        },
        "required": ["label", "query"],
    }
    assert call(context, "search_context", label="knowledge", query="noon") == (
        "[lunch]\nLunch is on Friday at noon."
    )
    assert call(context, "search_context", label="knowledge", query="pizza") == (
        "No results found."
    )
