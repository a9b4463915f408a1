"""The `UsageStore` conformance suite: every method and every error, on every backend.

Each test runs against the in-memory and the ORM backend, each paired with the session store of
its kind; the ORM backend runs on SQLite or PostgreSQL depending on DATABASE_URL (`.ci/run` runs
both). The tests after the suite cover what belongs to one backend or to the configuration.
"""

import dataclasses
import inspect
import math
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sessions_app.errors import InvalidInput, InvalidUsageEntry, InvalidUsageQuery, SessionNotFound
from sessions_app.models import AgentSession
from sessions_app.stores import get_session_store
from sessions_app.stores.base import SessionStateStore
from sessions_app.stores.memory import InMemorySessionStateStore
from sessions_app.stores.orm import ORMSessionStateStore
from sessions_app.usage import get_usage_store
from sessions_app.usage.base import UsageStore
from sessions_app.usage.memory import InMemoryUsageStore
from sessions_app.usage.orm import ORMUsageStore
from sessions_app.usage.types import (
    CallStats,
    CustomEntry,
    SubAgentEntry,
    SubAgentStats,
    TokenCounts,
    TokensEntry,
    ToolEntry,
    ToolStats,
    UsageKind,
    UsageRollup,
)


def _memory_backends() -> tuple[SessionStateStore, UsageStore]:
    sessions = InMemorySessionStateStore()
    return sessions, InMemoryUsageStore(session_store=sessions)


def _orm_backends() -> tuple[SessionStateStore, UsageStore]:
    return ORMSessionStateStore(), ORMUsageStore()


USAGE_BACKENDS = {"memory": _memory_backends, "orm": _orm_backends}

# 2025-01-01T00:00:00.123Z, 1735689600123 ms after the epoch.
T0 = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(milliseconds=123)
T0_MS = 1_735_689_600_123


@pytest.fixture(params=sorted(USAGE_BACKENDS))
def backends(request: pytest.FixtureRequest, db: None) -> tuple[SessionStateStore, UsageStore]:
    """Return each pair of session store and usage store in turn, with database access."""
    return USAGE_BACKENDS[request.param]()


@pytest.fixture
def sessions(backends) -> SessionStateStore:
    return backends[0]


@pytest.fixture
def usage(backends) -> UsageStore:
    return backends[1]


@pytest.fixture
def session_id(sessions) -> str:
    """Return the id of a fresh session, `s`, of agent type `assistant`."""
    return sessions.create_session("s", agent_type="assistant").session_id


def tokens(session_id: str, model: str = "gpt-a", **fields) -> TokensEntry:
    counts = {
        name: fields.pop(name)
        for name in ("prompt", "completion", "reasoning", "cached", "total")
        if name in fields
    }
    return TokensEntry(session_id=session_id, model=model, tokens=TokenCounts(**counts), **fields)


def tool(session_id: str, name: str = "search", **fields) -> ToolEntry:
    return ToolEntry(session_id=session_id, name=name, **{"success": True, **fields})


def sub_agent(session_id: str, agent_type: str = "researcher", **fields) -> SubAgentEntry:
    return SubAgentEntry(
        session_id=session_id, agent_type=agent_type, **{"success": True, **fields}
    )


def custom(session_id: str, metric_type: str, name: str, value: float, **fields) -> CustomEntry:
    return CustomEntry(
        session_id=session_id, metric_type=metric_type, name=name, value=value, **fields
    )


def stored(entry, stored_entry):
    """Return `entry` as the store should have stored it, given the copy it returned."""
    return dataclasses.replace(entry, id=stored_entry.id, created_at=stored_entry.created_at)


def recorded_total(usage: UsageStore) -> int:
    return usage.query_usage().total


# The contract itself


def test_every_method_has_an_async_twin_that_returns_the_same_result(usage, session_id):
    names = sorted(UsageStore.__abstractmethods__ | {"record_entry", "add_entries"})
    assert names == [
        "add_entries",
        "get_entries",
        "get_rollup",
        "query_usage",
        "record_entries",
        "record_entry",
    ]
    for name in names:
        assert inspect.iscoroutinefunction(getattr(usage, f"a{name}")), name

    one = async_to_sync(usage.arecord_entry)(tokens(session_id, prompt=3))
    two = async_to_sync(usage.arecord_entries)([tool(session_id), custom(session_id, "m", "n", 1)])
    assert async_to_sync(usage.aadd_entries)([tool(session_id, "other")]) is None

    assert async_to_sync(usage.aget_entries)(session_id)[:3] == [one, *two]
    assert async_to_sync(usage.aget_rollup)(session_id) == usage.get_rollup(session_id)
    assert async_to_sync(usage.aquery_usage)(limit=2) == usage.query_usage(limit=2)
    assert usage.get_rollup(session_id).entry_count == 4


# Recording


