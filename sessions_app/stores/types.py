"""Plain typed values that cross the `SessionStateStore` contract.

Backends take and return these, never ORM instances or querysets. Times are aware datetimes;
JSON-valued fields hold only what `json.dumps` accepts.
"""

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal

from sessions_app import models

SessionStatus = models.AgentSession.Status
RunStatus = models.Run.Status
MessageRole = models.Message.Role
StagedChangeStatus = models.StagedChange.Status
SubSessionMode = models.SubSessionRef.Mode

TERMINAL_STATUSES = frozenset(map(SessionStatus, models.TERMINAL_STATUS_VALUES))
LIVE_STATUSES = frozenset(SessionStatus) - TERMINAL_STATUSES

SessionOrdering = Literal["created_at", "-created_at", "updated_at", "-updated_at", "expires_at"]


@dataclass(kw_only=True, slots=True)
class InterruptFlagInfo:
    reason: str | None
    set_at: datetime


@dataclass(kw_only=True, slots=True)
class SessionState:
    """A session's durable state (reference 003 `SessionState`), messages excluded."""

    session_id: str
    agent_type: str
    stream_id: str
    parent_session_id: str | None = None
    root_session_id: str | None = None

    custom_state: dict[str, Any] | None = None
    step_count: int = 0
    status: SessionStatus = SessionStatus.ACTIVE
    output: Any = None
    error: str | None = None
    failure_reason: str | None = None
    aborted: bool = False
    abort_reason: str | None = None

    suspended_awaiting_children: dict[str, Any] | None = None
    suspended_step_id: str | None = None
    pending_client_tool_calls: dict[str, Any] = field(default_factory=dict)
    completed_client_tool_calls: dict[str, int] = field(default_factory=dict)
    client_tool_call_ownership: dict[str, str] = field(default_factory=dict)
    interrupt_context: dict[str, Any] | None = None
    tracing_context: dict[str, Any] | None = None
    expires_at: datetime | None = None

    owner_id: int | None = None
    user_id: str | None = None
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    # The conversation's model and source, as a session manager records them.
    model: str | None = None
    source: str | None = None

    version: int = 1
    resume_count: int = 0
    # Read-only views maintained by the store; `save_state` ignores them.
    name: str | None = None  # Written by `rename_session` alone, so a step never undoes it.
    message_count: int = 0
    interrupt_flag: InterruptFlagInfo | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    # Fixed at creation; `save_state` never changes them.
    IDENTITY_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {
            "session_id",
            "agent_type",
            "parent_session_id",
            "root_session_id",
            "owner_id",
            "user_id",
            "model",
            "source",
        }
    )
    READ_ONLY_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"version", "name", "message_count", "interrupt_flag", "created_at", "updated_at"}
    )

    def snapshot(self) -> dict[str, Any]:
        """Return the state as a JSON-ready dict, as stored in a checkpoint.

        The dict shares its JSON values with the state: serialize it, do not mutate it.
        """
        snapshot = {}
        for state_field in dataclasses.fields(self):
            if state_field.name != "interrupt_flag":
                value = getattr(self, state_field.name)
                snapshot[state_field.name] = (
                    value.isoformat() if isinstance(value, datetime) else value
                )
        return snapshot


@dataclass(kw_only=True, slots=True)
class SessionSummary:
    """A listing row: the session without its custom state, output or HITL maps."""

    session_id: str
    agent_type: str
    status: SessionStatus
    step_count: int
    message_count: int
    parent_session_id: str | None
    root_session_id: str | None
    owner_id: int | None
    user_id: str | None
    tags: list[str]
    metadata: dict[str, str]
    name: str | None
    model: str | None
    source: str | None
    expires_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(kw_only=True, slots=True)
class ReapedSession:
    """A session an expiry sweep failed or deleted, with what its caller still has to settle."""

    session_id: str
    agent_type: str
    stream_id: str
    parent_session_id: str | None


@dataclass(kw_only=True, slots=True)
class PaginatedSessions:
    sessions: list[SessionSummary]
    total: int
    offset: int
    limit: int
    has_more: bool


# A message appended with this `parent_id` starts a new root (reference 002's explicit `null`).
NEW_ROOT = ""


@dataclass(kw_only=True, slots=True)
class Compaction:
    """A summary standing in for the messages `from_message_id`..`to_message_id` of a branch."""

    compaction_id: str
    session_id: str
    from_message_id: str
    to_message_id: str
    summary: str
    created_at: datetime


@dataclass(kw_only=True, slots=True)
class Message:
    """A conversation message; the store fills `id`, `sequence` and `created_at` on append.

    Without `parent_id` a message continues from the one appended before it (the active
    branch's end); with `parent_id=NEW_ROOT` it starts a new root.
    """

    role: MessageRole
    content: str = ""
    id: str | None = None
    parent_id: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    parts: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    sequence: int | None = None
    created_at: datetime | None = None


@dataclass(kw_only=True, slots=True)
class MessageHit:
    """A message a full-text search found."""

    message_id: str
    session_id: str
    role: MessageRole
    content: str
    created_at: datetime


@dataclass(kw_only=True, slots=True)
class PaginatedMessages:
    messages: list[Message]
    total: int
    offset: int
    limit: int
    has_more: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplaceOp:
    """Set `key` to `value`; concurrent replaces of one key: the last writer wins."""

    kind: ClassVar[str] = "replace"
    key: str
    value: Any


