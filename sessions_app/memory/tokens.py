"""Token estimates (reference 002): a heuristic, not a tokenizer, and replaceable.

A string counts `ceil(max(characters / 4, words * 1.3))`; a message counts 4 for its framing
plus its text (its content, else its text parts), its other parts (the JSON of a tool part's
input and output) and its tool calls' arguments. The heuristic over-counts rather than
under-counts, so compaction fires before a context window overflows. `HELIX["TOKEN_COUNTER"]`
names a replacement for `estimate_message_tokens`.
"""

import json
import math
from collections.abc import Callable, Iterable
from typing import Any

from django.utils.module_loading import import_string

from sessions_app.conf import helix_setting
from sessions_app.stores.types import Message

CHARS_PER_TOKEN = 4
TOKENS_PER_WORD = 1.3
TOKENS_PER_MESSAGE = 4

MessageTokenCounter = Callable[[Iterable[Message]], int]


def estimate_string_tokens(text: str) -> int:
    """Return the estimated token count of `text`."""
    if not text:
        return 0
    return math.ceil(max(len(text) / CHARS_PER_TOKEN, len(text.split()) * TOKENS_PER_WORD))


def estimate_message_tokens(messages: Iterable[Message]) -> int:
    """Return the estimated token count of `messages`, framing included."""
    total = 0
    for message in messages:
        total += TOKENS_PER_MESSAGE + estimate_string_tokens(message.content)
        for part in message.parts:
            if not (message.content and part.get("type") == "text"):  # Content is their text.
                total += _part_tokens(part)
        for call in message.tool_calls:
            total += _value_tokens(call.get("arguments"))
    return total


def count_message_tokens(messages: Iterable[Message]) -> int:
    """Return the token count of `messages` by the configured counter."""
    return message_token_counter()(messages)


def message_token_counter() -> MessageTokenCounter:
    """Return the configured message counter: `HELIX["TOKEN_COUNTER"]`, or the estimate."""
    path = helix_setting("TOKEN_COUNTER")
    return estimate_message_tokens if path is None else import_string(path)


def _part_tokens(part: dict[str, Any]) -> int:
    kind = str(part.get("type", ""))
    if kind in ("text", "reasoning"):
        return _value_tokens(part.get("text"))
    if kind.startswith("tool-") or kind == "dynamic-tool":
        return _value_tokens(part.get("input")) + _value_tokens(part.get("output"))
    return _value_tokens(part.get("text"))


def _value_tokens(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return estimate_string_tokens(value)
    return estimate_string_tokens(json.dumps(value, separators=(",", ":")))