def test_record_entry_returns_the_entry_with_an_id_and_the_time_it_was_recorded(usage, session_id):
    before = timezone.now()
    entry = usage.record_entry(tokens(session_id, prompt=10, completion=2))
    after = timezone.now()

    assert isinstance(entry, TokensEntry)
    assert isinstance(entry.id, int)
    assert before <= entry.created_at <= after
    assert entry == TokensEntry(
        session_id=session_id,
        model="gpt-a",
        tokens=TokenCounts(prompt=10, completion=2, total=12),
        id=entry.id,
        created_at=entry.created_at,
    )
    assert usage.get_entries(session_id) == [entry]


def test_every_kind_keeps_every_field(usage, session_id):
    entries = [
        TokensEntry(
            session_id=session_id,
            run_id="run-1",
            step_count=3,
            created_at=T0,
            model="gpt-a",
            tokens=TokenCounts(prompt=100, completion=20, reasoning=5, cached=40, total=125),
        ),
        ToolEntry(
            session_id=session_id,
            run_id="run-1",
            step_count=3,
            created_at=T0 + timedelta(seconds=1),
            name="search",
            success=False,
            duration_ms=250,
        ),
        SubAgentEntry(
            session_id=session_id,
            run_id="run-1",
            step_count=4,
            created_at=T0 + timedelta(seconds=2),
            agent_type="researcher",
            success=True,
            sub_session_id="child-1",
            duration_ms=4000,
        ),
        CustomEntry(
            session_id=session_id,
            run_id="run-1",
            step_count=4,
            created_at=T0 + timedelta(seconds=3),
            metric_type="api_calls",
            name="tavily",
            value=2.5,
        ),
    ]

    recorded = usage.record_entries(entries)

    assert recorded == [stored(entry, copy) for entry, copy in zip(entries, recorded, strict=True)]
    assert [entry.created_at for entry in recorded] == [entry.created_at for entry in entries]
    assert usage.get_entries(session_id) == recorded


def test_optional_fields_default_and_empty_ids_become_none(usage, session_id):
    recorded = usage.record_entries(
        [
            tool(session_id, run_id=""),
            sub_agent(session_id, sub_session_id=""),
            custom(session_id, "bytes", "input", 1024),
        ]
    )

    assert [(entry.run_id, entry.step_count) for entry in recorded] == [(None, 0)] * 3
    assert recorded[0].duration_ms is None
    assert recorded[1].sub_session_id is None
    assert recorded[2].value == 1024.0
    assert isinstance(recorded[2].value, float)
    assert usage.get_entries(session_id) == recorded


def test_total_tokens_default_to_prompt_plus_completion(usage, session_id):
    derived = usage.record_entry(tokens(session_id, prompt=100, completion=20, reasoning=7))
    reported = usage.record_entry(tokens(session_id, prompt=100, completion=20, total=150))

    assert derived.tokens.total == 120
    assert reported.tokens.total == 150
    assert [entry.tokens.total for entry in usage.get_entries(session_id)] == [120, 150]


def test_record_entries_keep_their_order_with_increasing_ids(usage, session_id, sessions):
    other = sessions.create_session("other", agent_type="assistant").session_id
    batch = [
        tool(session_id, "a"),
        tool(other, "b"),
        tool(session_id, "c"),
        tool(session_id, "d"),
    ]

    first = usage.record_entries(batch)
    second = usage.record_entry(tool(session_id, "e"))

    ids = [entry.id for entry in [*first, second]]
    assert ids == sorted(ids)
    assert len(set(ids)) == 5
    assert [entry.name for entry in usage.get_entries(session_id)] == ["a", "c", "d", "e"]
    assert [entry.name for entry in usage.get_entries(other)] == ["b"]


def test_recording_nothing_records_nothing(usage, session_id):
    assert usage.record_entries([]) == []
    assert recorded_total(usage) == 0


def test_entries_recorded_under_a_held_session_lock_are_stored_as_any_other(usage, session_id):
    with transaction.atomic():
        recorded = usage.record_entries(
            [tokens(session_id, prompt=3), tool(session_id)], sessions_locked=True
        )

    assert usage.get_entries(session_id) == recorded
    assert [entry.kind for entry in recorded] == [UsageKind.TOKENS, UsageKind.TOOL]


def test_added_entries_are_stored_as_recorded_ones_are(usage, session_id):
    entries = [tokens(session_id, prompt=3, completion=2), tool(session_id), tool(session_id, "b")]
    with transaction.atomic():
        usage.add_entries(entries, sessions_locked=True)

    added = usage.get_entries(session_id)
    assert [(entry.kind, entry.session_id) for entry in added] == [
        (UsageKind.TOKENS, session_id),
        (UsageKind.TOOL, session_id),
        (UsageKind.TOOL, session_id),
    ]
    assert (added[0].tokens.prompt, added[0].tokens.total) == (3, 5)
    assert [added[1].name, added[2].name] == ["search", "b"]
    assert [entry.id for entry in added] == sorted({entry.id for entry in added})
    assert usage.get_rollup(session_id).entry_count == 3


def test_adding_for_a_missing_session_or_a_bad_entry_raises_and_writes_nothing(usage, session_id):
    with pytest.raises(SessionNotFound):
        usage.add_entries([tokens(session_id, prompt=1), tool("ghost")])
    with pytest.raises(InvalidUsageEntry):
        usage.add_entries([tokens(session_id, prompt=1), tool(session_id, duration_ms=-1)])

    assert recorded_total(usage) == 0