@dataclass(frozen=True, kw_only=True, slots=True)
class AppendOp:
    """Append `items` to the list at `key`; concurrent appends all land."""

    kind: ClassVar[str] = "append"
    key: str
    items: list[Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class DeleteOp:
    """Remove `key`."""

    kind: ClassVar[str] = "delete"
    key: str


MergeOp = ReplaceOp | AppendOp | DeleteOp
_MERGE_OPS: dict[str, type[MergeOp]] = {op.kind: op for op in (ReplaceOp, AppendOp, DeleteOp)}


def merge_op_to_json(op: MergeOp) -> dict[str, Any]:
    """Return the JSON form of a merge op: `{"kind", "key", ...}`."""
    return {"kind": op.kind, **dataclasses.asdict(op)}


def merge_op_from_json(data: dict[str, Any]) -> MergeOp:
    """Return the merge op a JSON form describes."""
    fields = dict(data)
    return _MERGE_OPS[fields.pop("kind")](**fields)


@dataclass(kw_only=True, slots=True)
class StepWrites:
    """The custom-state writes of one step or tool call, as an op list."""

    ops: list[MergeOp]
    warnings: list[str] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class MergeResult:
    warnings: list[str]
    new_version: int


@dataclass(kw_only=True, slots=True)
class StagedToolChange:
    """What one tool call wants to write: RFC 6902 patches plus the equivalent merge ops."""

    tool_call_id: str
    patches: list[dict[str, Any]] = field(default_factory=list)
    merge_ops: list[MergeOp] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class StagedChange:
    session_id: str
    step_id: str
    tool_call_id: str
    patches: list[dict[str, Any]]
    merge_ops: list[MergeOp]
    size_bytes: int
    status: StagedChangeStatus
    checkpoint_id: str | None
    created_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallRecord:
    """A tool call an attempt at a step began; `outcome` (JSON) is set once it finished."""

    tool_call_id: str
    outcome: dict[str, Any] | None


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointMeta:
    step_id: str
    step_count: int
    stream_sequence: int
    run_id: str | None = None
    # How the step spent its time (`startedAt`, `modelMs`, `tools`), for the admin's timeline.
    timings: dict[str, Any] | None = None


@dataclass(kw_only=True, slots=True)
class Checkpoint:
    checkpoint_id: str
    session_id: str
    run_id: str | None
    step_id: str
    step_count: int
    message_count: int
    stream_sequence: int
    state: dict[str, Any]
    created_at: datetime
    timings: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CommitResult:
    """What a step commit wrote: its checkpoint, the session as it left it and the messages as
    stored.

    `history_revision` is the session's history revision after the commit when it found the
    revision the caller expected (nothing else wrote the session's messages or compactions
    since), and `None` otherwise or when the backend keeps no revisions.

    `state` is the session as the commit left it (its new version included), with the interrupt
    flag it found under its lock, and `revision` its history revision then (`None` without
    revisions): what a run's next step under a kept lease goes on with, rather than read them
    again.
    """

    checkpoint_id: str
    state: SessionState
    messages: list[Message] = field(default_factory=list)
    history_revision: int | None = None
    revision: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Lease:
    """A step lease just taken: the version it bumped to, and whether its last holder left it.

    `taken_over` is true when the previous holder never released the lease cleanly (it died,
    stalled past its lease, or gave up with `clean=False`), so what it wrote may need undoing.
    `abandoned` counts the holders in a row that left it so, the previous one included; a clean
    release or a step commit sets it back to 0.
    """

    version: int
    taken_over: bool
    abandoned: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class StepClaim:
    """What `claim_step` took and read: the lease, and the session and its current run as they
    stood then."""

    lease: Lease
    state: SessionState
    run: "RunRecord | None"
    # The session's history revision, which every write to its messages or compactions
    # bumps; `None` from a backend or claim that does not read it.
    history_revision: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CasApplied:
    """`compare_and_set_status` changed the status."""

    ok: ClassVar[bool] = True
    new_version: int


@dataclass(frozen=True, kw_only=True, slots=True)
class CasRejected:
    """`compare_and_set_status` found another status or version and wrote nothing."""

    ok: ClassVar[bool] = False
    current_status: SessionStatus
    current_version: int


CasResult = CasApplied | CasRejected


@dataclass(kw_only=True, slots=True)
class SubSessionRef:
    sub_session_id: str
    agent_type: str
    parent_tool_call_id: str
    status: SessionStatus = SessionStatus.ACTIVE
    mode: SubSessionMode = SubSessionMode.EPHEMERAL
    name: str | None = None
    remote: dict[str, Any] | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class SubSessionRefUpdate:
    sub_session_id: str
    status: SessionStatus
    completed_at: datetime | None = None


@dataclass(kw_only=True, slots=True)
class RunRecord:
    run_id: str
    session_id: str
    turn: int
    status: RunStatus
    step_count: int
    error: str | None
    metadata: dict[str, Any]
    started_at: datetime
    completed_at: datetime | None


@dataclass(frozen=True, kw_only=True, slots=True)
class StalledRun:
    """A running run nothing has moved for a while, as `mark_stalled_runs` counted it.

    `step` is the step to run next; `recoveries` counts the sweeps that found the run stalled
    at that step, this one included.
    """

    session_id: str
    run_id: str
    step: int
    recoveries: int


@dataclass(kw_only=True, slots=True)
class QueuedRun:
    """A run waiting for the session's running run to end; `input` is what it starts from."""

    run_id: str
    session_id: str
    input: Any
    queued_at: datetime
