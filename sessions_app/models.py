"""The durable record of agent sessions (reference 003 `SessionState`, reference 000 tables).

Models stay thin: every read and write goes through a `SessionStateStore` backend
(`sessions_app.stores`), which owns the invariants: gap-free message sequences, version bumps on
every state write, and the one-transaction step commit.

Child rows reference their session with database-level cascades, so deleting a session is one
statement however many messages it holds.
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from sessions_app.lookups import JSONSuperset


def generate_id() -> str:
    """Return a new random identifier for a session, message, run or checkpoint."""
    return str(uuid.uuid4())


# A session in one of these has ended; `sessions_app.stores.types.TERMINAL_STATUSES` types them.
TERMINAL_STATUS_VALUES = ["completed", "failed"]


class AgentSession(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active"
        COMPLETED = "completed"
        FAILED = "failed"
        INTERRUPTED = "interrupted"
        PAUSED = "paused"
        SUSPENDED_CLIENT_TOOL = "suspended_client_tool"
        SUSPENDED_AWAITING_CHILDREN = "suspended_awaiting_children"
        SUSPENDED_STEP_PARTIAL = "suspended_step_partial"

    id = models.CharField(primary_key=True, max_length=255, default=generate_id)
    agent_type = models.CharField(max_length=255)
    parent_session_id = models.CharField(max_length=255, blank=True, default="")
    root_session_id = models.CharField(max_length=255, blank=True, default="")
    stream_id = models.CharField(max_length=255)

    status = models.CharField(max_length=32, choices=Status, default=Status.ACTIVE)
    step_count = models.PositiveIntegerField(default=0)
    message_count = models.PositiveIntegerField(default=0)
    custom_state = models.JSONField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    failure_reason = models.CharField(max_length=255, blank=True, default="")
    aborted = models.BooleanField(default=False)
    abort_reason = models.TextField(blank=True, default="")

    pending_client_tool_calls = models.JSONField(default=dict, blank=True)
    completed_client_tool_calls = models.JSONField(default=dict, blank=True)
    client_tool_call_ownership = models.JSONField(default=dict, blank=True)
    interrupt_context = models.JSONField(null=True, blank=True)
    suspension_context = models.JSONField(
        null=True,
        blank=True,
        help_text="Suspended step id and the children a suspended parent awaits.",
    )
    tracing_context = models.JSONField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DB_CASCADE,
        null=True,
        blank=True,
        related_name="agent_sessions",
        db_index=False,  # served by the (owner, -updated_at) index
    )
    user_id = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text="The caller's own user identifier (reference `userId`), distinct from owner.",
    )
    tags = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    name = models.CharField(max_length=255, blank=True, default="")
    model = models.CharField(
        max_length=255, blank=True, default="", help_text="The model a conversation is held with."
    )
    source = models.CharField(
        max_length=255, blank=True, default="", help_text="Where the conversation came from."
    )

    version = models.PositiveIntegerField(default=1)
    lease_holder = models.CharField(
        max_length=64, blank=True, default="", help_text="The worker attempt running a step."
    )
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_abandoned = models.PositiveIntegerField(
        default=0, help_text="How many lease holders in a row left their step unfinished."
    )
    resume_count = models.PositiveIntegerField(default=0)
    history_revision = models.PositiveBigIntegerField(
        default=0,
        db_default=0,
        editable=False,
        help_text="Counts the writes to the session's messages and compactions.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["owner", "-updated_at"], name="session_owner_updated"),
            models.Index(fields=["user_id", "-created_at"], name="session_user_created"),
            models.Index(fields=["agent_type", "-created_at"], name="session_type_created"),
            models.Index(fields=["status", "-updated_at"], name="session_status_updated"),
            models.Index(fields=["-created_at"], name="session_created"),
            models.Index(fields=["-updated_at"], name="session_updated"),
            models.Index(
                fields=["parent_session_id"],
                name="session_parent",
                condition=~Q(parent_session_id=""),
            ),
            models.Index(
                fields=["root_session_id"],
                name="session_root",
                condition=~Q(root_session_id=""),
            ),
            # The expiry sweep's: it takes sessions in (expires_at, id) order, of any status
            # when it deletes and only live ones when it fails them, which leave the second
            # index as they fail, so no batch scans past those failed before it.
            models.Index(
                fields=["expires_at", "id"],
                name="session_expiry",
                condition=Q(expires_at__isnull=False),
            ),
            models.Index(
                fields=["expires_at", "id"],
                name="session_live_expiry",
                condition=Q(expires_at__isnull=False) & ~Q(status__in=TERMINAL_STATUS_VALUES),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent_type} session {self.id}"


AgentSession._meta.get_field("tags").register_lookup(JSONSuperset)
AgentSession._meta.get_field("metadata").register_lookup(JSONSuperset)


class Message(models.Model):
    class Role(models.TextChoices):
        SYSTEM = "system"
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"

    id = models.CharField(primary_key=True, max_length=255, default=generate_id)
    session = models.ForeignKey(
        AgentSession, on_delete=models.DB_CASCADE, related_name="messages", db_index=False
    )
    sequence = models.PositiveIntegerField()
    # Not a cascade: a cascade recurses once per message down a conversation chain, which
    # SQLite caps at 1000 levels and PostgreSQL at its stack depth.
    parent = models.ForeignKey(
        "self",
        on_delete=models.DB_SET_NULL,
        null=True,
        blank=True,
        related_name="children",
    )
    role = models.CharField(max_length=16, choices=Role)
    content = models.TextField(blank=True, default="")
    tool_calls = models.JSONField(default=list, blank=True)
    tool_call_id = models.CharField(max_length=255, blank=True, default="")
    name = models.CharField(max_length=255, blank=True, default="")
    parts = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "sequence"], name="message_session_sequence"
            ),
            models.CheckConstraint(condition=Q(sequence__gte=1), name="message_sequence_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.role} message {self.sequence} of {self.session_id}"


class Compaction(models.Model):
    """A summary that stands in for a branch's messages `from_message_id`..`to_message_id`.

    An overlay: the messages stay stored, and history reads show the summary in their place
    on every path that holds both ends (reference 002).
    """

    id = models.CharField(primary_key=True, max_length=255, default=generate_id)
    session = models.ForeignKey(
        AgentSession, on_delete=models.DB_CASCADE, related_name="compactions", db_index=False
    )
    from_message_id = models.CharField(max_length=255)
    to_message_id = models.CharField(max_length=255)
    summary = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["session", "created_at"], name="compaction_session")]

    def __str__(self) -> str:
        return f"compaction {self.id} of {self.session_id}"


class SubSessionRef(models.Model):
    class Mode(models.TextChoices):
        EPHEMERAL = "ephemeral"
        PERSISTENT = "persistent"

    session = models.ForeignKey(
        AgentSession, on_delete=models.DB_CASCADE, related_name="sub_session_refs", db_index=False
    )
    sub_session_id = models.CharField(max_length=255)
    agent_type = models.CharField(max_length=255)
    parent_tool_call_id = models.CharField(max_length=255)
    status = models.CharField(
        max_length=32, choices=AgentSession.Status, default=AgentSession.Status.ACTIVE
    )
    mode = models.CharField(max_length=16, choices=Mode, default=Mode.EPHEMERAL)
    name = models.CharField(max_length=255, blank=True, default="")
    remote = models.JSONField(
        null=True, blank=True, help_text="Where a remote child runs, when it is not local."
    )
    started_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "sub_session_id"], name="subsession_session_child"
            ),
        ]
        indexes = [models.Index(fields=["sub_session_id"], name="subsession_child")]

    def __str__(self) -> str:
        return f"{self.agent_type} child {self.sub_session_id} of {self.session_id}"


class Run(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        SUSPENDED = "suspended"  # Waiting for a person: no step runs until they act.
        COMPLETED = "completed"
        FAILED = "failed"
        INTERRUPTED = "interrupted"

    id = models.CharField(primary_key=True, max_length=255, default=generate_id)
    session = models.ForeignKey(
        AgentSession, on_delete=models.DB_CASCADE, related_name="runs", db_index=False
    )
    turn = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status, default=Status.RUNNING)
    step_count = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    # The recovery sweep's marks: when it last found the run stalled, at which step, and how
    # often in a row at that step.
    recovered_at = models.DateTimeField(null=True, blank=True)
    recovered_step = models.PositiveIntegerField(null=True, blank=True)
    recoveries = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "turn"], name="run_session_turn"),
        ]
        indexes = [  # The sweep looks at running runs only.
            models.Index(
                fields=["started_at"],
                name="run_running",
                condition=models.Q(status="running"),
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.id} (turn {self.turn}) of {self.session_id}"


class QueuedRun(models.Model):
    """A run started while another was running, begun when that one ends (`RUN_CONCURRENCY`)."""

    session = models.ForeignKey(
        AgentSession, on_delete=models.DB_CASCADE, related_name="queued_runs", db_index=False
    )
    run_id = models.CharField(max_length=255, unique=True)
    input = models.JSONField()
    queued_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["session", "id"], name="queuedrun_session_order")]

    def __str__(self) -> str:
        return f"queued run {self.run_id} of {self.session_id}"


class Checkpoint(models.Model):
    id = models.CharField(primary_key=True, max_length=255, default=generate_id)
    session = models.ForeignKey(
        AgentSession, on_delete=models.DB_CASCADE, related_name="checkpoints", db_index=False
    )
    run_id = models.CharField(max_length=255, blank=True, default="")
    step_id = models.CharField(max_length=255)
    step_count = models.PositiveIntegerField()
    message_count = models.PositiveIntegerField()
    stream_sequence = models.PositiveIntegerField()
    state = models.JSONField(help_text="Snapshot of the session state at this step.")
    created_at = models.DateTimeField(default=timezone.now)
    timings = models.JSONField(
        null=True, blank=True, help_text="How the step spent its time, up to its commit."
    )

    class Meta:
        indexes = [
            models.Index(fields=["session", "-created_at"], name="checkpoint_session_created"),
        ]

    def __str__(self) -> str:
        return f"checkpoint {self.id} at step {self.step_count} of {self.session_id}"


class InterruptFlag(models.Model):
    session = models.OneToOneField(
        AgentSession,
        on_delete=models.DB_CASCADE,
        primary_key=True,
        related_name="interrupt_flag",
    )
    reason = models.TextField(blank=True, default="")
    set_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"interrupt flag on {self.session_id}"


class StagedChange(models.Model):
    """One tool call's state writes, staged until the step commit promotes them."""

    class Status(models.TextChoices):
        STAGED = "staged"
        PROMOTED = "promoted"
        ROLLED_BACK = "rolled_back"

    session = models.ForeignKey(
        AgentSession, on_delete=models.DB_CASCADE, related_name="staged_changes", db_index=False
    )
    step_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=255)
    patches = models.JSONField(default=list, help_text="RFC 6902 JSON Patch operations.")
    merge_ops = models.JSONField(default=list, help_text="replace / append / delete ops.")
    size_bytes = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status, default=Status.STAGED)
    checkpoint_id = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "step_id", "tool_call_id"], name="staged_change_tool_call"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.status} change of {self.tool_call_id} in step {self.step_id}"


