"""Rules every `UsageStore` backend applies the same way.

Pure functions, so the in-memory backend cannot drift from the ORM one: what an entry may hold
(and how it is normalized before it is stored), which query arguments are valid, how entries
group for a rollup, and how the groups fold into the rollup's shape.
"""

import dataclasses
import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sessions_app.errors import InvalidUsageEntry, InvalidUsageQuery
from sessions_app.stores.rules import MAX_IDENTIFIER_LENGTH, MAX_PAGE_SIZE
from sessions_app.usage.types import (
    ENTRY_CLASSES,
    CallStats,
    CustomEntry,
    SubAgentEntry,
    SubAgentStats,
    TokenCounts,
    TokensEntry,
    ToolEntry,
    ToolStats,
    UsageEntry,
    UsageGroup,
    UsageKind,
    UsageRollup,
)

# The columns are PositiveIntegerField: PostgreSQL's `integer` holds no more.
MAX_COUNT = 2**31 - 1
_TOKEN_FIELDS = tuple(field.name for field in dataclasses.fields(TokenCounts))


def prepare_entries(entries: Sequence[UsageEntry], *, now: datetime) -> list[UsageEntry]:
    """Return the entries as they are stored: checked, normalized, `created_at` filled.

    Raises `InvalidUsageEntry` naming the first bad entry's index and field. An empty `run_id`
    or `sub_session_id` becomes `None`; a `total` of 0 becomes prompt + completion; `value`
    becomes a float; `id` is cleared for the store to assign.
    """
    return [_prepare(entry, index, now) for index, entry in enumerate(entries)]


def _prepare(entry: Any, index: int, now: datetime) -> UsageEntry:
    if type(entry) not in ENTRY_CLASSES.values():
        raise InvalidUsageEntry(
            f"Usage entry {index} is a {type(entry).__name__}, not one of the usage entry "
            f"kinds ({', '.join(kind.value for kind in ENTRY_CLASSES)}).",
            field="kind",
            index=index,
        )
    common = {
        "session_id": _identifier(entry.session_id, "session_id", index),
        "run_id": _optional_identifier(entry.run_id, "run_id", index),
        "step_count": _count(entry.step_count, "step_count", index),
        "created_at": now if entry.created_at is None else _aware(entry.created_at, index),
        "id": None,
    }
    match entry:
        case TokensEntry():
            return dataclasses.replace(
                entry,
                **common,
                model=_identifier(entry.model, "model", index),
                tokens=_tokens(entry.tokens, index),
            )
        case ToolEntry():
            return dataclasses.replace(
                entry,
                **common,
                name=_identifier(entry.name, "name", index),
                success=_flag(entry.success, "success", index),
                duration_ms=_optional_count(entry.duration_ms, "duration_ms", index),
            )
        case SubAgentEntry():
            return dataclasses.replace(
                entry,
                **common,
                agent_type=_identifier(entry.agent_type, "agent_type", index),
                success=_flag(entry.success, "success", index),
                sub_session_id=_optional_identifier(entry.sub_session_id, "sub_session_id", index),
                duration_ms=_optional_count(entry.duration_ms, "duration_ms", index),
            )
        case CustomEntry():
            return dataclasses.replace(
                entry,
                **common,
                metric_type=_identifier(entry.metric_type, "metric_type", index),
                name=_identifier(entry.name, "name", index),
                value=_number(entry.value, index),
            )


def _identifier(value: Any, field: str, index: int) -> str:
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_IDENTIFIER_LENGTH
        or "\x00" in value
    ):
        raise InvalidUsageEntry(
            f"Usage entry {index}: {field} must be a non-empty string of at most "
            f"{MAX_IDENTIFIER_LENGTH} characters without NUL.",
            field=field,
            index=index,
        )
    return value


def _optional_identifier(value: Any, field: str, index: int) -> str | None:
    return None if value is None or value == "" else _identifier(value, field, index)


def _count(value: Any, field: str, index: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise InvalidUsageEntry(
            f"Usage entry {index}: {field} must be an integer from 0 to {MAX_COUNT}, "
            f"not {value!r}.",
            field=field,
            index=index,
        )
    return value


def _optional_count(value: Any, field: str, index: int) -> int | None:
    return None if value is None else _count(value, field, index)


def _flag(value: Any, field: str, index: int) -> bool:
    if not isinstance(value, bool):
        raise InvalidUsageEntry(
            f"Usage entry {index}: {field} must be true or false, not {value!r}.",
            field=field,
            index=index,
        )
    return value


def _number(value: Any, index: int) -> float:
    try:
        number = None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError, OverflowError):
        number = None
    if number is None or not isinstance(value, int | float) or not math.isfinite(number):
        raise InvalidUsageEntry(
            f"Usage entry {index}: value must be a finite number, not {value!r}.",
            field="value",
            index=index,
        )
    return number


def _aware(value: Any, index: int) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidUsageEntry(
            f"Usage entry {index}: created_at must be an aware datetime, not {value!r}.",
            field="created_at",
            index=index,
        )
    return value


def _tokens(tokens: Any, index: int) -> TokenCounts:
    if not isinstance(tokens, TokenCounts):
        raise InvalidUsageEntry(
            f"Usage entry {index}: tokens must be a TokenCounts, not {type(tokens).__name__}.",
            field="tokens",
            index=index,
        )
    counts = {
        name: _count(getattr(tokens, name), f"tokens.{name}", index) for name in _TOKEN_FIELDS
    }
    if not counts["total"]:
        counts["total"] = _count(counts["prompt"] + counts["completion"], "tokens.total", index)
    return TokenCounts(**counts)


# Query arguments


