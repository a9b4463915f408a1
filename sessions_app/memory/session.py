"""One session's conversation memory: its message tree, context blocks, prompt and compaction.

`ConversationMemory` is reference 002's `Session` over the session store (one message store for
the runtime and for memory). Workers hold no memory between steps, so what the reference keeps
in process is read back each time: the frozen prompt from the database, and which skills are
loaded from the branch's `load_context` / `unload_context` tool calls.
"""

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sessions_app.memory.compaction import Compactor, compact
from sessions_app.memory.context import ContextBlockSpec, SessionContext
from sessions_app.memory.errors import NoCompactor
from sessions_app.memory.tokens import (
    MessageTokenCounter,
    estimate_string_tokens,
    message_token_counter,
)
from sessions_app.memory.tools import MemoryTool, context_tools
from sessions_app.stores import get_session_store
from sessions_app.stores.base import SessionStateStore
from sessions_app.stores.types import Compaction, Message, MessageHit, MessageRole

logger = logging.getLogger(__name__)

LOAD_TOOL, UNLOAD_TOOL = "load_context", "unload_context"
UNLOADED_MARK = "[skill unloaded: {key}]"


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """How a session's memory behaves: its blocks, its compactor and when that runs.

    With `compact_after`, each append is followed by a compaction once the active branch and
    the system prompt together count more than that many tokens (`token_counter`, default the
    configured counter).
    """

    context: Sequence[ContextBlockSpec] = ()
    compactor: Compactor | None = None
    compact_after: int | None = None
    token_counter: MessageTokenCounter | None = None

    def __post_init__(self) -> None:
        if self.compact_after is not None and self.compactor is None:
            raise ValueError("compact_after needs a compactor.")
        if self.compact_after is not None and self.compact_after < 1:
            raise ValueError("compact_after must be a positive token count.")


@dataclass(frozen=True, kw_only=True)
class AppendOutcome:
    """What an append stored (or an upsert updated), and what compaction after it did."""

    appended: list[Message]
    updated: Message | None = None
    compaction: Compaction | None = None
    compaction_error: str | None = None


@dataclass(kw_only=True)
class AutoCompaction:
    """The result of `compact_if_needed`: the overlay added, or why none could be."""

    tokens: int
    compaction: Compaction | None = None
    error: str | None = None
    # The active branch as measured, when no compaction changed it since: a caller about to
    # read it again can use this instead.
    history: list[Message] | None = None


