"""Rules every `SessionStateStore` backend applies the same way.

Keeping them here, as pure functions, means the in-memory backend cannot drift from the ORM one:
argument checks, the custom-state merge semantics, how an append assigns ids, parents and
sequences, and the staging size pre-flight.
"""

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.utils import timezone

from sessions_app.errors import MessageIdConflict, StateSizeExceeded
from sessions_app.models import generate_id
from sessions_app.storable import unstorable_character, unstorable_text
from sessions_app.stores.types import (
    NEW_ROOT,
    AppendOp,
    CheckpointMeta,
    Compaction,
    DeleteOp,
    Message,
    MessageRole,
    ReplaceOp,
    RunStatus,
    SessionState,
    SessionStatus,
    StagedToolChange,
    StepWrites,
    merge_op_to_json,
)

MAX_IDENTIFIER_LENGTH = 255
MAX_PAGE_SIZE = 1000
# The largest offset or sequence a query takes: the databases' 64-bit integers.
MAX_POSITION = 2**63 - 1

# The SessionState fields `save_state` writes.
MUTABLE_STATE_FIELDS = tuple(
    field.name
    for field in dataclasses.fields(SessionState)
    if field.name not in SessionState.IDENTITY_FIELDS | SessionState.READ_ONLY_FIELDS
)
_OPTIONAL_TEXT_STATE_FIELDS = ("error", "failure_reason", "abort_reason", "suspended_step_id")


def check_name(value: Any, kind: str = "name") -> str:
    """Return `value` if it is a usable session name (or model, source or user id), else raise."""
    if not isinstance(value, str) or len(value) > MAX_IDENTIFIER_LENGTH:
        raise ValueError(f"{kind} must be a string of at most {MAX_IDENTIFIER_LENGTH} characters.")
    return _check_storable(kind, value)


def check_identifier(kind: str, value: Any) -> str:
    """Return `value` if it is a usable identifier, else raise `ValueError` naming `kind`."""
    if not isinstance(value, str) or not value or len(value) > MAX_IDENTIFIER_LENGTH:
        raise ValueError(
            f"{kind} must be a non-empty string of at most {MAX_IDENTIFIER_LENGTH} characters."
        )
    return _check_storable(kind, value)


def _check_storable[Value](kind: str, value: Value) -> Value:
    """Return `value` if every database stores its strings, else raise `ValueError` naming
    `kind` and what it holds (`sessions_app.storable`): on PostgreSQL the write would fail."""
    if found := unstorable_character(value):
        raise ValueError(f"{kind} must not hold {unstorable_text(found)}.")
    return value


def check_count(kind: str, value: Any) -> int:
    """Return `value` if it is a non-negative integer, else raise `ValueError` naming `kind`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{kind} must be a non-negative integer.")
    return value


def check_checkpoint_meta(checkpoint: CheckpointMeta) -> None:
    """Raise `ValueError` unless the checkpoint's step id and counters are valid."""
    check_identifier("step id", checkpoint.step_id)
    check_count("step count", checkpoint.step_count)
    check_count("stream sequence", checkpoint.stream_sequence)


def check_tags(tags: Any) -> list[str]:
    """Return `tags` as a list if it is a sequence of strings, else raise `ValueError`."""
    if isinstance(tags, str | bytes) or not all(isinstance(tag, str) for tag in tags):
        raise ValueError("tags must be a list of strings.")
    return _check_storable("tags", list(tags))


def check_metadata(metadata: Any) -> dict[str, str]:
    """Return `metadata` as a dict if it maps strings to strings, else raise `ValueError`."""
    if not isinstance(metadata, Mapping) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in metadata.items()
    ):
        raise ValueError("metadata must map strings to strings.")
    return _check_storable("metadata", dict(metadata))


LABEL_FIELDS = ("tags", "metadata", "expires_at")


def check_labels(labels: Mapping[str, Any]) -> dict[str, Any]:
    """Return the checked labels (`LABEL_FIELDS`) to write; anything else raises `ValueError`."""
    unknown = sorted(set(labels) - set(LABEL_FIELDS))
    if unknown:
        raise ValueError(f"Only {', '.join(LABEL_FIELDS)} are labels, not {', '.join(unknown)}.")
    checked = dict(labels)
    if "tags" in checked:
        checked["tags"] = check_tags(checked["tags"])
    if "metadata" in checked:
        checked["metadata"] = check_metadata(checked["metadata"])
    if not isinstance(checked.get("expires_at"), datetime | None):
        raise ValueError("expires_at must be a datetime or None.")
    return checked