def recorded_under_a_lock(record) -> tuple[list[str], int]:
    """Record with `record(usage, session_id)` on the ORM store while holding the session's
    lock, as a step commit does; return the statements it sent and how many entries it stored.
    """
    sessions, usage = _orm_backends()
    session_id = sessions.create_session("s", agent_type="assistant").session_id
    with transaction.atomic():
        AgentSession.objects.select_for_update().get(pk=session_id)
        with CaptureQueriesContext(connection) as queries:
            record(usage, session_id)
    return [query["sql"] for query in queries], len(usage.get_entries(session_id))


def test_the_orm_store_adds_entries_without_reading_back_their_ids(db):
    statements, stored_count = recorded_under_a_lock(
        lambda usage, session_id: usage.add_entries(
            [tokens(session_id, prompt=3), tool(session_id)], sessions_locked=True
        )
    )

    (insert,) = statements
    assert insert.startswith("INSERT")
    assert "RETURNING" not in insert.upper()
    assert stored_count == 2


def test_the_orm_store_does_not_look_up_sessions_its_caller_holds_locked(db):
    statements, stored_count = recorded_under_a_lock(
        lambda usage, session_id: usage.record_entries(
            [tokens(session_id, prompt=3)], sessions_locked=True
        )
    )

    assert [sql.split()[0] for sql in statements] == ["INSERT"]
    assert stored_count == 1


def test_recording_for_a_missing_session_raises_and_writes_nothing(usage, session_id):
    with pytest.raises(SessionNotFound) as caught:
        usage.record_entries([tokens(session_id, prompt=1), tool("ghost")])

    assert caught.value.code == "session-not-found"
    assert caught.value.http_status == 404
    assert caught.value.details == {"session_id": "ghost"}
    with pytest.raises(SessionNotFound):
        usage.record_entry(tokens("ghost", prompt=1))
    assert usage.get_entries(session_id) == []
    assert recorded_total(usage) == 0


class NotAnEntry:
    kind = "tokens"
    session_id = "s"


BAD_ENTRIES = {
    "negative prompt tokens": (lambda s: tokens(s, prompt=-1), "tokens.prompt"),
    "negative total tokens": (lambda s: tokens(s, prompt=1, total=-5), "tokens.total"),
    "fractional tokens": (lambda s: tokens(s, completion=1.5), "tokens.completion"),
    "boolean tokens": (lambda s: tokens(s, cached=True), "tokens.cached"),
    "tokens past the column": (lambda s: tokens(s, reasoning=2**31), "tokens.reasoning"),
    "a total past the column": (
        lambda s: tokens(s, prompt=2**31 - 1, completion=1),
        "tokens.total",
    ),
    "tokens not as TokenCounts": (
        lambda s: TokensEntry(session_id=s, model="m", tokens={"prompt": 1}),
        "tokens",
    ),
    "tokens without a model": (lambda s: tokens(s, "", prompt=1), "model"),
    "a tool without a name": (lambda s: tool(s, ""), "name"),
    "a tool named None": (lambda s: tool(s, None), "name"),
    "a tool call neither failed nor succeeded": (lambda s: tool(s, success=None), "success"),
    "a negative duration": (lambda s: tool(s, duration_ms=-1), "duration_ms"),
    "a fractional duration": (lambda s: sub_agent(s, duration_ms=1.5), "duration_ms"),
    "a sub-agent without a type": (lambda s: sub_agent(s, ""), "agent_type"),
    "a sub-agent success of 1": (lambda s: sub_agent(s, success=1), "success"),
    "a custom metric without a type": (lambda s: custom(s, "", "n", 1), "metric_type"),
    "a custom metric without a name": (lambda s: custom(s, "t", "", 1), "name"),
    "a custom value of NaN": (lambda s: custom(s, "t", "n", math.nan), "value"),
    "an infinite custom value": (lambda s: custom(s, "t", "n", math.inf), "value"),
    "a custom value as text": (lambda s: custom(s, "t", "n", "5"), "value"),
    "a custom value no float holds": (lambda s: custom(s, "t", "n", 10**400), "value"),
    "a negative step count": (lambda s: tool(s, step_count=-1), "step_count"),
    "an empty session id": (lambda s: tool(""), "session_id"),
    "a run id past the column": (lambda s: tool(s, run_id="r" * 256), "run_id"),
    "a name holding NUL": (lambda s: tool(s, "se\x00arch"), "name"),
    "a naive creation time": (
        lambda s: tool(s, created_at=datetime(2025, 1, 1)),  # noqa: DTZ001
        "created_at",
    ),
    "a dict for an entry": (lambda s: {"kind": "tokens", "session_id": s}, "kind"),
    "an object of an unknown kind": (lambda s: NotAnEntry(), "kind"),
}


