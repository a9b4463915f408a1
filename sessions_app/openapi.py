"""The OpenAPI schema: every operation documents the errors it can answer, each in the one
error shape (`sessions_app.http`); input that pydantic validates is documented from its models.
"""

from typing import Any

from drf_spectacular.openapi import AutoSchema
from pydantic import TypeAdapter
from rest_framework import serializers

UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
DESCRIPTIONS = {
    "400": "The input is not valid; `details` names the problems.",
    "401": "No valid credentials.",
    "403": "No valid credentials, or a session login without its CSRF token.",
    "404": "No such session (another user's looks the same), or no such agent type.",
    "409": "The session's state does not allow the operation now.",
    "413": "The request body is larger than `HELIX_MAX_REQUEST_BYTES`.",
    "415": "The request body is not JSON.",
    "429": "Too many runs started; retry after `Retry-After` seconds.",
}


class ErrorSerializer(serializers.Serializer):
    class ErrorFields(serializers.Serializer):
        code = serializers.CharField(help_text="Machine-readable, e.g. `session-not-found`.")
        message = serializers.CharField()
        details = serializers.JSONField(help_text="What went wrong, field by field.")

    error = ErrorFields()


class HelixAutoSchema(AutoSchema):
    """drf-spectacular's schema, with the error responses each operation can give.

    A request serializer marked `closed` (it refuses fields it does not name) is an object
    with `additionalProperties: false`.
    """

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        schema = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and getattr(serializer, "closed", False):
            schema["additionalProperties"] = False
        return schema

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        error = {
            "content": {
                "application/json": {
                    "schema": self.resolve_serializer(ErrorSerializer, "response").ref
                }
            }
        }
        for status in self._error_statuses(operation):
            operation["responses"].setdefault(
                status, {"description": DESCRIPTIONS[status], **error}
            )
        return operation

    def _error_statuses(self, operation: dict[str, Any]) -> list[str]:
        parameters = operation.get("parameters", [])
        has_body = "requestBody" in operation
        statuses = []
        if has_body or any(p["in"] == "query" for p in parameters):
            statuses.append("400")
        if any(requirement for requirement in operation.get("security", [])):
            statuses += ["401", "403"]
        on_session = any(p["in"] == "path" and p["name"] == "session_id" for p in parameters)
        if on_session or has_body:
            statuses.append("404")
        if self.method in UNSAFE_METHODS and (on_session or has_body):
            statuses.append("409")
        if has_body:
            statuses += ["413", "415"]
        if self.view.get_throttles():
            statuses.append("429")
        return statuses


def pydantic_schema(type_: Any) -> dict[str, Any]:
    """Return the OpenAPI 3.0 schema of what pydantic accepts as `type_` (camelCase aliases).

    Pydantic writes JSON Schema 2020-12; OpenAPI 3.0 has no `$defs`, `const` or `null` type,
    so definitions are inlined, a constant is a one-value `enum`, and `X | None` is `nullable`.
    """
    schema = TypeAdapter(type_).json_schema(by_alias=True)
    return _openapi_3_0(schema, schema.pop("$defs", {}))


def _openapi_3_0(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_openapi_3_0(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _openapi_3_0(definitions[node["$ref"].removeprefix("#/$defs/")], definitions)
    converted = {
        key: _openapi_3_0(value, definitions) for key, value in node.items() if key != "title"
    }
    if "const" in converted:
        converted["enum"] = [converted.pop("const")]
    options = converted.get("anyOf", [])
    if {"type": "null"} in options:
        rest = [option for option in options if option != {"type": "null"}]
        del converted["anyOf"]
        converted.update(rest[0] if len(rest) == 1 else {"anyOf": rest})
        converted["nullable"] = True
    return converted
