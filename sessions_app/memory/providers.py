"""Context providers (reference 002): database blocks, searchable entries, skills in file storage.

`DatabaseContextProvider` and `DatabaseSearchProvider` hold one session's data: pass the classes
themselves as `ContextBlockSpec.provider` factories. `StorageSkillProvider` and `TextProvider`
are shared by every session: pass an instance.
"""

import re
from dataclasses import dataclass

from django.core.files.base import ContentFile
from django.core.files.storage import Storage, default_storage, storages
from django.db import connection
from django.utils import timezone

from sessions_app.memory.errors import InvalidSkillKey
from sessions_app.models import ContextBlock, ContextEntry
from sessions_app.stores.search import fts5_match

SEARCH_LIMIT = 10


@dataclass(frozen=True)
class TextProvider:
    """A read-only block of fixed text (a persona, house rules)."""

    text: str

    def get(self) -> str:
        return self.text


class DatabaseContextProvider:
    """A writable block whose content is a `ContextBlock` row of the session."""

    def __init__(self, session_id: str, label: str) -> None:
        self.session_id = session_id
        self.label = label

    def get(self) -> str | None:
        """Return the block's stored content, or None if it was never written."""
        rows = ContextBlock.objects.filter(session_id=self.session_id, label=self.label)
        return rows.values_list("content", flat=True).first()

    def set(self, content: str) -> None:
        """Store `content` as the block's content."""
        ContextBlock.objects.update_or_create(
            session_id=self.session_id,
            label=self.label,
            defaults={"content": content, "updated_at": timezone.now()},
        )


class DatabaseSearchProvider:
    """A searchable block of keyed `ContextEntry` rows, full-text indexed as messages are.

    Search stems English words on both databases ("deploying" finds "deployment") and wants
    every word of the query; the best matches come first, then the latest written.
    """

    def __init__(self, session_id: str, label: str) -> None:
        self.session_id = session_id
        self.label = label

    def get(self) -> str | None:
        """Return how many entries the block holds, or None when it holds none."""
        count = ContextEntry.objects.filter(session_id=self.session_id, label=self.label).count()
        return f"{count} entries indexed." if count else None

    def search(self, query: str) -> str | None:
        """Return the best entries for `query` as `[key]` and content, or None if none match."""
        if connection.vendor == "postgresql":
            sql = (
                "SELECT e.key, e.content FROM sessions_app_contextentry e, "
                "plainto_tsquery('english', %s) q(query) "
                "WHERE e.search_vector @@ q.query AND e.session_id = %s AND e.label = %s "
                "ORDER BY ts_rank(e.search_vector, q.query) DESC"
            )
            params = [query]
        else:
            match = fts5_match(query, "all_words")
            if match is None:
                return None
            sql = (
                "SELECT e.key, e.content FROM sessions_app_contextentry_fts f "
                "JOIN sessions_app_contextentry e ON e.id = f.rowid "
                "WHERE sessions_app_contextentry_fts MATCH %s "
                "AND e.session_id = %s AND e.label = %s ORDER BY f.rank"
            )
            params = [match]
        with connection.cursor() as cursor:
            cursor.execute(
                f"{sql}, e.updated_at DESC, e.id DESC LIMIT %s",
                [*params, self.session_id, self.label, SEARCH_LIMIT],
            )
            rows = cursor.fetchall()
        return "\n\n".join(f"[{key}]\n{content}" for key, content in rows) or None

    def set(self, key: str, content: str) -> None:
        """Index `content` under `key`, replacing what the key held."""
        ContextEntry.objects.update_or_create(
            session_id=self.session_id,
            label=self.label,
            key=key,
            defaults={"content": content, "updated_at": timezone.now()},
        )


_SKILL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_FRONT_MATTER = re.compile(r"---\n(.*?)\n---(?:\n|\Z)", re.DOTALL)


class StorageSkillProvider:
    """Skills as `<key>.md` files in a folder of a Django storage, shared by every session.

    A skill file may open with front matter whose `description:` line describes the skill in
    the block's listing, as Agent Skills' `SKILL.md` files do::

        ---
        description: How to review a pull request
        ---
        The skill's text...

    `load` returns the text after the front matter; `set` writes front matter only for a
    description. `prefix` is the skills' folder in the storage ("" for its root). Keys are
    plain file names (no folders, no leading dot); `keys`, if given, is the only keys the
    provider lists and loads.
    """

    suffix = ".md"

    def __init__(
        self,
        storage: Storage | str | None = None,
        *,
        prefix: str = "skills/",
        keys: list[str] | None = None,
    ) -> None:
        self._storage = storage
        self.folder = prefix.strip("/")
        self.keys = frozenset(keys) if keys else None

    @property
    def storage(self) -> Storage:
        """Return the storage: the one given, the `STORAGES` alias named, or the default."""
        if self._storage is None:
            return default_storage
        if isinstance(self._storage, str):
            return storages[self._storage]
        return self._storage

    def get(self) -> str | None:
        """Return the skills as `- key: description` lines, or None when there are none."""
        lines = []
        for key in self._keys():
            description = _split_front_matter(self._read(key))[0]
            lines.append(f"- {key}: {description}" if description else f"- {key}")
        return "\n".join(lines) or None

    def load(self, key: str) -> str | None:
        """Return the skill's text, or None if there is no such skill."""
        if not self._allows(key) or not self.storage.exists(self._name(key)):
            return None
        return _split_front_matter(self._read(key))[1]

    def set(self, key: str, content: str, description: str | None = None) -> None:
        """Save the skill `key`, replacing any skill of that key."""
        if not _SKILL_KEY.fullmatch(key):
            raise InvalidSkillKey(key)
        name = self._name(key)
        if description:
            content = f"---\ndescription: {' '.join(description.split())}\n---\n{content}"
        storage = self.storage
        if storage.exists(name):
            storage.delete(name)
        storage.save(name, ContentFile(content.encode()))

    def _keys(self) -> list[str]:
        try:
            files = self.storage.listdir(self.folder)[1]
        except FileNotFoundError:
            return []
        keys = (name.removesuffix(self.suffix) for name in files if name.endswith(self.suffix))
        return sorted(key for key in keys if self._allows(key))

    def _allows(self, key: str) -> bool:
        return bool(_SKILL_KEY.fullmatch(key)) and (self.keys is None or key in self.keys)

    def _name(self, key: str) -> str:
        return f"{self.folder}/{key}{self.suffix}" if self.folder else f"{key}{self.suffix}"

    def _read(self, key: str) -> str:
        with self.storage.open(self._name(key), "rb") as file:
            return file.read().decode()


def _split_front_matter(text: str) -> tuple[str, str]:
    """Return the description in `text`'s front matter ("" if none) and the text after it."""
    front = _FRONT_MATTER.match(text)
    if front is None:
        return "", text
    for line in front.group(1).splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "description":
            return value.strip(), text[front.end() :]
    return "", text[front.end() :]
