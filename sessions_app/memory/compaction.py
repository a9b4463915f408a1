"""Compaction (reference 002): summarise a branch's middle into an overlay, keeping the messages.

`summarizing_compactor(summarize, ...)` returns a `Compactor`: given a branch's history, it
keeps the first `protect_head` messages and a tail of up to `tail_token_budget` tokens (at least
`min_tail_messages`), never splitting a tool call from its results at either boundary, and asks
`summarize(prompt)` for a summary of the middle in four sections: Topic, Key Points, Current
State, Open Items. A history that already shows a summary passes it along to be updated.
`compact` stores what a compactor proposes as an overlay that, on later passes, starts where the
branch's first overlay started, so one summary keeps growing instead of summaries stacking.
"""

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sessions_app.memory.tokens import MessageTokenCounter, message_token_counter
from sessions_app.stores.base import SessionStateStore
from sessions_app.stores.types import Compaction, Message, MessageRole

COMPACTION_PREFIX = "compaction_"
SUMMARY_SECTIONS = """## Topic
[What the conversation is about]

## Key Points
[Important information, decisions, and conclusions from the conversation]

## Current State
[Where things stand now — what has been done, what is in progress]

## Open Items
[Unresolved questions, pending tasks, or next steps discussed]"""
SUMMARY_RULES = (
    "Be factual — only include information that was explicitly discussed in the conversation. "
    "Do NOT invent file paths, commands, or details that were not mentioned. "
    "Write only the summary body."
)
# A tool input or output shows this much of itself in the summary prompt.
PROMPT_EXCERPT = 500


@dataclass(frozen=True, kw_only=True)
class CompactionProposal:
    """The range a compactor would replace, and its summary."""

    from_message_id: str
    to_message_id: str
    summary: str


Compactor = Callable[[list[Message]], CompactionProposal | None]


def summarizing_compactor(
    summarize: Callable[[str], str],
    *,
    protect_head: int = 3,
    tail_token_budget: int = 20_000,
    min_tail_messages: int = 2,
    token_counter: MessageTokenCounter | None = None,
) -> Compactor:
    """Return a compactor that summarises a history's middle through `summarize(prompt)`."""
    if min(protect_head, tail_token_budget, min_tail_messages) < 0:
        raise ValueError("protect_head, tail_token_budget and min_tail_messages must be >= 0.")

    def compactor(history: list[Message]) -> CompactionProposal | None:
        if len(history) <= protect_head + min_tail_messages:
            return None
        counter = token_counter or message_token_counter()
        start = align_forward(history, protect_head)
        end = tail_start(history, start, counter, tail_token_budget, min_tail_messages)
        middle = [m for m in history[start:end] if not is_compaction(m)]
        if not middle:
            return None
        previous = next((m.content for m in history if is_compaction(m)), None)
        budget = max(100, int(counter(middle) * 0.2))
        summary = summarize(summary_prompt(middle, previous, budget))
        if not summary.strip():
            return None
        return CompactionProposal(
            from_message_id=middle[0].id, to_message_id=middle[-1].id, summary=summary
        )

    return compactor


def compact(
    store: SessionStateStore, session_id: str, compactor: Compactor, leaf_id: str | None = None
) -> Compaction | None:
    """Compact the branch ending at `leaf_id` (default: the active one); return the overlay.

    Returns `None` when the compactor finds nothing to compact. What the compactor raises
    propagates, and nothing is written.
    """
    history = store.get_history(session_id, leaf_id)
    proposal = compactor(history)
    shown = {message.id for message in history}
    if proposal is None or proposal.to_message_id not in shown:
        return None
    on_branch = [
        c
        for c in store.get_compactions(session_id)
        if f"{COMPACTION_PREFIX}{c.compaction_id}" in shown
        or {c.from_message_id, c.to_message_id} <= shown
    ]
    start = on_branch[0].from_message_id if on_branch else proposal.from_message_id
    return store.add_compaction(session_id, proposal.summary, start, proposal.to_message_id)


def is_compaction(message: Message) -> bool:
    """Return whether `message` is a compaction's summary, not a stored message."""
    return (message.id or "").startswith(COMPACTION_PREFIX)


def align_forward(history: Sequence[Message], index: int) -> int:
    """Move a range start past the results of the tool call group it would split."""
    group = _tool_group(history, index)
    return index if group is None else group[1]


