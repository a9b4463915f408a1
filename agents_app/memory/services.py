"""Conversation memory of the caller's sessions (reference 002), for the API.

Messages, compactions, context blocks, the frozen system prompt, forks and usage. Every function
first checks the caller owns the session (`session_for_user`: another user's session is
`SessionNotFound`, exactly as a missing one), then works on the session's memory as its agent
configures it (`memory_of`), or on the store.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from agents_app.llm.base import LLMError
from agents_app.memory.session import memory_manager, memory_of
from sessions_app.errors import MessageNotFound
from sessions_app.memory.context import ContextBlock, ContextBlockSpec
from sessions_app.memory.errors import CompactionFailed, ContextBlockNotFound
from sessions_app.memory.session import AppendOutcome, ConversationMemory
from sessions_app.selectors import session_for_user
from sessions_app.services import session_update_labels
from sessions_app.stores import get_session_store
from sessions_app.stores.types import Compaction, Message, SessionState


@dataclass(frozen=True, kw_only=True)
class History:
    """A branch as the model gets it, the message it ends at, and its stored length."""

    messages: list[Message]
    leaf_id: str | None
    path_length: int


def _memory(user: AbstractBaseUser, session_id: str) -> ConversationMemory:
    return memory_of(session_for_user(session_id=session_id, user=user))


# Messages


def memory_history(
    *, user: AbstractBaseUser, session_id: str, leaf_id: str | None = None
) -> History:
    """Return the branch ending at `leaf_id` (default: the active one), compactions applied.

    Raises `MessageNotFound` for a leaf the session does not hold.
    """
    memory = _memory(user, session_id)
    if leaf_id is None:
        latest = memory.get_latest_leaf()
        leaf_id = latest.id if latest is not None else None
    if leaf_id is None:
        return History(messages=[], leaf_id=None, path_length=0)
    return History(
        messages=memory.get_history(leaf_id),
        leaf_id=leaf_id,
        path_length=memory.get_path_length(leaf_id),
    )


def memory_append(
    *, user: AbstractBaseUser, session_id: str, messages: Sequence[Message]
) -> AppendOutcome:
    """Append `messages`, each continuing from the one before, then compact if needed.

    Each message's `parent_id` is as `Message` says; an id the session holds is skipped.
    """
    return _memory(user, session_id).append_all(messages)


def memory_upsert(
    *, user: AbstractBaseUser, session_id: str, message: Message
) -> tuple[Message, bool]:
    """Update the session's message `message.id`, or append it if the session has none.

    Return the message as stored, and whether it was appended. Compaction after an append
    runs as for `memory_append`.
    """
    memory = _memory(user, session_id)
    outcome = memory.upsert(message)
    if outcome.updated is not None:
        return outcome.updated, False
    if outcome.appended:
        return outcome.appended[0], True
    # Another writer appended it meanwhile, so this append was a no-op.
    stored = memory.get_message(str(message.id))
    if stored is None:
        raise MessageNotFound(session_id, str(message.id))
    return stored, False


def memory_message(*, user: AbstractBaseUser, session_id: str, message_id: str) -> Message:
    """Return the session's message `message_id`; raise `MessageNotFound` if it has none."""
    message = _memory(user, session_id).get_message(message_id)
    if message is None:
        raise MessageNotFound(session_id, message_id)
    return message


def memory_branches(*, user: AbstractBaseUser, session_id: str, message_id: str) -> list[Message]:
    """Return the messages answering the session's message `message_id`, oldest first."""
    memory = _memory(user, session_id)
    if memory.get_message(message_id) is None:
        raise MessageNotFound(session_id, message_id)
    return memory.get_branches(message_id)


def memory_delete(*, user: AbstractBaseUser, session_id: str, message_ids: Sequence[str]) -> int:
    """Delete the session's messages of `message_ids`; return how many went."""
    return _memory(user, session_id).delete(message_ids)


def memory_message_delete(*, user: AbstractBaseUser, session_id: str, message_id: str) -> None:
    """Delete the session's message `message_id`; raise `MessageNotFound` if it has none."""
    if not _memory(user, session_id).delete([message_id]):
        raise MessageNotFound(session_id, message_id)


def memory_clear(*, user: AbstractBaseUser, session_id: str) -> int:
    """Delete every message and compaction of the session; return how many messages went."""
    return _memory(user, session_id).clear()


# Compactions


def memory_compactions(*, user: AbstractBaseUser, session_id: str) -> list[Compaction]:
    """Return the session's compactions in the order they were added."""
    session_for_user(session_id=session_id, user=user)
    return get_session_store().get_compactions(session_id)


def memory_compaction_add(
    *,
    user: AbstractBaseUser,
    session_id: str,
    summary: str,
    from_message_id: str,
    to_message_id: str,
) -> Compaction:
    """Store `summary` as standing in for `from_message_id`..`to_message_id`."""
    session_for_user(session_id=session_id, user=user)
    return get_session_store().add_compaction(session_id, summary, from_message_id, to_message_id)