class ToolCallRecord(models.Model):
    """A server tool call an attempt at a step began, and its outcome once it finished.

    Kept until the step commits, so an attempt that takes over a dead one's step runs no call
    twice: it reuses a finished call's outcome and reports an unfinished one as cut off.
    """

    session = models.ForeignKey(
        AgentSession, on_delete=models.DB_CASCADE, related_name="tool_call_records", db_index=False
    )
    step_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=255)
    outcome = models.JSONField(null=True, blank=True, help_text="Set when the call finished.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "step_id", "tool_call_id"], name="tool_call_record_call"
            ),
        ]

    def __str__(self) -> str:
        return f"tool call {self.tool_call_id} in step {self.step_id}"


class UsageEntry(models.Model):
    """One usage fact: tokens of an LLM call, a tool call, a sub-agent call or a custom metric."""

    class Kind(models.TextChoices):
        TOKENS = "tokens"
        TOOL = "tool"
        SUBAGENT = "subagent"
        CUSTOM = "custom"

    session = models.ForeignKey(
        AgentSession, on_delete=models.DB_CASCADE, related_name="usage_entries", db_index=False
    )
    run_id = models.CharField(max_length=255, blank=True, default="")
    step_count = models.PositiveIntegerField(default=0)
    kind = models.CharField(max_length=16, choices=Kind)
    name = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text="Tool name, sub-agent type, or custom metric name.",
    )
    model = models.CharField(max_length=255, blank=True, default="")
    metric_type = models.CharField(
        max_length=255, blank=True, default="", help_text="Custom metric group."
    )
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    reasoning_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    value = models.FloatField(default=0)
    success = models.BooleanField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    sub_session_id = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["session", "created_at"], name="usage_session_created"),
            models.Index(fields=["created_at"], name="usage_created"),
        ]
        verbose_name_plural = "usage entries"

    def __str__(self) -> str:
        return f"{self.kind} usage of {self.session_id}"


