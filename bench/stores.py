"""Benchmark `ORMSessionStateStore` writes against raw psycopg running the same SQL."""

# Each side writes to its own sessions, so none waits on another's row locks. Before timing, one
# call per operation is traced on every side and the statements compared; after timing, the rows
# and JSON bytes each side wrote are compared: a ratio is only printed for equal work.

import json
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from django.db import connection

from bench.harness import Options, Row, Table, interleave, percentile_ms
from bench.raw import RawSessionStore, connect
from bench.trace import same_sql, sql_notes
from sessions_app.stores.orm import ORMSessionStateStore
from sessions_app.stores.types import (
    AppendOp,
    CheckpointMeta,
    CommitResult,
    Message,
    MessageRole,
    ReplaceOp,
    SessionState,
    StagedToolChange,
)

LEGEND = (
    "raw (Django driver setup): psycopg configured from Django's DATABASES OPTIONS (parameter "
    "binding, prepared statements) running the ORM's exact SQL, so its ratio isolates our ORM "
    "and store code.\n"
    "raw (psycopg defaults): psycopg's defaults (server-side binding, statements prepared from "
    "their 5th run) with executemany for multi-row inserts, the strict baseline the targets "
    "are enforced against."
)
BATCH_SIZES = (1, 100)
BATCH_100_TARGET = 3.0
COMMIT_P50_TARGET = 2.5
STAGED_CHANGES_PER_STEP = 5
# A session is retired once it holds this many messages, as a long agent conversation would.
MAX_SESSION_MESSAGES = 1_000

_TEXT = "The quick brown fox jumps over the lazy dog. " * 6
_STEP_MESSAGES = (
    Message(
        role=MessageRole.ASSISTANT,
        tool_calls=[
            {
                "id": "call-search",
                "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"query": _TEXT[:80]})},
            }
        ],
        metadata={"model": "bench-model", "prompt_tokens": 812, "completion_tokens": 37},
    ),
    Message(role=MessageRole.TOOL, content=_TEXT, tool_call_id="call-search", name="search"),
)
_FOOTPRINT = """
SELECT
    (SELECT count(*) FROM sessions_app_message WHERE session_id = ANY(%(ids)s)),
    (SELECT coalesce(sum(octet_length(content) + octet_length(tool_calls::text)
        + octet_length(parts::text) + octet_length(metadata::text)), 0)
     FROM sessions_app_message WHERE session_id = ANY(%(ids)s)),
    (SELECT count(*) FROM sessions_app_checkpoint WHERE session_id = ANY(%(ids)s)),
    (SELECT coalesce(sum(octet_length(state::text)), 0)
     FROM sessions_app_checkpoint WHERE session_id = ANY(%(ids)s)),
    (SELECT count(*) FROM sessions_app_stagedchange
     WHERE session_id = ANY(%(ids)s) AND status = 'promoted'),
    (SELECT sum(version) FROM sessions_app_agentsession WHERE id = ANY(%(ids)s)),
    (SELECT sum(message_count) FROM sessions_app_agentsession WHERE id = ANY(%(ids)s))
"""
_FOOTPRINT_NAMES = (
    "messages",
    "message bytes",
    "checkpoints",
    "checkpoint bytes",
    "promoted staged changes",
    "sum of versions",
    "sum of message_count",
)

_store = ORMSessionStateStore()
# The raw side set up like Django's driver, then the one on psycopg's defaults.
_Raws = tuple[RawSessionStore, RawSessionStore]


def run(options: Options) -> Iterator[Table]:
    """Yield one table per store benchmark: appends of each batch size, then step commits."""
    with (
        connect(connection.settings_dict, like_django=True) as lenient,
        connect(connection.settings_dict, like_django=False) as strict,
    ):
        raws = (RawSessionStore(lenient), RawSessionStore(strict, executemany=True))
        for size in BATCH_SIZES:
            yield _append_table(raws, size, options)
        yield _commit_table(raws, options)


def _append_table(raws: _Raws, size: int, options: Options) -> Table:
    """Measure appends of `size` messages per call, in messages per second."""
    batch = _batch(size)
    stores = (_store, *raws)
    probes = [partial(store.append_messages, _new_session().session_id, batch) for store in stores]
    statements = _same_sql(raws, probes, options.show_sql)
    sides = [_Appender(store.append_messages, batch) for store in stores]
    timings = interleave(sides, options)
    work = _same_work(raws[0], [side.session_ids for side in sides])
    orm, lenient, strict = (size * len(ns) / sum(ns) * 1e9 for ns in timings)
    row = Row(
        metric="messages/s",
        orm=orm,
        lenient_raw=lenient,
        strict_raw=strict,
        higher_is_better=True,
        target=BATCH_100_TARGET if size == 100 else None,
        precision=0,
    )
    return Table(
        title=f"append_messages, batch of {size} ({_runs(options)})",
        rows=[row],
        notes=[*statements, work],
    )


