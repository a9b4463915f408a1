"""Serializer fields the API shares."""

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers

# Text may hold any character but NUL, which DRF refuses (PostgreSQL cannot store it). A blank
# field's schema adds the empty string as a second `oneOf` option, so this one must not match it.
NO_NUL = r"^[^\x00]+$"


class _TextOnly:
    """For a DRF text field: refuse numbers and booleans rather than turn them into text."""

    default_error_messages = {"not_text": serializers.CharField.default_error_messages["invalid"]}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_text")
        return super().to_internal_value(data)


class StrictCharField(_TextOnly, serializers.CharField):
    """A string field that takes the string as it is: numbers and booleans are refused, not
    turned into text, and surrounding whitespace is kept."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)


class StrictRegexField(_TextOnly, serializers.RegexField):
    """A `RegexField` that refuses numbers and booleans rather than match their text against
    its pattern."""


class StrictCharFieldSchema(OpenApiSerializerFieldExtension):
    """Document that a `StrictCharField` refuses NUL characters."""

    target_class = StrictCharField

    def map_serializer_field(self, auto_schema, direction):
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        return {**schema, "pattern": NO_NUL}


class TagsField(serializers.ListField):
    child = StrictCharField(max_length=255)


class MetadataField(serializers.DictField):
    child = StrictCharField(allow_blank=True, max_length=10_000)


class ClosedSerializer(serializers.Serializer):
    """A body that refuses fields it does not name (the schema says so:
    `sessions_app.openapi` gives a `closed` serializer `additionalProperties: false`)."""

    closed = True
    unknown_field_message = "This field is not one this request takes."

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError(
                {name: [self.unknown_field_message] for name in unknown}
            )
        return attrs