def align_backward(history: Sequence[Message], index: int) -> int:
    """Move a range end back to the tool call whose results it would split."""
    group = _tool_group(history, index)
    return index if group is None else group[0]


def _tool_group(history: Sequence[Message], index: int) -> tuple[int, int] | None:
    """Return the `(call, end)` slice of the tool call group `index` falls strictly inside."""
    caller = index - 1
    while caller >= 0 and not call_ids(history[caller]) and _is_result(history[caller]):
        caller -= 1
    if caller < 0 or not (calls := call_ids(history[caller])):
        return None
    end = caller + 1
    while end < len(history) and answers(history[end], calls):
        end += 1
    return (caller, end) if caller < index < end else None


def tail_start(
    history: Sequence[Message],
    head_end: int,
    counter: MessageTokenCounter,
    budget: int,
    min_messages: int,
) -> int:
    """Return where the protected tail starts: a token budget, at least `min_messages`."""
    cut, spent = len(history), 0
    for index in range(len(history) - 1, head_end - 1, -1):
        tokens = counter([history[index]])
        if spent + tokens > budget and cut < len(history):
            break
        spent += tokens
        cut = index
    floor = len(history) - min_messages
    if floor >= head_end:
        cut = min(cut, floor)
    return align_backward(history, cut)


def call_ids(message: Message) -> set[str]:
    """Return the ids of the tool calls an assistant message makes."""
    if message.role != MessageRole.ASSISTANT:
        return set()
    ids = {str(call.get("id")) for call in message.tool_calls if call.get("id")}
    return ids | {str(p["toolCallId"]) for p in message.parts if _is_tool_part(p)}


def answers(message: Message, calls: set[str]) -> bool:
    """Return whether `message` holds a result of one of `calls`."""
    if message.tool_call_id in calls:
        return True
    return any(_is_tool_part(p) and p["toolCallId"] in calls for p in message.parts)


def summary_prompt(middle: Sequence[Message], previous: str | None, budget: int) -> str:
    """Return the prompt asking for a summary of `middle` (updating `previous`, if any)."""
    conversation = "\n\n---\n\n".join(_transcript(message) for message in middle)
    target = f"Target ~{budget} tokens. {SUMMARY_RULES}"
    if previous:
        return (
            "You are updating a conversation summary. A previous summary exists below. New "
            "conversation turns have occurred since then and need to be incorporated.\n\n"
            f"PREVIOUS SUMMARY:\n{previous}\n\nNEW TURNS TO INCORPORATE:\n{conversation}\n\n"
            "Update the summary. PRESERVE existing information that is still relevant. ADD new "
            "information. Remove information only if it is clearly obsolete.\n\n"
            f"{SUMMARY_SECTIONS}\n\n{target}"
        )
    return (
        "Create a concise summary of this conversation that preserves the important "
        f"information for future context.\n\nCONVERSATION TO SUMMARIZE:\n{conversation}\n\n"
        f"Use this structure:\n\n{SUMMARY_SECTIONS}\n\n{target}"
    )


def _transcript(message: Message) -> str:
    lines = [f"[{message.role}]", message.content or _text_of(message)]
    for call in message.tool_calls:
        lines.append(f"[Tool: {call.get('name', 'unknown')}]")
        lines.append(f"Input: {_excerpt(call.get('arguments'))}")
    for part in message.parts:
        if _is_tool_part(part):
            lines.append(f"[Tool: {part.get('toolName', 'unknown')}]")
            if part.get("input") is not None:
                lines.append(f"Input: {_excerpt(part['input'])}")
            if part.get("output") is not None:
                lines.append(f"Output: {_excerpt(part['output'])}")
    return "\n".join(line for line in lines if line)


def _is_result(message: Message) -> bool:
    return bool(message.tool_call_id) or any(_is_tool_part(p) for p in message.parts)


def _text_of(message: Message) -> str:
    return "\n".join(p.get("text", "") for p in message.parts if p.get("type") == "text")


def _excerpt(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:PROMPT_EXCERPT]


def _is_tool_part(part: dict) -> bool:
    kind = str(part.get("type", ""))
    return (kind.startswith("tool-") or kind == "dynamic-tool") and "toolCallId" in part
