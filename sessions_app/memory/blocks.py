"""Context blocks (reference 002): what a block is made of, and what it holds.

A block is a labelled section of the system prompt whose provider decides what it is, by the
methods it has (duck typing, as in the reference):

- `get()` only: a read-only block;
- `get()` and `set(content)`: a writable block (the `set_context` tool);
- `get()` and `load(key)`, maybe `set(key, content, description)`: a skill block, a listing of
  documents loaded on demand (`load_context`, `unload_context`);
- `get()` and `search(query)`, maybe `set(key, content)`: a searchable block (`search_context`).

Provider methods are sync.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sessions_app.memory.errors import InvalidContextBlock


class ContextProvider(Protocol):
    def get(self) -> str | None: ...


class WritableContextProvider(ContextProvider, Protocol):
    def set(self, content: str) -> None: ...


class SkillProvider(ContextProvider, Protocol):
    """Also `set(key, content, description=None)` when it takes writes."""

    def load(self, key: str) -> str | None: ...


class SearchProvider(ContextProvider, Protocol):
    """Also `set(key, content)` when it takes writes."""

    def search(self, query: str) -> str | None: ...


ProviderFactory = Callable[[str, str], ContextProvider]
LABEL_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def is_writable_provider(provider: object) -> bool:
    """Return whether `provider` takes writes (it has `set`)."""
    return callable(getattr(provider, "set", None))


def is_skill_provider(provider: object) -> bool:
    """Return whether `provider` is a skill provider (it has `load`)."""
    return callable(getattr(provider, "load", None))


def is_search_provider(provider: object) -> bool:
    """Return whether `provider` is a search provider (it has `search`)."""
    return callable(getattr(provider, "search", None))


@dataclass(frozen=True)
class ContextBlockSpec:
    """How a block is made: its label, description, token limit and provider.

    `provider` is None for the session's own database-backed writable block, a provider
    instance shared by every session (a static soul text, a skill library), or a factory
    `(session_id, label) -> provider` for storage of the session's own.
    """

    label: str
    description: str = ""
    max_tokens: int | None = None
    provider: ContextProvider | ProviderFactory | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not LABEL_PATTERN.fullmatch(self.label):
            raise InvalidContextBlock(
                f"Block label {self.label!r} is not valid: use 1 to 100 letters, digits, "
                "'.', '_' and '-', starting with a letter or digit.",
                label=self.label,
            )
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, int)
            or self.max_tokens < 1
        ):
            raise InvalidContextBlock(
                f'Block "{self.label}": maxTokens must be a positive integer.',
                label=self.label,
                max_tokens=self.max_tokens,
            )
        if self.provider is not None and not (
            is_provider(self.provider) or callable(self.provider)
        ):
            raise InvalidContextBlock(
                f'Block "{self.label}": the provider needs a get() method, or must be a '
                "factory (session_id, label) -> provider.",
                label=self.label,
            )


@dataclass(frozen=True)
class ContextBlock:
    """A block as its provider last gave it, with its token estimate and kind."""

    label: str
    description: str
    content: str
    tokens: int
    max_tokens: int | None
    writable: bool
    is_skill: bool
    is_searchable: bool

    def to_wire(self) -> dict[str, Any]:
        """Return the block with the reference's camelCase keys."""
        return {
            "label": self.label,
            "description": self.description,
            "content": self.content,
            "tokens": self.tokens,
            "maxTokens": self.max_tokens,
            "writable": self.writable,
            "isSkill": self.is_skill,
            "isSearchable": self.is_searchable,
        }


def is_provider(provider: object) -> bool:
    """Return whether `provider` is a provider itself, not a class or factory making one."""
    return not isinstance(provider, type) and callable(getattr(provider, "get", None))