def _commit_table(raws: _Raws, options: Options) -> Table:
    """Measure step commits, in milliseconds per commit at the 50th and 99th percentiles."""
    stores = (_store, *raws)
    probes = [Stepper(store.save_state_and_promote_staging) for store in stores]
    for probe in probes:
        probe.stage()
    statements = _same_sql(raws, [probe.commit for probe in probes], options.show_sql)
    sides = [Stepper(store.save_state_and_promote_staging) for store in stores]
    timings = interleave(sides, options)
    work = _same_work(raws[0], [[side.state.session_id] for side in sides])
    rows = []
    for percent, target in ((50, COMMIT_P50_TARGET), (99, None)):
        orm, lenient, strict = (percentile_ms(ns, percent) for ns in timings)
        rows.append(
            Row(
                metric=f"p{percent} ms",
                orm=orm,
                lenient_raw=lenient,
                strict_raw=strict,
                target=target,
            )
        )
    return Table(
        title=(
            f"save_state_and_promote_staging, {STAGED_CHANGES_PER_STEP} staged changes and "
            f"{len(_STEP_MESSAGES)} messages per step ({_runs(options)})"
        ),
        rows=rows,
        notes=[*statements, work],
    )


def _runs(options: Options) -> str:
    """Describe how many runs a table rests on."""
    return f"{options.iterations} interleaved runs per side after {options.warmup} warm-up"


class _Appender:
    """Append one batch per call to a side's session, retiring sessions as they fill up."""

    def __init__(self, append: Callable[[str, Sequence[Message]], object], batch: list[Message]):
        self.append = append
        self.batch = batch
        self.session_ids: list[str] = []
        self.message_count = MAX_SESSION_MESSAGES

    def __call__(self) -> int:
        if self.message_count + len(self.batch) > MAX_SESSION_MESSAGES:
            self.session_ids.append(_new_session().session_id)
            self.message_count = 0
        start = time.perf_counter_ns()
        self.append(self.session_ids[-1], self.batch)
        elapsed = time.perf_counter_ns() - start
        self.message_count += len(self.batch)
        return elapsed


class Stepper:
    """Commit one step per call to a side's session, staging its tool changes untimed first."""

    def __init__(self, commit: Callable[..., CommitResult]):
        self.save_step = commit
        self.state = _new_session()
        self.version = self.state.version

    def __call__(self) -> int:
        self.stage()
        start = time.perf_counter_ns()
        self.commit()
        return time.perf_counter_ns() - start

    def stage(self) -> None:
        """Stage the next step's tool changes and advance the state to that step."""
        step = self.state.step_count + 1
        _store.stage_changes(self.state.session_id, f"step-{step}", _staged_changes(step))
        self.state.step_count = step
        self.state.custom_state = _custom_state(step)

    def commit(self) -> None:
        """Commit the staged step with its messages, expecting the last commit's version."""
        step = self.state.step_count
        result = self.save_step(
            self.state.session_id,
            self.state,
            _STEP_MESSAGES,
            CheckpointMeta(step_id=f"step-{step}", step_count=step, stream_sequence=step * 10),
            expected_version=self.version,
        )
        self.version = result.state.version


def _new_session() -> SessionState:
    """Create a session with realistic tags, metadata and custom state."""
    return _store.create_session(
        agent_type="bench",
        tags=["bench"],
        metadata={"suite": "bench"},
        custom_state=_custom_state(0),
    )


def _batch(size: int) -> list[Message]:
    """Return `size` alternating user and assistant messages of a few hundred bytes each."""
    roles = (MessageRole.USER, MessageRole.ASSISTANT)
    return [Message(role=roles[n % 2], content=_TEXT, metadata={"tokens": 64}) for n in range(size)]


def _custom_state(step: int) -> dict[str, Any]:
    """Return an agent's custom state at `step`; its size does not grow with the step."""
    return {
        "step": step,
        "plan": ["search", "read", "summarize", "answer"],
        "notes": _TEXT,
        "results": [{"id": n, "title": f"result {n}", "score": 0.5} for n in range(10)],
    }


def _staged_changes(step: int) -> list[StagedToolChange]:
    """Return the tool changes of one step, each with two patches and two merge ops."""
    changes = []
    for n in range(STAGED_CHANGES_PER_STEP):
        result = {"tool": n, "step": step, "text": _TEXT[:100]}
        changes.append(
            StagedToolChange(
                tool_call_id=f"call-{step}-{n}",
                patches=[
                    {"op": "replace", "path": "/step", "value": step},
                    {"op": "add", "path": "/results/-", "value": result},
                ],
                merge_ops=[
                    ReplaceOp(key="step", value=step),
                    AppendOp(key="results", items=[result]),
                ],
            )
        )
    return changes


def _same_sql(raws: _Raws, calls: Sequence[Callable[[], object]], show: bool) -> list[str]:
    """Trace one call per side, the ORM's first; return notes on the SQL, or raise on a mismatch."""
    orm_sql = same_sql(raws, calls, bring="bench/raw.py in line with sessions_app/stores/orm.py")
    note = f"SQL: the same {len(orm_sql)} statements per call on every side"
    if any(raw.statement_for(sql) != sql for raw in raws for sql in orm_sql):
        note += ", but psycopg defaults runs a several-row INSERT as executemany of the one-row one"
    return sql_notes(orm_sql, note, show)


def _same_work(raw: RawSessionStore, session_ids: Sequence[list[str]]) -> str:
    """Return a note on the rows each side wrote to its sessions, or raise if they differ."""
    with raw.connection.cursor() as cursor:
        footprints = [cursor.execute(_FOOTPRINT, {"ids": ids}).fetchone() for ids in session_ids]
    if any(footprint != footprints[0] for footprint in footprints):
        work = [dict(zip(_FOOTPRINT_NAMES, side, strict=True)) for side in footprints]
        raise RuntimeError(f"The sides wrote different data (ORM first): {work}")
    return "work, identical per side: " + ", ".join(
        f"{name} {value:,}"
        for name, value in zip(_FOOTPRINT_NAMES, footprints[0], strict=True)
        if value
    )