@pytest.mark.parametrize("case", BAD_ENTRIES, ids=list(BAD_ENTRIES))
def test_bad_entries_raise_a_domain_error_and_write_nothing(usage, session_id, case):
    make_entry, field = BAD_ENTRIES[case]

    with pytest.raises(InvalidUsageEntry) as caught:
        usage.record_entries([tokens(session_id, prompt=1), make_entry(session_id)])

    error = caught.value
    assert isinstance(error, InvalidInput)
    assert isinstance(error, ValueError)
    assert (error.code, error.http_status) == ("invalid-usage-entry", 400)
    assert error.details == {"field": field, "index": 1}
    assert field.split(".")[-1] in error.message
    assert usage.get_entries(session_id) == []
    assert recorded_total(usage) == 0


def test_entries_have_a_camel_case_wire_form(usage, session_id):
    recorded = usage.record_entries(
        [
            tokens(session_id, prompt=5, completion=1, run_id="r", step_count=2, created_at=T0),
            tool(session_id, "fetch", success=False, duration_ms=9, created_at=T0),
            sub_agent(session_id, sub_session_id="c", duration_ms=7, created_at=T0),
            custom(session_id, "bytes", "input", 3, created_at=T0),
        ]
    )
    common = {"sessionId": session_id, "timestamp": T0_MS}

    assert [entry.to_wire() for entry in recorded] == [
        {
            **common,
            "id": recorded[0].id,
            "kind": "tokens",
            "runId": "r",
            "stepCount": 2,
            "model": "gpt-a",
            "tokens": {"prompt": 5, "completion": 1, "reasoning": 0, "cached": 0, "total": 6},
        },
        {
            **common,
            "id": recorded[1].id,
            "kind": "tool",
            "runId": None,
            "stepCount": 0,
            "name": "fetch",
            "success": False,
            "durationMs": 9,
        },
        {
            **common,
            "id": recorded[2].id,
            "kind": "subagent",
            "runId": None,
            "stepCount": 0,
            "agentType": "researcher",
            "subSessionId": "c",
            "success": True,
            "durationMs": 7,
        },
        {
            **common,
            "id": recorded[3].id,
            "kind": "custom",
            "runId": None,
            "stepCount": 0,
            "metricType": "bytes",
            "name": "input",
            "value": 3.0,
        },
    ]


# Reading a session's entries


def test_get_entries_filters_by_kinds_and_run(usage, session_id, sessions):
    other = sessions.create_session("other", agent_type="assistant").session_id
    usage.record_entries(
        [
            tokens(session_id, prompt=1, run_id="r1"),
            tool(session_id, "t1", run_id="r1"),
            tokens(other, prompt=2, run_id="r1"),
            sub_agent(session_id, run_id="r2"),
            tokens(session_id, prompt=3, run_id="r2"),
            custom(session_id, "m", "n", 1),
        ]
    )

    def described(entries):
        return [(entry.kind, entry.run_id) for entry in entries]

    assert described(usage.get_entries(session_id)) == [
        ("tokens", "r1"),
        ("tool", "r1"),
        ("subagent", "r2"),
        ("tokens", "r2"),
        ("custom", None),
    ]
    assert described(usage.get_entries(session_id, kinds=["tokens"])) == [
        ("tokens", "r1"),
        ("tokens", "r2"),
    ]
    assert described(usage.get_entries(session_id, kinds=UsageKind.TOOL)) == [("tool", "r1")]
    assert described(usage.get_entries(session_id, kinds=["subagent", "custom"])) == [
        ("subagent", "r2"),
        ("custom", None),
    ]
    assert described(usage.get_entries(session_id, run_id="r2")) == [
        ("subagent", "r2"),
        ("tokens", "r2"),
    ]
    assert described(usage.get_entries(session_id, kinds=["tokens"], run_id="r1")) == [
        ("tokens", "r1")
    ]
    assert usage.get_entries(session_id, kinds=[]) == []
    assert usage.get_entries(session_id, run_id="r9") == []


def test_reads_of_a_missing_session_raise(usage):
    with pytest.raises(SessionNotFound) as caught:
        usage.get_entries("ghost")
    assert caught.value.details == {"session_id": "ghost"}
    with pytest.raises(SessionNotFound):
        usage.get_rollup("ghost")
    with pytest.raises(SessionNotFound):
        usage.get_rollup("ghost", run_id="r1")


def test_get_entries_rejects_unknown_kinds(usage, session_id):
    with pytest.raises(InvalidUsageQuery) as caught:
        usage.get_entries(session_id, kinds=["tokens", "llm"])

    assert (caught.value.code, caught.value.http_status) == ("invalid-usage-query", 400)
    assert caught.value.details == {"argument": "kinds"}
    assert "llm" in caught.value.message


# Rollups