class ContextBlock(models.Model):
    """A context block's stored content, for blocks of the default database provider.

    A block added at run time (`added_at_run_time`) is declared by its row alone: its
    description and token limit live here, so every worker that builds the session's context
    finds it (reference 002 `addContext`).
    """

    session = models.ForeignKey(
        AgentSession, on_delete=models.DB_CASCADE, related_name="context_blocks", db_index=False
    )
    label = models.CharField(max_length=255)
    content = models.TextField(blank=True, default="")
    added_at_run_time = models.BooleanField(default=False)
    description = models.TextField(blank=True, default="")
    max_tokens = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "label"], name="contextblock_session_label"),
            models.CheckConstraint(
                condition=Q(max_tokens__gte=1), name="contextblock_max_tokens_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"context block {self.label} of {self.session_id}"


class ContextEntry(models.Model):
    """A keyed entry of a searchable context block, full-text indexed like message content."""

    session = models.ForeignKey(
        AgentSession, on_delete=models.DB_CASCADE, related_name="context_entries", db_index=False
    )
    label = models.CharField(max_length=255)
    key = models.CharField(max_length=255)
    content = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "label", "key"], name="contextentry_session_label_key"
            ),
        ]
        verbose_name_plural = "context entries"

    def __str__(self) -> str:
        return f"entry {self.key} of {self.label} in {self.session_id}"


class SystemPrompt(models.Model):
    """A session's frozen system prompt: block writes change it only when it is refreshed."""

    session = models.OneToOneField(
        AgentSession, on_delete=models.DB_CASCADE, primary_key=True, related_name="system_prompt"
    )
    text = models.TextField()
    rendered_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"system prompt of {self.session_id}"
