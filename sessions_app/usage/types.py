"""Plain typed values that cross the `UsageStore` contract (reference 001 "Usage Response").

An entry is one of four frozen dataclasses, told apart by their class (and their `kind`): the
tokens of one model call, one tool call, one sub-agent call, or one custom metric. The store
fills `id` and `created_at` when it records an entry (`created_at` only if the caller left it
out). A rollup sums a session's entries in the reference's `UsageRollup` shape; `to_wire()`
returns that shape with camelCase keys and times in milliseconds since the epoch.
"""

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Self

from pydantic.alias_generators import to_camel

from sessions_app import models

UsageKind = models.UsageEntry.Kind


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _epoch_ms(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


class _Counts:
    """Counts that add field by field and go on the wire under camelCase names."""

    __slots__ = ()

    def __add__(self, other: Self) -> Self:
        return type(self)(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def to_wire(self) -> dict[str, int]:
        return {to_camel(f.name): getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenCounts(_Counts):
    """Token counts (reference `TokenCounts`).

    An entry recorded with a `total` of 0 is stored with prompt + completion as its total.
    """

    prompt: int = 0
    completion: int = 0
    reasoning: int = 0
    cached: int = 0
    total: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class _Entry:
    """What every entry carries: where it happened, and what the store fills in."""

    kind: ClassVar[UsageKind]
    session_id: str
    run_id: str | None = None
    step_count: int = 0
    id: int | None = None
    created_at: datetime | None = None

    def to_wire(self) -> dict[str, Any]:
        """Return the entry as JSON with camelCase keys; `timestamp` is in epoch milliseconds."""
        return {
            "id": self.id,
            "kind": self.kind.value,
            "sessionId": self.session_id,
            "runId": self.run_id,
            "stepCount": self.step_count,
            "timestamp": None if self.created_at is None else _epoch_ms(self.created_at),
            **self._wire_fields(),
        }

    def _wire_fields(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True, slots=True)
class TokensEntry(_Entry):
    """The tokens one model call used."""

    kind: ClassVar[UsageKind] = UsageKind.TOKENS
    model: str
    tokens: TokenCounts

    def _wire_fields(self) -> dict[str, Any]:
        return {"model": self.model, "tokens": self.tokens.to_wire()}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolEntry(_Entry):
    """One tool call: which tool, whether it succeeded, and how long it took."""

    kind: ClassVar[UsageKind] = UsageKind.TOOL
    name: str
    success: bool
    duration_ms: int | None = None

    def _wire_fields(self) -> dict[str, Any]:
        return {"name": self.name, "success": self.success, "durationMs": self.duration_ms}


@dataclass(frozen=True, kw_only=True, slots=True)
class SubAgentEntry(_Entry):
    """One sub-agent call: the child's agent type, its session, outcome and duration.

    A rollup filtered by run counts the tokens of the child sessions its run's sub-agent
    entries name, so record `sub_session_id` whenever the child has a session.
    """

    kind: ClassVar[UsageKind] = UsageKind.SUBAGENT
    agent_type: str
    success: bool
    sub_session_id: str | None = None
    duration_ms: int | None = None

    def _wire_fields(self) -> dict[str, Any]:
        return {
            "agentType": self.agent_type,
            "subSessionId": self.sub_session_id,
            "success": self.success,
            "durationMs": self.duration_ms,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class CustomEntry(_Entry):
    """A custom metric: `value` is added to the rollup's `custom[metric_type][name]`."""

    kind: ClassVar[UsageKind] = UsageKind.CUSTOM
    metric_type: str
    name: str
    value: float

    def _wire_fields(self) -> dict[str, Any]:
        return {"metricType": self.metric_type, "name": self.name, "value": self.value}


UsageEntry = TokensEntry | ToolEntry | SubAgentEntry | CustomEntry
ENTRY_CLASSES: dict[UsageKind, type[UsageEntry]] = {
    entry_class.kind: entry_class
    for entry_class in (TokensEntry, ToolEntry, SubAgentEntry, CustomEntry)
}


@dataclass(kw_only=True, slots=True)
class PaginatedUsage:
    entries: list[UsageEntry]
    total: int
    offset: int
    limit: int
    has_more: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class CallStats(_Counts):
    """Counts of one tool's (or one sub-agent type's) calls."""

    calls: int = 0
    successful_calls: int = 0
    failed_calls: int = 0
    total_duration_ms: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolStats:
    total_calls: int = 0
    successful_calls: int = 0
    failed_calls: int = 0
    total_duration_ms: int = 0
    by_tool: dict[str, CallStats] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {
            "totalCalls": self.total_calls,
            "successfulCalls": self.successful_calls,
            "failedCalls": self.failed_calls,
            "totalDurationMs": self.total_duration_ms,
            "byTool": {name: stats.to_wire() for name, stats in self.by_tool.items()},
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class SubAgentStats:
    total_calls: int = 0
    successful_calls: int = 0
    failed_calls: int = 0
    total_duration_ms: int = 0
    by_type: dict[str, CallStats] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {
            "totalCalls": self.total_calls,
            "successfulCalls": self.successful_calls,
            "failedCalls": self.failed_calls,
            "totalDurationMs": self.total_duration_ms,
            "byType": {name: stats.to_wire() for name, stats in self.by_type.items()},
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class UsageRollup:
    """A session's usage summed up (reference `UsageRollup`).

    `tokens` and `tokens_by_model` count this session's own model calls;
    `tokens_including_sub_agents` adds those of its descendant sessions. `run_id` is the run
    the rollup was limited to, or `None` for the whole session. `started_at` and
    `last_updated_at` are the times of the first and last entry counted, `None` without any.
    """

    run_id: str | None
    tokens: TokenCounts
    tokens_by_model: dict[str, TokenCounts]
    tokens_including_sub_agents: TokenCounts
    tool_stats: ToolStats
    sub_agent_stats: SubAgentStats
    custom: dict[str, dict[str, float]]
    started_at: datetime | None
    last_updated_at: datetime | None
    entry_count: int

    def to_wire(self) -> dict[str, Any]:
        """Return the reference's JSON shape; `startedAt`/`lastUpdatedAt` only when known."""
        wire: dict[str, Any] = {
            "runId": self.run_id,
            "tokens": self.tokens.to_wire(),
            "tokensByModel": {
                model: counts.to_wire() for model, counts in self.tokens_by_model.items()
            },
            "tokensIncludingSubAgents": self.tokens_including_sub_agents.to_wire(),
            "toolStats": self.tool_stats.to_wire(),
            "subAgentStats": self.sub_agent_stats.to_wire(),
            "custom": {metric_type: dict(values) for metric_type, values in self.custom.items()},
            "entryCount": self.entry_count,
        }
        if self.started_at is not None:
            wire["startedAt"] = _epoch_ms(self.started_at)
        if self.last_updated_at is not None:
            wire["lastUpdatedAt"] = _epoch_ms(self.last_updated_at)
        return wire


@dataclass(frozen=True, kw_only=True, slots=True)
class UsageGroup:
    """The sums of a session's entries that share kind, name, model and metric type.

    Backends compute these (the ORM one in a single GROUP BY query) and `rules.rollup` folds
    them into a `UsageRollup`, so every backend builds the same shape the same way.
    """

    kind: UsageKind
    name: str
    model: str
    metric_type: str
    count: int
    successful: int
    failed: int
    duration_ms: int
    tokens: TokenCounts
    value: float
    first_at: datetime
    last_at: datetime