@pytest.fixture
def busy_session(usage, sessions, session_id) -> str:
    """Record two models' tokens, three tool calls, three sub-agent calls and five metrics."""
    other = sessions.create_session("other", agent_type="assistant").session_id
    entries = [
        tokens(session_id, "gpt-a", prompt=100, completion=20, reasoning=5, cached=10),
        tokens(session_id, "gpt-b", prompt=50, completion=5, total=60),
        tokens(session_id, "gpt-a", prompt=200, completion=40, cached=30, step_count=2),
        tool(session_id, "search", duration_ms=120),
        tool(session_id, "search", success=False, duration_ms=30),
        tool(session_id, "fetch"),
        sub_agent(session_id, "researcher", sub_session_id="c1", duration_ms=1000),
        sub_agent(session_id, "researcher", duration_ms=500),
        sub_agent(session_id, "critic", success=False, duration_ms=200),
        custom(session_id, "api_calls", "tavily", 2),
        custom(session_id, "api_calls", "tavily", 3),
        custom(session_id, "api_calls", "serper", 1),
        custom(session_id, "bytes", "input", 1024),
        custom(session_id, "bytes", "output", 512.5),
    ]
    # Recorded out of time order: the rollup's times are the earliest and latest.
    times = [T0 + timedelta(seconds=n) for n in range(len(entries))]
    times[0], times[5] = times[5], times[0]
    usage.record_entries(
        [
            dataclasses.replace(entry, created_at=at)
            for entry, at in zip(entries, times, strict=True)
        ]
    )
    usage.record_entry(tokens(other, "gpt-a", prompt=999, created_at=T0 - timedelta(days=1)))
    return session_id


def test_rollup_sums_tokens_tools_sub_agents_and_custom_metrics(usage, busy_session):
    gpt_a = TokenCounts(prompt=300, completion=60, reasoning=5, cached=40, total=360)
    gpt_b = TokenCounts(prompt=50, completion=5, total=60)
    all_tokens = TokenCounts(prompt=350, completion=65, reasoning=5, cached=40, total=420)

    rollup = usage.get_rollup(busy_session)

    assert rollup == UsageRollup(
        run_id=None,
        tokens=all_tokens,
        tokens_by_model={"gpt-a": gpt_a, "gpt-b": gpt_b},
        tokens_including_sub_agents=all_tokens,
        tool_stats=ToolStats(
            total_calls=3,
            successful_calls=2,
            failed_calls=1,
            total_duration_ms=150,
            by_tool={
                "fetch": CallStats(calls=1, successful_calls=1),
                "search": CallStats(
                    calls=2, successful_calls=1, failed_calls=1, total_duration_ms=150
                ),
            },
        ),
        sub_agent_stats=SubAgentStats(
            total_calls=3,
            successful_calls=2,
            failed_calls=1,
            total_duration_ms=1700,
            by_type={
                "critic": CallStats(calls=1, failed_calls=1, total_duration_ms=200),
                "researcher": CallStats(calls=2, successful_calls=2, total_duration_ms=1500),
            },
        ),
        custom={
            "api_calls": {"serper": 1.0, "tavily": 5.0},
            "bytes": {"input": 1024.0, "output": 512.5},
        },
        started_at=T0,
        last_updated_at=T0 + timedelta(seconds=13),
        entry_count=14,
    )


def test_rollup_wire_form_is_the_reference_shape(usage, busy_session):
    wire = usage.get_rollup(busy_session).to_wire()

    assert wire == {
        "runId": None,
        "tokens": {"prompt": 350, "completion": 65, "reasoning": 5, "cached": 40, "total": 420},
        "tokensByModel": {
            "gpt-a": {"prompt": 300, "completion": 60, "reasoning": 5, "cached": 40, "total": 360},
            "gpt-b": {"prompt": 50, "completion": 5, "reasoning": 0, "cached": 0, "total": 60},
        },
        "tokensIncludingSubAgents": {
            "prompt": 350,
            "completion": 65,
            "reasoning": 5,
            "cached": 40,
            "total": 420,
        },
        "toolStats": {
            "totalCalls": 3,
            "successfulCalls": 2,
            "failedCalls": 1,
            "totalDurationMs": 150,
            "byTool": {
                "fetch": {"calls": 1, "successfulCalls": 1, "failedCalls": 0, "totalDurationMs": 0},
                "search": {
                    "calls": 2,
                    "successfulCalls": 1,
                    "failedCalls": 1,
                    "totalDurationMs": 150,
                },
            },
        },
        "subAgentStats": {
            "totalCalls": 3,
            "successfulCalls": 2,
            "failedCalls": 1,
            "totalDurationMs": 1700,
            "byType": {
                "critic": {
                    "calls": 1,
                    "successfulCalls": 0,
                    "failedCalls": 1,
                    "totalDurationMs": 200,
                },
                "researcher": {
                    "calls": 2,
                    "successfulCalls": 2,
                    "failedCalls": 0,
                    "totalDurationMs": 1500,
                },
            },
        },
        "custom": {
            "api_calls": {"serper": 1.0, "tavily": 5.0},
            "bytes": {"input": 1024.0, "output": 512.5},
        },
        "startedAt": T0_MS,
        "lastUpdatedAt": T0_MS + 13_000,
        "entryCount": 14,
    }
    assert list(wire["tokensByModel"]) == ["gpt-a", "gpt-b"]
    assert list(wire["toolStats"]["byTool"]) == ["fetch", "search"]


