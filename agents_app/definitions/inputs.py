"""A run's input: a string, or user messages with metadata and file attachments (reference 001
`UserInputMessage`), validated and turned into the messages the session stores."""

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from sessions_app import errors
from sessions_app.storable import unstorable_character, unstorable_text
from sessions_app.stores.types import Message, MessageRole

# An attachment's decoded size limit.
MAX_FILE_BYTES = 10 * 1024 * 1024
# A base64 data URI: what `base64.b64decode(..., validate=True)` takes after the comma.
DATA_URI_PATTERN = (
    r"^data:(?:[A-Za-z0-9_.+-]+/[A-Za-z0-9_.+-]+)?(?:;[A-Za-z0-9_-]+=[^;,]*)*;base64,"
    r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
)
_DATA_URI_PREFIX = re.compile(r"^data:[^,]*,")


class _Input(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class FileInput(_Input):
    data: str = Field(description="The file as a base64 data URI.", pattern=DATA_URI_PATTERN)
    media_type: str = Field(pattern=r"^[A-Za-z0-9_.+-]+/[A-Za-z0-9_.+-]+$")
    filename: str | None = Field(default=None, max_length=255)

    @field_validator("data")
    @classmethod
    def _at_most_max_file_bytes(cls, data: str) -> str:
        encoded = len(data) - _DATA_URI_PREFIX.match(data).end()
        if encoded // 4 * 3 - data.count("=", -2) > MAX_FILE_BYTES:
            raise ValueError(f"is larger than {MAX_FILE_BYTES} bytes")
        return data


class UserInputMessage(_Input):
    role: Literal["user"] = "user"
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    files: list[FileInput] = Field(default_factory=list)


UserMessages = Annotated[list[UserInputMessage], Field(min_length=1)]
# A run's input: a string, or one user message or more.
RunInput = str | UserMessages
_USER_MESSAGES: TypeAdapter[list[UserInputMessage]] = TypeAdapter(UserMessages)


class InvalidInput(errors.InvalidInput):
    """The run's input does not have the shape the reference gives it, or holds what no
    database stores."""

    def __init__(self, problems: list[dict[str, str]]) -> None:
        summary = "; ".join(f"{p['location']}: {p['problem']}" for p in problems)
        super().__init__(f"Invalid input: {summary}", problems=problems)

    @classmethod
    def of_validation(cls, error: ValidationError) -> "InvalidInput":
        """Return the error naming what pydantic found wrong, each where it is."""
        return cls(
            [
                {"location": ".".join(["message", *map(str, item["loc"])]), "problem": item["msg"]}
                for item in error.errors(include_url=False)
            ]
        )


def input_messages(message: Any) -> list[Message]:
    """Return the user messages a run's input describes; raise `InvalidInput` if it is not one.

    The input is a string, or a non-empty list of `UserInputMessage`, with no character that
    no database stores (`sessions_app.storable`): the API refuses those before they get here,
    and code calling the services directly is told so too, on every database alike.
    """
    if kind := unstorable_character(message):
        problem = f"holds {unstorable_text(kind)}, which no database stores"
        raise InvalidInput([{"location": "message", "problem": problem}])
    if isinstance(message, str):
        return [Message(role=MessageRole.USER, content=message)]
    try:
        parsed = _USER_MESSAGES.validate_python(message, by_alias=True, by_name=False)
    except ValidationError as error:
        raise InvalidInput.of_validation(error) from None
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
