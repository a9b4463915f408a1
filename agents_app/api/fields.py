"""Serializer fields the API shares."""

from typing import Any

from rest_framework import serializers


class StrictCharField(serializers.CharField):
    """A string field that refuses numbers and booleans instead of turning them into text."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class TagsField(serializers.ListField):
    child = StrictCharField(max_length=255)


class MetadataField(serializers.DictField):
    child = StrictCharField(allow_blank=True, max_length=10_000)