def memory_compact(
    *, user: AbstractBaseUser, session_id: str, leaf_id: str | None = None
) -> Compaction | None:
    """Compact the branch ending at `leaf_id` now; return the overlay, or None if too short.

    Raises `NoCompactor` if the agent configures none, `CompactionFailed` if its model fails.
    """
    memory = _memory(user, session_id)
    try:
        return memory.compact(leaf_id)
    except LLMError as error:
        raise CompactionFailed(session_id, error.message) from error


# Context blocks


def context_blocks(*, user: AbstractBaseUser, session_id: str) -> list[ContextBlock]:
    """Return the session's context blocks, configured ones first."""
    return _memory(user, session_id).context.get_blocks()


def context_block(*, user: AbstractBaseUser, session_id: str, label: str) -> ContextBlock:
    """Return the session's block `label`; raise `ContextBlockNotFound` if it has none."""
    block = _memory(user, session_id).context.get_block(label)
    if block is None:
        raise ContextBlockNotFound(label)
    return block


def context_block_add(
    *,
    user: AbstractBaseUser,
    session_id: str,
    label: str,
    description: str = "",
    max_tokens: int | None = None,
) -> ContextBlock:
    """Add a database-backed block to the session; it joins the prompt when that is refreshed."""
    spec = ContextBlockSpec(label, description, max_tokens)
    return _memory(user, session_id).context.add_block(spec)


def context_block_replace(
    *, user: AbstractBaseUser, session_id: str, label: str, content: str
) -> ContextBlock:
    """Write `content` as the whole of the writable block `label`."""
    return _memory(user, session_id).context.replace_block(label, content)


def context_block_append(
    *, user: AbstractBaseUser, session_id: str, label: str, content: str
) -> ContextBlock:
    """Add `content` to the end of the writable block `label`."""
    return _memory(user, session_id).context.append_block(label, content)


def context_entry_set(
    *,
    user: AbstractBaseUser,
    session_id: str,
    label: str,
    content: str,
    title: str | None = None,
    description: str | None = None,
) -> str:
    """Write `content` as an entry of the skill or search block `label`; return its key."""
    context = _memory(user, session_id).context
    return context.set_entry(label, content, title=title, description=description)


def context_block_search(
    *, user: AbstractBaseUser, session_id: str, label: str, query: str
) -> str | None:
    """Return the search block `label`'s best entries for `query`, or None."""
    return _memory(user, session_id).context.search(label, query)


def context_block_remove(*, user: AbstractBaseUser, session_id: str, label: str) -> None:
    """Remove the block `label` added at run time; raise `ContextBlockNotFound` if none is."""
    if not _memory(user, session_id).context.remove_block(label):
        raise ContextBlockNotFound(label)


# The system prompt


def system_prompt_freeze(*, user: AbstractBaseUser, session_id: str) -> str:
    """Return the session's frozen system prompt, rendering and storing it the first time."""
    return _memory(user, session_id).freeze_system_prompt()


def system_prompt_refresh(*, user: AbstractBaseUser, session_id: str) -> str:
    """Render the prompt from the blocks as they are now, store it and return it."""
    return _memory(user, session_id).refresh_system_prompt()


# Sessions


def session_fork(
    *, user: AbstractBaseUser, session_id: str, at_message_id: str, name: str = ""
) -> SessionState:
    """Return a new session of the caller's holding the history up to `at_message_id`.

    The copies have fresh ids; compaction summaries are copied as the messages they show as.
    """
    state = session_for_user(session_id=session_id, user=user)
    return memory_manager(state.agent_type, user.pk).fork(session_id, at_message_id, name)


def session_usage_add(
    *,
    user: AbstractBaseUser,
    session_id: str,
    input_tokens: int,
    output_tokens: int,
    cost: float = 0.0,
) -> None:
    """Record tokens and cost spent on the session outside a run (reference `addUsage`)."""
    state = session_for_user(session_id=session_id, user=user)
    manager = memory_manager(state.agent_type, user.pk)
    manager.add_usage(session_id, input_tokens, output_tokens, cost)


@transaction.atomic
def session_update(
    *,
    user: AbstractBaseUser,
    session_id: str,
    labels: Mapping[str, Any],
    name: str | None = None,
) -> SessionState:
    """Rename the caller's session and replace its labels; return its state.

    A rename alone leaves the version as it is. Labels bump it, and are refused with
    `SessionBusy` while a step runs; then nothing is written, the name included.
    """
    state = session_for_user(session_id=session_id, user=user)
    if labels or name is None:
        state = session_update_labels(user=user, session_id=session_id, labels=dict(labels))
    if name is not None:
        get_session_store().rename_session(session_id, name)
        state = session_for_user(session_id=session_id, user=user)
    return state