def run_completed_at(status: RunStatus, completed_at: datetime | None) -> datetime | None:
    """Return when a run with `status` completed: not yet while it runs or is suspended."""
    if status in (RunStatus.RUNNING, RunStatus.SUSPENDED):
        return None
    return completed_at or timezone.now()


def lease_is_live(holder: str, expires_at: datetime | None, now: datetime) -> bool:
    """Return whether a step lease is held and unexpired."""
    return bool(holder) and expires_at is not None and expires_at > now


def check_page(offset: int, limit: int) -> None:
    """Raise `ValueError` unless offset and limit describe a valid page."""
    if not 0 <= offset <= MAX_POSITION:
        raise ValueError(f"offset must be from 0 to {MAX_POSITION}.")
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE_SIZE}.")


def normalize_statuses(status: SessionStatus | Iterable[SessionStatus]) -> list[SessionStatus]:
    """Return one status or many as a list of `SessionStatus`; unknown values raise."""
    if isinstance(status, str):
        return [SessionStatus(status)]
    return [SessionStatus(each) for each in status]


def state_fields(state: SessionState) -> dict[str, Any]:
    """Return the fields `save_state` writes, normalized as every backend stores them."""
    fields = {name: getattr(state, name) for name in MUTABLE_STATE_FIELDS}
    for name in _OPTIONAL_TEXT_STATE_FIELDS:
        fields[name] = fields[name] or None
    fields.update(
        stream_id=check_identifier("stream id", state.stream_id),
        status=SessionStatus(state.status),
        step_count=check_count("step count", state.step_count),
        resume_count=check_count("resume count", state.resume_count),
        suspended_awaiting_children=state.suspended_awaiting_children or None,
        tags=check_tags(state.tags),
        metadata=check_metadata(state.metadata),
    )
    return fields


def committed_state(
    state: SessionState, fields: dict[str, Any], version: int, message_count: int
) -> SessionState:
    """Return `state` as a commit of `fields` (`state_fields(state)`) at `version` leaves it;
    its `snapshot()` is what the commit's checkpoint keeps."""
    return dataclasses.replace(state, **fields, version=version, message_count=message_count)


def apply_merge_ops(
    custom_state: dict[str, Any] | None, writes: StepWrites
) -> tuple[dict[str, Any] | None, list[str]]:
    """Return the custom state after `writes`, and the warnings raised on the way.

    A state that is `None` (an agent that has none) stays `None` unless something is written.

    `replace` sets a key (last writer wins), `append` extends a list (creating it if the key is
    absent), `delete` removes a key. Appending to a key that holds something other than a list
    is skipped with a warning rather than destroying either value.
    """
    warnings = list(writes.warnings)
    if custom_state is None and not writes.ops:
        return None, warnings
    state = dict(custom_state or {})
    for op in writes.ops:
        match op:
            case ReplaceOp():
                state[op.key] = op.value
            case AppendOp():
                current = state.get(op.key)
                if current is None:
                    state[op.key] = list(op.items)
                elif isinstance(current, list):
                    state[op.key] = [*current, *op.items]
                else:
                    warnings.append(
                        f"append to {op.key!r} skipped: it holds {type(current).__name__}, "
                        "not a list"
                    )
            case DeleteOp():
                state.pop(op.key, None)
            case _:
                raise TypeError(f"Not a merge op: {op!r}")
    return state, warnings


def lookup_ids(messages: Sequence[Message]) -> set[str]:
    """Return the caller-chosen ids and explicit parent ids an append must look up."""
    return {message.id for message in messages if message.id is not None} | {
        message.parent_id for message in messages if message.parent_id not in (None, NEW_ROOT)
    }