def check_kinds(
    kinds: UsageKind | str | Iterable[UsageKind | str] | None,
) -> list[UsageKind] | None:
    """Return the kinds a read filters by (`None`: every kind); unknown kinds raise."""
    if kinds is None:
        return None
    wanted = [kinds] if isinstance(kinds, str) else list(kinds)
    unknown = [kind for kind in wanted if kind not in UsageKind.values]
    if unknown:
        raise InvalidUsageQuery(
            f"Unknown usage kind {unknown[0]!r}; kinds are {', '.join(UsageKind.values)}.",
            argument="kinds",
        )
    return [UsageKind(kind) for kind in wanted]


def check_page(offset: Any, limit: Any) -> None:
    """Raise `InvalidUsageQuery` unless offset and limit describe a valid page."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidUsageQuery("offset must be a non-negative integer.", argument="offset")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidUsageQuery(
            f"limit must be an integer from 1 to {MAX_PAGE_SIZE}.", argument="limit"
        )


def check_time(value: Any, argument: str) -> datetime | None:
    """Return `value` if it is `None` or an aware datetime, else raise `InvalidUsageQuery`."""
    if value is not None and (not isinstance(value, datetime) or value.utcoffset() is None):
        raise InvalidUsageQuery(f"{argument} must be an aware datetime.", argument=argument)
    return value


def check_session_ids(session_ids: Iterable[str] | None) -> list[str] | None:
    """Return the session ids a query filters by, as a list; a lone string raises."""
    if session_ids is None:
        return None
    if isinstance(session_ids, str) or not all(isinstance(each, str) for each in session_ids):
        raise InvalidUsageQuery("session_ids must be a list of strings.", argument="session_ids")
    return list(session_ids)


# Rollups


def group_key(entry: UsageEntry) -> tuple[UsageKind, str, str, str]:
    """Return `(kind, name, model, metric_type)` as the ORM backend stores them."""
    match entry:
        case TokensEntry():
            return entry.kind, "", entry.model, ""
        case ToolEntry():
            return entry.kind, entry.name, "", ""
        case SubAgentEntry():
            return entry.kind, entry.agent_type, "", ""
        case CustomEntry():
            return entry.kind, entry.name, "", entry.metric_type


def group_entries(entries: Iterable[UsageEntry]) -> list[UsageGroup]:
    """Return the sums of the entries by `group_key`, as the ORM backend's GROUP BY does."""
    groups: dict[tuple[UsageKind, str, str, str], list[UsageEntry]] = {}
    for entry in entries:
        groups.setdefault(group_key(entry), []).append(entry)
    summed = []
    for (kind, name, model, metric_type), members in groups.items():
        outcomes = [getattr(entry, "success", None) for entry in members]
        summed.append(
            UsageGroup(
                kind=kind,
                name=name,
                model=model,
                metric_type=metric_type,
                count=len(members),
                successful=outcomes.count(True),
                failed=outcomes.count(False),
                duration_ms=sum(getattr(entry, "duration_ms", None) or 0 for entry in members),
                tokens=sum_tokens(members),
                value=sum(getattr(entry, "value", 0.0) for entry in members),
                first_at=min(entry.created_at for entry in members),
                last_at=max(entry.created_at for entry in members),
            )
        )
    return summed


def sum_tokens(entries: Iterable[UsageEntry]) -> TokenCounts:
    """Return the token counts of the tokens entries among `entries`, added up."""
    total = TokenCounts()
    for entry in entries:
        if isinstance(entry, TokensEntry):
            total += entry.tokens
    return total


def rollup(
    run_id: str | None, groups: Iterable[UsageGroup], sub_agent_tokens: TokenCounts
) -> UsageRollup:
    """Fold a session's groups into its rollup; `sub_agent_tokens` are its descendants' tokens.

    Maps are keyed in sorted order, so equal rollups have equal wire forms.
    """
    groups = sorted(groups, key=lambda g: (g.kind, g.metric_type, g.name, g.model))
    tokens_by_model: dict[str, TokenCounts] = {}
    by_tool: dict[str, CallStats] = {}
    by_type: dict[str, CallStats] = {}
    custom: dict[str, dict[str, float]] = {}
    for group in groups:
        calls = CallStats(
            calls=group.count,
            successful_calls=group.successful,
            failed_calls=group.failed,
            total_duration_ms=group.duration_ms,
        )
        match group.kind:
            case UsageKind.TOKENS:
                tokens_by_model[group.model] = group.tokens
            case UsageKind.TOOL:
                by_tool[group.name] = calls
            case UsageKind.SUBAGENT:
                by_type[group.name] = calls
            case UsageKind.CUSTOM:
                custom.setdefault(group.metric_type, {})[group.name] = group.value
    tokens = sum(tokens_by_model.values(), TokenCounts())
    tools = sum(by_tool.values(), CallStats())
    sub_agents = sum(by_type.values(), CallStats())
    return UsageRollup(
        run_id=run_id,
        tokens=tokens,
        tokens_by_model=tokens_by_model,
        tokens_including_sub_agents=tokens + sub_agent_tokens,
        tool_stats=ToolStats(
            total_calls=tools.calls,
            successful_calls=tools.successful_calls,
            failed_calls=tools.failed_calls,
            total_duration_ms=tools.total_duration_ms,
            by_tool=by_tool,
        ),
        sub_agent_stats=SubAgentStats(
            total_calls=sub_agents.calls,
            successful_calls=sub_agents.successful_calls,
            failed_calls=sub_agents.failed_calls,
            total_duration_ms=sub_agents.total_duration_ms,
            by_type=by_type,
        ),
        custom=custom,
        started_at=min((group.first_at for group in groups), default=None),
        last_updated_at=max((group.last_at for group in groups), default=None),
        entry_count=sum(group.count for group in groups),
    )
