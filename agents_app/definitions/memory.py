"""An agent's conversation memory (reference 002 over `sessions_app.memory`): its definition.

An agent with `memory=AgentMemory(...)` gets, at each step (`agents_app.memory.session`): its
context blocks' frozen system prompt after its own, the context tools its blocks call for (and
`session_search` over its owner's sessions, if asked), and, with `compact_after`, a compaction
of the branch before the model is called once the branch and prompt pass that many tokens.
Compaction summarises through the agent's own LLM adapter.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sessions_app.memory.compaction import Compactor, summarizing_compactor
from sessions_app.memory.context import ContextBlockSpec
from sessions_app.memory.session import MemoryConfig
from sessions_app.memory.tokens import MessageTokenCounter


@dataclass(frozen=True, kw_only=True)
class CompactionSettings:
    """The summarising compactor's knobs (reference `createCompactFunction` options)."""

    protect_head: int = 3
    tail_token_budget: int = 20_000
    min_tail_messages: int = 2


@dataclass(frozen=True, kw_only=True)
class AgentMemory:
    """What an agent remembers beyond its messages, and how its history is kept short.

    `compaction` is either settings for the summarising compactor (which asks the agent's own
    model) or a compactor of your own; `compact_after` needs one.
    """

    context: Sequence[ContextBlockSpec] = ()
    compaction: CompactionSettings | Compactor | None = None
    compact_after: int | None = None
    token_counter: MessageTokenCounter | None = None
    session_search: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "context", tuple(self.context))
        if self.compact_after is not None and self.compaction is None:
            raise ValueError("AgentMemory: compact_after needs a compaction.")
        if self.compact_after is not None and self.compact_after < 1:
            raise ValueError("AgentMemory: compact_after must be a positive token count.")

    def config(self, *, summarize: Callable[[str], str]) -> MemoryConfig:
        """Return the session-level configuration, summarising through `summarize`."""
        compactor = self.compaction
        if isinstance(compactor, CompactionSettings):
            compactor = summarizing_compactor(
                summarize,
                protect_head=compactor.protect_head,
                tail_token_budget=compactor.tail_token_budget,
                min_tail_messages=compactor.min_tail_messages,
                token_counter=self.token_counter,
            )
        return MemoryConfig(
            context=self.context,
            compactor=compactor,
            compact_after=self.compact_after,
            token_counter=self.token_counter,
        )