def test_rollup_of_a_session_without_usage_is_empty(usage, session_id):
    rollup = usage.get_rollup(session_id)

    assert rollup == UsageRollup(
        run_id=None,
        tokens=TokenCounts(),
        tokens_by_model={},
        tokens_including_sub_agents=TokenCounts(),
        tool_stats=ToolStats(),
        sub_agent_stats=SubAgentStats(),
        custom={},
        started_at=None,
        last_updated_at=None,
        entry_count=0,
    )
    wire = rollup.to_wire()
    assert "startedAt" not in wire
    assert "lastUpdatedAt" not in wire
    assert wire["entryCount"] == 0


def test_rollup_limited_to_a_run_counts_only_that_run(usage, session_id):
    usage.record_entries(
        [
            tokens(session_id, "gpt-a", prompt=10, run_id="r1", created_at=T0),
            tool(session_id, "search", run_id="r1", created_at=T0 + timedelta(seconds=1)),
            tokens(session_id, "gpt-b", prompt=20, run_id="r2", created_at=T0 + timedelta(hours=1)),
            custom(session_id, "m", "n", 4, run_id="r2", created_at=T0 + timedelta(hours=2)),
            tokens(session_id, "gpt-a", prompt=40, created_at=T0 + timedelta(hours=3)),
        ]
    )

    first = usage.get_rollup(session_id, run_id="r1")
    second = usage.get_rollup(session_id, run_id="r2")
    whole = usage.get_rollup(session_id)
    unknown = usage.get_rollup(session_id, run_id="r9")

    assert (first.run_id, first.entry_count, first.tokens.prompt) == ("r1", 2, 10)
    assert first.tokens_by_model == {"gpt-a": TokenCounts(prompt=10, total=10)}
    assert first.tool_stats.total_calls == 1
    assert first.custom == {}
    assert (first.started_at, first.last_updated_at) == (T0, T0 + timedelta(seconds=1))
    assert (second.run_id, second.entry_count, second.tokens.prompt) == ("r2", 2, 20)
    assert second.tool_stats.total_calls == 0
    assert second.custom == {"m": {"n": 4.0}}
    assert second.started_at == T0 + timedelta(hours=1)
    assert (whole.run_id, whole.entry_count, whole.tokens.prompt) == (None, 5, 70)
    assert whole.last_updated_at == T0 + timedelta(hours=3)
    assert (unknown.run_id, unknown.entry_count, unknown.started_at) == ("r9", 0, None)
    assert first.to_wire()["runId"] == "r1"


@pytest.fixture
def family(usage, sessions) -> None:
    """Build two session trees with tokens: P -> C -> G, P -> C2; X -> Y."""
    tree = {"P": None, "C": "P", "G": "C", "C2": "P", "X": None, "Y": "X"}
    for name, parent in tree.items():
        root = None if parent is None else ("X" if name == "Y" else "P")
        sessions.create_session(
            name, agent_type="agent", parent_session_id=parent, root_session_id=root
        )
    usage.record_entries(
        [
            tokens("P", prompt=10, run_id="r1"),
            tokens("C", prompt=100, completion=1, reasoning=3, cached=4),
            tokens("G", prompt=1000, completion=2),
            tokens("C2", prompt=10000),
            tokens("X", prompt=7),
            tokens("Y", prompt=70),
            # Sub-agents record more than tokens; only tokens are summed.
            tool("C", "search"),
            custom("G", "m", "n", 5),
        ]
    )


def including(usage: UsageStore, session_id: str, **kwargs) -> TokenCounts:
    return usage.get_rollup(session_id, **kwargs).tokens_including_sub_agents


def test_tokens_including_sub_agents_add_every_descendant(usage, family):
    assert including(usage, "P") == TokenCounts(
        prompt=11110, completion=3, reasoning=3, cached=4, total=11113
    )
    assert usage.get_rollup("P").tokens == TokenCounts(prompt=10, total=10)
    assert including(usage, "C") == TokenCounts(
        prompt=1100, completion=3, reasoning=3, cached=4, total=1103
    )
    assert including(usage, "G") == TokenCounts(prompt=1000, completion=2, total=1002)
    assert including(usage, "C2").total == 10000
    assert including(usage, "X").total == 77
    assert including(usage, "Y").total == 70
    assert usage.get_rollup("C").entry_count == 2


def test_a_run_rollup_includes_the_sub_agents_its_run_called(usage, sessions, family):
    usage.record_entries(
        [
            sub_agent("P", run_id="r1", sub_session_id="C"),
            tokens("P", prompt=2, run_id="r2"),
            sub_agent("P", run_id="r2", sub_session_id="C2"),
            # Neither a child of P nor a session at all: not counted.
            sub_agent("P", run_id="r2", sub_session_id="Y"),
            sub_agent("P", run_id="r2", sub_session_id="ghost"),
            sub_agent("P", run_id="r2"),
        ]
    )

    assert including(usage, "P", run_id="r1").total == 10 + 101 + 1002
    assert including(usage, "P", run_id="r2").total == 2 + 10000
    assert including(usage, "P", run_id="r3") == TokenCounts()
    assert including(usage, "P").total == 12 + 101 + 1002 + 10000
    assert usage.get_rollup("P", run_id="r2").sub_agent_stats.total_calls == 4


