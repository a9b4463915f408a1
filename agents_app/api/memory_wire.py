"""The memory API's wire shapes, camelCase: messages, compactions and context blocks.

A message on the wire is reference 002's `SessionMessage` with Helix's extra fields:
`{id, parentId, role, content, parts, toolCalls, toolCallId, name, metadata, createdAt}`.
`message_from_wire` turns a checked input into a `Message`; `MessageOutput` renders one.
"""

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from agents_app.api.fields import StrictCharField
from sessions_app.memory.blocks import LABEL_PATTERN as BLOCK_LABEL
from sessions_app.stores.rules import MAX_IDENTIFIER_LENGTH
from sessions_app.stores.types import NEW_ROOT, Message, MessageRole

# A block label, as `ContextBlockSpec` requires it.
LABEL_PATTERN = f"^{BLOCK_LABEL.pattern}$"
# `ContextBlock.max_tokens` is a PositiveIntegerField: PostgreSQL's `integer` holds no more.
MAX_BLOCK_TOKENS = 2**31 - 1


class StrictIntegerField(serializers.IntegerField):
    """An integer field that takes JSON integers only: no strings, booleans or floats."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A number field that takes JSON numbers only: no strings or booleans."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


class ClosedObject(serializers.Serializer):
    """A nested object that refuses keys it does not name (`closed`, as `ClosedSerializer`).

    It checks the object it is given, so it works nested and in lists, where a serializer has
    no `initial_data`.
    """

    closed = True
    unknown_field_message = "This field is not one this object takes."

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: [self.unknown_field_message] for name in unknown}
                )
        return super().to_internal_value(data)


class PartInput(ClosedObject):
    """A message part (AI SDK UI message part): text, a tool call and its result, or a file."""

    type = StrictCharField(max_length=255, help_text="`text`, `tool-<name>`, `file`, ...")
    text = StrictCharField(required=False, allow_blank=True)
    toolCallId = StrictCharField(required=False, max_length=MAX_IDENTIFIER_LENGTH)
    toolName = StrictCharField(required=False, max_length=255)
    input = serializers.JSONField(required=False, allow_null=True)
    output = serializers.JSONField(required=False, allow_null=True)
    state = StrictCharField(required=False, max_length=255)
    mediaType = StrictCharField(required=False, max_length=255)
    url = StrictCharField(required=False)
    filename = StrictCharField(required=False, allow_null=True, max_length=255)


class ToolCallInput(ClosedObject):
    """A tool call an assistant message makes."""

    id = StrictCharField(max_length=MAX_IDENTIFIER_LENGTH)
    name = StrictCharField(max_length=255)
    arguments = serializers.JSONField(required=False, allow_null=True, default=dict)


class MessageInput(ClosedObject):
    """A message to store. `content` defaults to the text parts joined by a space."""

    id = StrictCharField(
        required=False,
        max_length=MAX_IDENTIFIER_LENGTH,
        help_text="Generated when absent; one the session holds already makes this a no-op.",
    )
    parentId = StrictCharField(
        required=False,
        allow_null=True,
        max_length=MAX_IDENTIFIER_LENGTH,
        help_text="Absent: continue from the message before (the active branch's end); "
        "null: start a new root; an id: answer that message, on a new branch if it has "
        "answers already. A message the session does not hold makes this one a root.",
    )
    role = serializers.ChoiceField(choices=MessageRole.choices)
    content = StrictCharField(required=False, allow_blank=True)
    parts = PartInput(many=True, required=False)
    toolCalls = ToolCallInput(many=True, required=False)
    toolCallId = StrictCharField(required=False, allow_null=True, max_length=255)
    name = StrictCharField(required=False, allow_null=True, max_length=255)
    metadata = serializers.DictField(required=False)
    createdAt = serializers.DateTimeField(read_only=True)


def parent_id_from_wire(data: Mapping[str, Any]) -> str | None:
    """Return the `Message.parent_id` a wire `parentId` means: absent, null or an id."""
    if "parentId" not in data:
        return None
    return NEW_ROOT if data["parentId"] is None else data["parentId"]


def message_from_wire(data: Mapping[str, Any], *, parent_id: str | None = None) -> Message:
    """Return the `Message` a checked `MessageInput` describes.

    `parent_id` is the `Message.parent_id` to use when `data` has no `parentId` of its own.
    """
    parts = [dict(part) for part in data.get("parts", [])]
    content = data.get("content")
    if content is None:
        content = " ".join(p["text"] for p in parts if p["type"] == "text" and "text" in p)
    if "parentId" in data:
        parent_id = parent_id_from_wire(data)
    return Message(
        id=data.get("id"),
        parent_id=parent_id,
        role=MessageRole(data["role"]),
        content=content,
        parts=parts,
        tool_calls=[dict(call) for call in data.get("toolCalls", [])],
        tool_call_id=data.get("toolCallId"),
        name=data.get("name"),
        metadata=dict(data.get("metadata", {})),
    )


def messages_from_wire(data: Mapping[str, Any]) -> list[Message]:
    """Return the messages of a checked append body: `{messages, parentId?}`.

    `parentId` places the first message, unless that names its own.
    """
    first, *rest = data["messages"]
    return [
        message_from_wire(first, parent_id=parent_id_from_wire(data)),
        *(message_from_wire(message) for message in rest),
    ]


class MessageOutput(serializers.Serializer):
    """A stored message; in a history, a compaction shows as an assistant message whose id
    is `compaction_<compaction id>`."""

    id = serializers.CharField()
    parentId = serializers.CharField(source="parent_id", allow_null=True)
    role = serializers.ChoiceField(choices=MessageRole.choices)
    content = serializers.CharField()
    parts = serializers.ListField(child=serializers.DictField(), help_text="As stored.")
    toolCalls = serializers.ListField(source="tool_calls", child=serializers.DictField())
    toolCallId = serializers.CharField(source="tool_call_id", allow_null=True)
    name = serializers.CharField(allow_null=True)
    metadata = serializers.DictField()
    createdAt = serializers.DateTimeField(source="created_at")


class MessageListOutput(serializers.Serializer):
    messages = MessageOutput(many=True)


class CompactionOutput(serializers.Serializer):
    id = serializers.CharField(source="compaction_id")
    fromMessageId = serializers.CharField(source="from_message_id")
    toMessageId = serializers.CharField(source="to_message_id")
    summary = serializers.CharField()
    createdAt = serializers.DateTimeField(source="created_at")


class ContextBlockOutput(serializers.Serializer):
    """A context block as `ContextBlock.to_wire()` gives it."""

    label = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    content = serializers.CharField(allow_blank=True)
    tokens = serializers.IntegerField()
    maxTokens = serializers.IntegerField(allow_null=True)
    writable = serializers.BooleanField()
    isSkill = serializers.BooleanField()
    isSearchable = serializers.BooleanField()
