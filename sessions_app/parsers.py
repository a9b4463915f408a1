"""Decoding what clients send: JSON request bodies and WebSocket frames.

Python's JSON decoder recurses once per level of nesting, so a document nested a few thousand
levels deep raises `RecursionError`, a server error, where it should be refused; and it reads
`1e400` as an infinity, which no JSON can carry back and PostgreSQL refuses. `json_loads`
refuses both, with everything else the decoder refuses, as `InvalidJSON`. `JSONParser` does it
for every DRF view (`REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]`); the WebSocket consumers decode
their frames with `frame_loads` and answer a refused one with `error_frame`.
"""

import json
import math
import re
from itertools import accumulate
from typing import IO, Any

from django.conf import settings
from rest_framework import parsers

from sessions_app.errors import HelixError, InvalidFrame, InvalidJSON
from sessions_app.storable import unstorable_character, unstorable_text

# Deeper than any body the API takes, and shallow enough that whatever is accepted can still be
# copied and serialized: pydantic stops at 255 levels, `copy.deepcopy` near 500.
MAX_JSON_DEPTH = 128

# A JSON string, or the rest of the text after an unterminated one: one pass, no backtracking.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}
# The escapes of what no database stores (`sessions_app.storable`): JSON text can carry a NUL
# or a surrogate only so.
_UNSTORABLE_ESCAPE = r"\\u(?:0000|[dD][89a-fA-F])"
_ESCAPE_IN_TEXT = re.compile(_UNSTORABLE_ESCAPE)
_ESCAPE_IN_BYTES = re.compile(_UNSTORABLE_ESCAPE.encode())


def json_depth(text: str) -> int:
    """Return how deeply the arrays and objects of the JSON `text` nest (0 for a scalar).

    Brackets inside strings do not count. It reads text that is not JSON without failing.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_NESTING.__getitem__, brackets)), default=0)


def json_loads(text: str | bytes, *, what: str = "The JSON") -> Any:
    """Return the value the JSON `text` holds; raise `InvalidJSON`, naming `what`, if none.

    Refused beside what the decoder refuses: bytes that are not UTF-8, nesting deeper than
    `MAX_JSON_DEPTH`, the constants `NaN` and `Infinity`, and numbers beyond a float's range.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError as error:
            raise InvalidJSON(
                f"{what} is not UTF-8: {error.reason} at byte {error.start}.",
                position=error.start,
            ) from None
    # The scan is needed only where there are enough brackets to nest too deeply.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        depth = json_depth(text)
        if depth > MAX_JSON_DEPTH:
            raise InvalidJSON(
                f"{what} nests {depth} levels deep; at most {MAX_JSON_DEPTH} are accepted.",
                depth=depth,
                max_depth=MAX_JSON_DEPTH,
            )
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except ValueError as error:
        raise InvalidJSON(f"{what} is not JSON: {error}.") from None


def may_hold_unstorable(text: str | bytes) -> bool:
    """Return whether the JSON `text` may hold a character no database stores: a cheap look
    at its escapes, before `sessions_app.storable.unstorable_character` looks at what it
    decodes to."""
    pattern = _ESCAPE_IN_BYTES if isinstance(text, bytes) else _ESCAPE_IN_TEXT
    return pattern.search(text) is not None


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, refusing with `InvalidJSON` whatever `json_loads` refuses."""

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: dict[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = stream.read().decode(encoding)
        except UnicodeDecodeError as error:
            raise InvalidJSON(
                f"The body is not {encoding}: {error.reason} at byte {error.start}.",
                position=error.start,
            ) from None
        return json_loads(text, what="The body")


def frame_loads(text_data: str | None, bytes_data: bytes | None) -> dict[str, Any]:
    """Return a WebSocket frame as a JSON object with a string `type`.

    Raise `InvalidFrame` for a binary frame, JSON of another shape or holding a character no
    database stores (`unstorable_character`), `InvalidJSON` for text that is not JSON.
    """
    if text_data is None:
        raise InvalidFrame(
            "This socket takes JSON text frames, not binary ones.",
            size=len(bytes_data or b""),
        )
    frame = json_loads(text_data, what="The frame")
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise InvalidFrame('A frame is a JSON object with a string "type".')
    if may_hold_unstorable(text_data) and (kind := unstorable_character(frame)):
        raise InvalidFrame(f"The frame holds {unstorable_text(kind)}, which no database stores.")
    return frame


def error_frame(error: HelixError) -> dict[str, str]:
    """Return the WebSocket frame that answers a refused frame."""
    return {"type": "error", "code": error.code, "message": error.message}


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text} is beyond the range of a float")
    return number