class ConversationMemory:
    """The memory of one session, read and written through the session store."""

    def __init__(
        self,
        session_id: str,
        config: MemoryConfig | None = None,
        *,
        store: SessionStateStore | None = None,
        on_compaction_error: Callable[[str, str], None] | None = None,
    ) -> None:
        self.session_id = session_id
        self.config = config or MemoryConfig()
        self.store = store or get_session_store()
        self.on_compaction_error = on_compaction_error or _log_compaction_error
        self._context: SessionContext | None = None

    @property
    def context(self) -> SessionContext:
        """Return the session's context blocks, with its loaded skills restored."""
        if self._context is None:
            self._context = SessionContext(
                self.session_id, self.config.context, on_skill_unload=self._reclaim_skill
            )
            if any(block.is_skill for block in self._context.get_blocks()):
                self._context.restore_loaded_skills(self._loaded_skills())
        return self._context

    # Messages

    def append(self, message: Message) -> AppendOutcome:
        """Append `message` (see `Message.parent_id`), then compact if the branch is too long."""
        return self.append_all([message])

    def append_all(self, messages: Sequence[Message]) -> AppendOutcome:
        """Append `messages`, each continuing from the one before, then compact if needed."""
        appended = self.store.append_messages(self.session_id, messages)
        if not appended:
            return AppendOutcome(appended=[])
        result = self.compact_if_needed()
        return AppendOutcome(
            appended=appended, compaction=result.compaction, compaction_error=result.error
        )

    def upsert(self, message: Message) -> AppendOutcome:
        """Update the stored message `message.id`, or append it if the session has none."""
        if message.id is not None and self.get_message(message.id) is not None:
            return AppendOutcome(appended=[], updated=self.update(message))
        return self.append(message)

    def update(self, message: Message) -> Message:
        """Replace the content of the stored message `message.id`."""
        return self.store.update_message(self.session_id, message)

    def delete(self, message_ids: Sequence[str]) -> int:
        """Delete the messages of `message_ids`; return how many went."""
        return self.store.delete_messages(self.session_id, message_ids)

    def clear(self) -> int:
        """Delete every message and compaction, forget loaded skills, and refresh the prompt."""
        cleared = self.store.clear_messages(self.session_id)
        self.context.clear_skill_state()
        self.context.refresh_system_prompt()
        return cleared

    def get_history(self, leaf_id: str | None = None) -> list[Message]:
        """Return the branch ending at `leaf_id` (default: the active one), compactions applied."""
        return self.store.get_history(self.session_id, leaf_id)

    def get_message(self, message_id: str) -> Message | None:
        return self.store.get_message(self.session_id, message_id)

    def get_latest_leaf(self) -> Message | None:
        return self.store.get_latest_leaf(self.session_id)

    def get_branches(self, message_id: str) -> list[Message]:
        return self.store.get_branches(self.session_id, message_id)

    def get_path_length(self, leaf_id: str | None = None) -> int:
        return self.store.get_path_length(self.session_id, leaf_id)

    def search(self, query: str, *, limit: int = 20) -> list[MessageHit]:
        """Return the session's messages holding `query` as a phrase, best first."""
        return self.store.search_messages(self.session_id, query, limit=limit)

    # Prompt and tools

    def freeze_system_prompt(self) -> str:
        return self.context.freeze_system_prompt()

    def refresh_system_prompt(self) -> str:
        return self.context.refresh_system_prompt()

    def tools(self) -> list[MemoryTool]:
        """Return the context tools the session's blocks call for."""
        return context_tools(self.context)

    # Compaction

    def estimate_tokens(self, leaf_id: str | None = None, *, other_prompt: str = "") -> int:
        """Return the token count of the branch as the model gets it, system prompt included.

        `other_prompt` is what the system prompt holds beside the blocks (the agent's own).
        """
        return self._count(self.get_history(leaf_id), other_prompt)

    def _count(self, history: list[Message], other_prompt: str) -> int:
        counter = self.config.token_counter or message_token_counter()
        prompt = self.context.system_prompt_for_estimate()
        return (
            counter(history) + estimate_string_tokens(prompt) + estimate_string_tokens(other_prompt)
        )

    def compact(self, leaf_id: str | None = None) -> Compaction | None:
        """Compact the branch ending at `leaf_id` now; return the overlay, or `None`.

        Refreshes the system prompt after a compaction, as the reference does.
        """
        if self.config.compactor is None:
            raise NoCompactor(self.session_id)
        compaction = compact(self.store, self.session_id, self.config.compactor, leaf_id)
        if compaction is not None:
            self.context.refresh_system_prompt()
        return compaction

    def compact_if_needed(self, *, other_prompt: str = "") -> AutoCompaction:
        """Compact the active branch if it passes `compact_after`; report, never raise, failure.

        The messages are stored before this runs, so a failed compaction loses nothing: it is
        passed to `on_compaction_error` and returned.
        """
        threshold = self.config.compact_after
        if threshold is None:
            return AutoCompaction(tokens=0)
        history = self.get_history()
        tokens = self._count(history, other_prompt)
        if tokens <= threshold:
            return AutoCompaction(tokens=tokens, history=history)
        try:
            compaction = self.compact()
        except Exception as error:
            message = f"Compaction failed: {error}"
            self.on_compaction_error(self.session_id, message)
            return AutoCompaction(tokens=tokens, error=message, history=history)
        unchanged = history if compaction is None else None
        return AutoCompaction(tokens=tokens, compaction=compaction, history=unchanged)

    # Loaded skills

    def _loaded_skills(self) -> set[str]:
        """Return `label:key` of each skill the active branch loaded and did not unload."""
        loaded: set[str] = set()
        for call, result in self._context_calls():
            skill = f"{call['arguments'].get('label')}:{call['arguments'].get('key')}"
            if call["name"] == UNLOAD_TOOL or result.content.startswith("[skill unloaded:"):
                loaded.discard(skill)
            else:
                loaded.add(skill)
        return loaded

    def _reclaim_skill(self, label: str, key: str) -> None:
        """Shrink the newest result of loading `key` to a mark, so it stops costing tokens."""
        for call, result in reversed(self._context_calls()):
            arguments = call["arguments"]
            if call["name"] == LOAD_TOOL and (arguments.get("label"), arguments.get("key")) == (
                label,
                key,
            ):
                result.content = UNLOADED_MARK.format(key=key)
                self.update(result)
                return

    def _context_calls(self) -> list[tuple[dict, Message]]:
        """Return the branch's skill tool calls that have results, oldest first."""
        calls: dict[str, dict] = {}
        found = []
        for message in self.store.get_path(self.session_id):
            for call in message.tool_calls:
                if call.get("name") in (LOAD_TOOL, UNLOAD_TOOL) and isinstance(
                    call.get("arguments"), dict
                ):
                    calls[call["id"]] = call
            if message.role == MessageRole.TOOL and message.tool_call_id in calls:
                found.append((calls[message.tool_call_id], message))
        return found


def _log_compaction_error(session_id: str, message: str) -> None:
    logger.warning("Session %s: %s", session_id, message)
