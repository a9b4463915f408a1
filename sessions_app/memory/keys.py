"""Keys of context entries, made exactly as the reference makes them (`contextEntryKey`).

Writing with the same title replaces the entry; without a title, the key is the content's slug
and a hash of it, so the same content lands on the same key in Helix and in the reference.
"""

import re

_NOT_SLUG = re.compile(r"[^a-z0-9]+")
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def context_entry_key(title: str | None, content: str) -> str:
    """Return the key of an entry: the slug of `title`, else the slug of `content` and a hash."""
    if title and title.strip():
        return _slugify(title) or f"entry-{_stable_hash(title)}"
    return f"{_slugify(content) or 'entry'}-{_stable_hash(content)}"


def _utf16_units(text: str) -> list[int]:
    """Return `text` as JavaScript sees it: UTF-16 code units."""
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2)]


def _slugify(text: str) -> str:
    """Return the slug of `text`'s first 60 UTF-16 units: lower-case ASCII words joined by '-'."""
    head = text.encode("utf-16-le", "surrogatepass")[:120].decode("utf-16-le", "surrogatepass")
    return _NOT_SLUG.sub("-", head.lower()).strip("-")


def _stable_hash(text: str) -> str:
    """Return the 32-bit FNV-1a hash of `text`'s UTF-16 units, in base 36."""
    value = 0x811C9DC5
    for unit in _utf16_units(text):
        value = ((value ^ unit) * 0x01000193) & 0xFFFFFFFF
    digits = ""
    while True:
        value, digit = divmod(value, 36)
        digits = _DIGITS[digit] + digits
        if not value:
            return digits