def test_a_parent_cycle_neither_loops_nor_counts_a_session_twice(usage, sessions):
    sessions.create_session("A", agent_type="agent", parent_session_id="B")
    sessions.create_session("B", agent_type="agent", parent_session_id="A")
    usage.record_entries([tokens("A", prompt=1), tokens("B", prompt=10)])

    assert including(usage, "A").total == 11
    assert including(usage, "B").total == 11


def test_deleting_a_session_deletes_its_usage(usage, sessions, family):
    sessions.delete_session("C")

    assert including(usage, "P").total == 10 + 10000
    assert usage.query_usage(session_ids=["C"]).total == 0
    with pytest.raises(SessionNotFound):
        usage.get_entries("C")

    sessions.create_session("C", agent_type="agent", parent_session_id="P")
    assert usage.get_entries("C") == []
    assert usage.get_rollup("C").entry_count == 0
    assert usage.query_usage(session_ids=["C"]).total == 0
    # G names C as its parent, so the new C is its parent: G counts again, the old C does not.
    assert including(usage, "P").total == 10 + 10000 + 1002


# Queries across sessions


@pytest.fixture
def ledger(usage, sessions, owner) -> dict[str, int]:
    """Record seven entries a minute apart across three sessions; return the times by name."""
    sessions.create_session("alpha", agent_type="researcher", owner_id=owner.pk)
    sessions.create_session("beta", agent_type="writer", owner_id=owner.pk)
    sessions.create_session("gamma", agent_type="researcher")
    entries = {
        "a1": tokens("alpha", "gpt-a", prompt=1),
        "b1": tokens("beta", "gpt-b", prompt=2),
        "g1": tool("gamma", "search"),
        "a2": custom("alpha", "bytes", "in", 3),
        "g2": tokens("gamma", "gpt-a", prompt=4),
        "b2": sub_agent("beta", "critic"),
        "a3": tokens("alpha", "gpt-b", prompt=5),
    }
    # Recorded in reverse: the query orders by time, not by recording.
    times = {name: T0 + timedelta(minutes=n) for n, name in enumerate(entries)}
    usage.record_entries(
        [
            dataclasses.replace(entries[name], created_at=times[name])
            for name in reversed(list(entries))
        ]
    )
    return times


def labels(page) -> list[str]:
    """Return each entry as `<session initial><kind initial>`, e.g. `at` for alpha's tokens."""
    return [f"{entry.session_id[0]}{entry.kind[0]}" for entry in page.entries]


def test_query_usage_returns_every_entry_in_time_order(usage, ledger):
    page = usage.query_usage()

    assert labels(page) == ["at", "bt", "gt", "ac", "gt", "bs", "at"]
    assert [entry.created_at for entry in page.entries] == sorted(ledger.values())
    assert (page.total, page.offset, page.limit, page.has_more) == (7, 0, 100, False)


def test_query_usage_filters_by_each_argument(usage, ledger, owner, stranger):
    assert labels(usage.query_usage(session_ids=["alpha", "gamma", "ghost"])) == [
        "at",
        "gt",
        "ac",
        "gt",
        "at",
    ]
    assert labels(usage.query_usage(session_ids=[])) == []
    assert labels(usage.query_usage(agent_type="writer")) == ["bt", "bs"]
    assert labels(usage.query_usage(kinds=["tool", "subagent"])) == ["gt", "bs"]
    assert labels(usage.query_usage(kinds="custom")) == ["ac"]
    assert [entry.tokens.prompt for entry in usage.query_usage(model="gpt-a").entries] == [1, 4]
    assert labels(usage.query_usage(model="")) == []
    assert labels(usage.query_usage(owner_id=owner.pk)) == ["at", "bt", "ac", "bs", "at"]
    assert labels(usage.query_usage(owner_id=stranger.pk)) == []


def test_query_usage_since_is_inclusive_and_until_exclusive(usage, ledger):
    window = usage.query_usage(since=ledger["g1"], until=ledger["b2"])
    before = usage.query_usage(until=ledger["g1"])
    after = usage.query_usage(since=ledger["b2"])

    assert [entry.created_at for entry in window.entries] == [
        ledger["g1"],
        ledger["a2"],
        ledger["g2"],
    ]
    assert window.total + before.total + after.total == 7
    assert labels(before) == ["at", "bt"]
    assert labels(after) == ["bs", "at"]


def test_query_usage_combines_filters(usage, ledger, owner):
    page = usage.query_usage(
        agent_type="researcher",
        owner_id=owner.pk,
        kinds=["tokens"],
        model="gpt-b",
        since=ledger["a1"],
    )

    assert [(entry.session_id, entry.tokens.prompt) for entry in page.entries] == [("alpha", 5)]
    assert page.total == 1


