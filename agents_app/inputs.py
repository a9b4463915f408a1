"""A run's input: a string, or user messages with metadata and file attachments (reference 001
`UserInputMessage`), validated and turned into the messages the session stores."""

import base64
import binascii
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from sessions_app import errors
from sessions_app.stores.types import Message, MessageRole

# An attachment's decoded size limit.
MAX_FILE_BYTES = 10 * 1024 * 1024
_DATA_URI = re.compile(r"^data:(?P<media_type>[\w.+-]+/[\w.+-]+)?(?:;[\w-]+=[^;,]*)*;base64,")


class _Input(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class FileInput(_Input):
    data: str = Field(description="The file as a base64 data URI.")
    media_type: str = Field(pattern=r"^[\w.+-]+/[\w.+-]+$")
    filename: str | None = Field(default=None, max_length=255)

    @field_validator("data")
    @classmethod
    def _base64_data_uri(cls, data: str) -> str:
        match = _DATA_URI.match(data)
        if match is None:
            raise ValueError("must be a base64 data URI (data:<media type>;base64,...)")
        try:
            decoded = base64.b64decode(data[match.end() :], validate=True)
        except binascii.Error:
            raise ValueError("is not valid base64") from None
        if len(decoded) > MAX_FILE_BYTES:
            raise ValueError(f"is larger than {MAX_FILE_BYTES} bytes")
        return data


class UserInputMessage(_Input):
    role: Literal["user"] = "user"
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    files: list[FileInput] = Field(default_factory=list)


_USER_MESSAGES: TypeAdapter[list[UserInputMessage]] = TypeAdapter(
    Annotated[list[UserInputMessage], Field(min_length=1)]
)


class InvalidInput(errors.InvalidInput):
    """The run's input does not have the shape the reference gives it."""

    def __init__(self, error: ValidationError) -> None:
        problems = [
            {"location": ".".join(["message", *map(str, item["loc"])]), "problem": item["msg"]}
            for item in error.errors(include_url=False)
        ]
        summary = "; ".join(f"{p['location']}: {p['problem']}" for p in problems)
        super().__init__(f"Invalid input: {summary}", problems=problems)


def input_messages(message: Any) -> list[Message]:
    """Return the user messages a run's input describes; raise `InvalidInput` if it is not one.

    The input is a string, or a non-empty list of `UserInputMessage`.
    """
    if isinstance(message, str):
        return [Message(role=MessageRole.USER, content=message)]
    try:
        parsed = _USER_MESSAGES.validate_python(message)
    except ValidationError as error:
        raise InvalidInput(error) from None
    return [
        Message(
            role=MessageRole.USER,
            content=item.content,
            metadata=item.metadata,
            parts=[
                {
                    "type": "file",
                    "mediaType": file.media_type,
                    "url": file.data,
                    "filename": file.filename,
                }
                for file in item.files
            ],
        )
        for item in parsed
    ]