def plan_append(
    session_id: str,
    messages: Sequence[Message],
    *,
    stored_sessions: Mapping[str, str],
    last_message_id: str | None,
    last_sequence: int,
    now: datetime,
) -> list[Message]:
    """Return the messages an append stores, with ids, parents, sequences and times filled.

    `stored_sessions` maps each id of `lookup_ids(messages)` that is already stored to the
    session holding it. Ids the session already holds are skipped (a retried append is a no-op);
    ids of other sessions raise `MessageIdConflict`. A message without a parent continues from
    the one before it; `NEW_ROOT`, or a parent outside the session, makes the message a root.
    """
    planned: list[Message] = []
    batch_ids: set[str] = set()
    previous_id = last_message_id
    sequence = last_sequence
    for message in messages:
        role = MessageRole(message.role)
        if message.id is None:
            message_id = generate_id()
        else:
            message_id = check_identifier("message id", message.id)
            holder = stored_sessions.get(message_id)
            if holder is not None and holder != session_id:
                raise MessageIdConflict(message_id)
            if holder == session_id or message_id in batch_ids:
                previous_id = message_id
                continue
        parent_id = message.parent_id
        if parent_id is None:
            parent_id = previous_id
        elif parent_id not in batch_ids and stored_sessions.get(parent_id) != session_id:
            parent_id = None  # NEW_ROOT, or a parent outside the session.
        sequence += 1
        planned.append(
            Message(
                role=role,
                content=message.content or "",
                id=message_id,
                parent_id=parent_id,
                tool_calls=message.tool_calls,
                tool_call_id=message.tool_call_id or None,
                name=message.name or None,
                parts=message.parts,
                metadata=message.metadata,
                sequence=sequence,
                created_at=now,
            )
        )
        batch_ids.add(message_id)
        previous_id = message_id
    return planned


def updated_message(stored: Message, update: Message) -> Message:
    """Return `stored` with the content `update` gives; its place in the tree stays."""
    return dataclasses.replace(
        stored,
        role=MessageRole(update.role),
        content=update.content or "",
        tool_calls=update.tool_calls,
        tool_call_id=update.tool_call_id or None,
        name=update.name or None,
        parts=update.parts,
        metadata=update.metadata,
    )


def apply_compactions(path: list[Message], compactions: Sequence[Compaction]) -> list[Message]:
    """Return `path` with each compacted range replaced by its summary (reference 002).

    `compactions` are in the order they were added.
    At each message, of the compactions starting there whose end is further on this path, the
    newest stands in for the range; the path goes on after its end. So a compaction shows on
    every branch holding both its ends, and only there.
    """
    if not compactions:
        return path
    position = {message.id: index for index, message in enumerate(path)}
    starting: dict[str, list[Compaction]] = {}
    for compaction in compactions:
        starting.setdefault(compaction.from_message_id, []).append(compaction)
    result: list[Message] = []
    index = 0
    while index < len(path):
        message = path[index]
        ends_here_or_later = [
            c for c in starting.get(message.id, ()) if position.get(c.to_message_id, -1) >= index
        ]
        if not ends_here_or_later:
            result.append(message)
            index += 1
            continue
        newest = ends_here_or_later[-1]
        result.append(compaction_message(newest))
        index = position[newest.to_message_id] + 1
    return result


def compaction_message(compaction: Compaction) -> Message:
    """Return the synthetic assistant message a compaction shows as in history."""
    return Message(
        role=MessageRole.ASSISTANT,
        content=compaction.summary,
        id=f"compaction_{compaction.compaction_id}",
        parts=[{"type": "text", "text": compaction.summary}],
        created_at=compaction.created_at,
    )


def staged_change_size(change: StagedToolChange) -> int:
    """Return the UTF-8 size of a tool call's staged patches and merge ops."""
    payload = {
        "patches": change.patches,
        "merge_ops": [merge_op_to_json(op) for op in change.merge_ops],
    }
    return len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode())


def changed_keys(change: StagedToolChange) -> list[str]:
    """Return the top-level state keys a tool call's patches and merge ops touch."""
    keys = {op.key for op in change.merge_ops}
    for patch in change.patches:
        first = str(patch.get("path", "")).split("/")[1:2]
        if first:
            keys.add(first[0].replace("~1", "/").replace("~0", "~"))
    return sorted(keys)


def check_staged_sizes(
    session_id: str, changes: Sequence[StagedToolChange], limit: int
) -> list[int]:
    """Return each change's size; raise `StateSizeExceeded` for the first over `limit`."""
    sizes = []
    for change in changes:
        check_identifier("tool call id", change.tool_call_id)
        size = staged_change_size(change)
        if size > limit:
            raise StateSizeExceeded(
                session_id,
                tool_call_id=change.tool_call_id,
                total_bytes=size,
                limit=limit,
                changed_keys=changed_keys(change),
            )
        sizes.append(size)
    return sizes
