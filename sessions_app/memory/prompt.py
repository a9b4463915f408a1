"""The system prompt of context blocks, rendered exactly as the reference renders it."""

import math
from collections.abc import Iterable

from sessions_app.memory.blocks import ContextBlock

SEPARATOR = "═" * 46


def usage_percent(tokens: int, max_tokens: int) -> int:
    """Return `tokens` as a whole percentage of `max_tokens`, halves rounded up (`Math.round`)."""
    percent = tokens / max_tokens * 100
    whole = math.floor(percent)
    return whole + 1 if percent - whole >= 0.5 else whole


def render_system_prompt(blocks: Iterable[ContextBlock]) -> str:
    """Return the blocks' sections joined by blank lines, leaving out empty read-only blocks.

    A section is the separator, a header (label, description, usage, kind), the separator
    again, and the content.
    """
    sections = []
    for block in blocks:
        if not (block.content or block.writable or block.is_searchable or block.is_skill):
            continue
        header = block.label.upper()
        if block.description:
            header += f" ({block.description})"
        if block.max_tokens:
            percent = usage_percent(block.tokens, block.max_tokens)
            header += f" [{percent}% — {block.tokens}/{block.max_tokens} tokens]"
        if block.is_searchable:
            header += " [searchable]"
        elif block.is_skill:
            header += " [loadable]"
        elif not block.writable:
            header += " [readonly]"
        else:
            header += " [writable]"
        sections.append(f"{SEPARATOR}\n{header}\n{SEPARATOR}\n{block.content}")
    return "\n\n".join(sections)
