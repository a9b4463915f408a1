"""What text every backend stores.

No NUL character (PostgreSQL refuses it in a text and in JSON) and no unpaired surrogate
(neither database's UTF-8 holds one; a decoded JSON string holds a surrogate only unpaired).
Input holding one is refused (`unstorable_character`: the API's middleware, the sockets' frames,
the MCP server, the admin's addresses, and what developers' code gives: agent state, initial
states, a run's input, a session's labels, names and ids); what models and tools produce, which
the runtime stores but does not choose, is stored with U+FFFD in its place (`storable`), alike
on both databases.
"""

import re
from typing import Any

REPLACEMENT_CHARACTER = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(value: Any) -> Any:
    """Return a JSON value with every unstorable character of its strings and keys replaced."""
    if isinstance(value, str):
        return _UNSTORABLE.sub(REPLACEMENT_CHARACTER, value) if _UNSTORABLE.search(value) else value
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value


def unstorable_character(value: Any) -> str | None:
    """Return what a JSON value holds in a key or string that no database stores: "NUL" or
    "surrogate" (an unpaired one), or `None`."""
    if isinstance(value, str):
        found = _UNSTORABLE.search(value)
        return None if found is None else ("NUL" if found.group() == "\x00" else "surrogate")
    if isinstance(value, dict):
        found = (unstorable_character(key) or unstorable_character(v) for key, v in value.items())
        return next(filter(None, found), None)
    if isinstance(value, list):
        return next(filter(None, map(unstorable_character, value)), None)
    return None


def unstorable_text(kind: str) -> str:
    """Return how an error names what `unstorable_character` found."""
    return "a NUL character" if kind == "NUL" else "an unpaired surrogate"