def test_query_usage_paginates(usage, ledger):
    first = usage.query_usage(limit=3)
    second = usage.query_usage(offset=3, limit=3)
    last = usage.query_usage(offset=6, limit=3)
    beyond = usage.query_usage(offset=10, limit=3)

    assert (labels(first), first.total, first.has_more) == (["at", "bt", "gt"], 7, True)
    assert (labels(second), second.offset, second.has_more) == (["ac", "gt", "bs"], 3, True)
    assert (labels(last), last.has_more) == (["at"], False)
    assert (beyond.entries, beyond.total, beyond.has_more) == ([], 7, False)
    assert first.entries + second.entries + last.entries == usage.query_usage().entries


def test_entries_at_the_same_time_come_in_recording_order(usage, session_id):
    usage.record_entries([tool(session_id, name, created_at=T0) for name in "cab"])

    assert [entry.name for entry in usage.query_usage().entries] == ["c", "a", "b"]
    assert [entry.name for entry in usage.get_entries(session_id)] == ["c", "a", "b"]


@pytest.mark.parametrize(
    ("arguments", "argument"),
    [
        ({"offset": -1}, "offset"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"kinds": ["tokens", "bogus"]}, "kinds"),
        ({"since": datetime(2025, 1, 1)}, "since"),  # noqa: DTZ001
        ({"until": "2025-01-01"}, "until"),
        ({"session_ids": "alpha"}, "session_ids"),
    ],
)
def test_query_usage_rejects_bad_arguments(usage, arguments, argument):
    with pytest.raises(InvalidUsageQuery) as caught:
        usage.query_usage(**arguments)

    assert (caught.value.code, caught.value.http_status) == ("invalid-usage-query", 400)
    assert caught.value.details == {"argument": argument}


def test_query_usage_accepts_the_largest_page(usage, session_id):
    usage.record_entries([tool(session_id) for _ in range(3)])

    assert usage.query_usage(limit=1000).total == 3


# Backend specifics and configuration (not parametrized)


def test_memory_store_checks_sessions_against_the_configured_session_store(db):
    usage = InMemoryUsageStore()
    session_id = get_session_store().create_session(agent_type="assistant").session_id

    assert isinstance(usage.session_store, ORMSessionStateStore)
    usage.record_entry(tool(session_id))
    assert [entry.session_id for entry in usage.get_entries(session_id)] == [session_id]
    with pytest.raises(SessionNotFound):
        usage.record_entry(tool("ghost"))

    memory = {"SESSION_STORE": {"BACKEND": "sessions_app.stores.memory.InMemorySessionStateStore"}}
    with override_settings(HELIX=memory):
        assert isinstance(usage.session_store, InMemorySessionStateStore)
        with pytest.raises(SessionNotFound):
            usage.get_entries(session_id)


@pytest.mark.parametrize("run_id", [None, "r1"])
def test_orm_rollup_runs_two_queries_however_many_entries(db, django_assert_num_queries, run_id):
    sessions, usage = _orm_backends()
    sessions.create_session("P", agent_type="agent")
    sessions.create_session("C", agent_type="agent", parent_session_id="P")
    entries = [tokens("C", prompt=1), sub_agent("P", run_id="r1", sub_session_id="C")]
    for n in range(50):
        entries += [
            tokens("P", f"model-{n % 3}", prompt=n, run_id="r1"),
            tool("P", f"tool-{n % 4}", duration_ms=n, run_id="r1"),
            custom("P", "m", f"n-{n % 5}", n, run_id="r1"),
        ]
    entries = [
        dataclasses.replace(entry, created_at=T0 + timedelta(seconds=n))
        for n, entry in enumerate(entries)
    ]
    usage.record_entries(entries)

    with django_assert_num_queries(2):
        rollup = usage.get_rollup("P", run_id=run_id)

    assert rollup.entry_count == 151
    assert rollup.tokens.prompt == sum(range(50))
    assert rollup.tokens_including_sub_agents.prompt == sum(range(50)) + 1
    assert rollup == _memory_rollup_of(entries, "P", run_id)


def _memory_rollup_of(entries, session_id: str, run_id: str | None) -> UsageRollup:
    """Return the rollup the memory backend computes for the same sessions and entries."""
    sessions, usage = _memory_backends()
    sessions.create_session("P", agent_type="agent")
    sessions.create_session("C", agent_type="agent", parent_session_id="P")
    usage.record_entries(entries)
    return usage.get_rollup(session_id, run_id=run_id)


def test_default_usage_store_is_the_orm_backend_built_once():
    assert isinstance(get_usage_store(), ORMUsageStore)
    assert get_usage_store() is get_usage_store()


def test_usage_store_follows_the_helix_setting(db):
    session_store = InMemorySessionStateStore()
    memory = {
        "BACKEND": "sessions_app.usage.memory.InMemoryUsageStore",
        "OPTIONS": {"session_store": session_store},
    }
    with override_settings(HELIX={"USAGE_STORE": memory}):
        usage = get_usage_store()
        assert isinstance(usage, InMemoryUsageStore)
        assert usage.session_store is session_store

    assert isinstance(get_usage_store(), ORMUsageStore)
