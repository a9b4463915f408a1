"""The OpenAPI schema: pydantic models in OpenAPI 3.0 terms, and documented error responses."""

from typing import Literal

from drf_spectacular.generators import SchemaGenerator
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sessions_app.openapi import pydantic_schema


class Part(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, extra="forbid")

    kind: Literal["text"] = "text"
    media_type: str | None = Field(default=None, max_length=10)


class Message(BaseModel):
    parts: list[Part]


def test_a_pydantic_schema_comes_out_in_openapi_3_0_terms():
    schema = pydantic_schema(str | Message)

    message = schema["anyOf"][1]
    part = message["properties"]["parts"]["items"]
    assert schema["anyOf"][0] == {"type": "string"}
    assert "$defs" not in schema
    assert "$ref" not in str(schema)
    assert part["properties"]["kind"] == {"enum": ["text"], "default": "text", "type": "string"}
    assert part["properties"]["mediaType"] == {
        "type": "string",
        "maxLength": 10,
        "nullable": True,
        "default": None,
    }
    assert part["additionalProperties"] is False
    assert "title" not in str(schema)


def test_every_operation_documents_the_errors_it_can_answer():
    schema = SchemaGenerator().get_schema(request=None, public=True)

    for path, item in schema["paths"].items():
        for method, operation in item.items():
            responses = set(operation["responses"])
            assert {"401", "403"} <= responses, (method, path)
            if "{session_id}" in path:
                assert "404" in responses, (method, path)
            if "requestBody" in operation:
                assert {"400", "413", "415"} <= responses, (method, path)
            error = operation["responses"]["403"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/Error"}
    start = schema["paths"]["/api/sessions/{session_id}/start"]["post"]["responses"]
    assert {"409", "429"} <= set(start)
