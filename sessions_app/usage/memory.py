"""`UsageStore` in process memory, for tests and single-process development.

It applies the ORM backend's rules (shared through `rules`), limits and errors, and groups
entries for a rollup the way the ORM backend's GROUP BY does. Entries are frozen dataclasses
whose fields are immutable values, and every entry is rebuilt when it is recorded, so no caller
shares anything mutable with the store. One lock serializes every call.

Which sessions exist, and how they descend from one another, it learns from a session store:
the one passed as `session_store`, or else the configured one (`get_session_store()`), looked
up at each call. Entries of a session that store no longer holds, or holds re-created under the
same id, are dropped, as the database's cascade drops them with the session.
"""

import dataclasses
import threading
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.utils import timezone

from sessions_app.errors import SessionNotFound
from sessions_app.stores import get_session_store
from sessions_app.stores.base import SessionStateStore
from sessions_app.stores.rules import MAX_PAGE_SIZE
from sessions_app.usage import rules
from sessions_app.usage.base import UsageStore
from sessions_app.usage.types import (
    PaginatedUsage,
    SubAgentEntry,
    TokenCounts,
    TokensEntry,
    UsageEntry,
    UsageKind,
    UsageRollup,
)


class InMemoryUsageStore(UsageStore):
    def __init__(self, *, session_store: SessionStateStore | None = None) -> None:
        self._session_store = session_store
        self._lock = threading.RLock()
        self._entries: dict[str, list[UsageEntry]] = {}
        # The creation time of the session each list of entries belongs to.
        self._born: dict[str, datetime | None] = {}
        self._last_id = 0

    @property
    def session_store(self) -> SessionStateStore:
        """Return the session store this store checks sessions against."""
        return self._session_store or get_session_store()

    def record_entries(
        self, entries: Sequence[UsageEntry], *, sessions_locked: bool = False
    ) -> list[UsageEntry]:
        prepared = rules.prepare_entries(entries, now=timezone.now())
        sessions = self.session_store
        with self._lock:
            born = {}
            for session_id in dict.fromkeys(entry.session_id for entry in prepared):
                state = sessions.load_state(session_id)
                if state is None:
                    raise SessionNotFound(session_id)
                born[session_id] = state.created_at
            stored = []
            for entry in prepared:
                self._last_id += 1
                stored.append(dataclasses.replace(entry, id=self._last_id))
            for session_id, created_at in born.items():
                self._current(session_id, created_at)
                self._entries.setdefault(session_id, [])
                self._born[session_id] = created_at
            for entry in stored:
                self._entries[entry.session_id].append(entry)
            return list(stored)

    def get_entries(
        self,
        session_id: str,
        *,
        kinds: UsageKind | Iterable[UsageKind] | None = None,
        run_id: str | None = None,
    ) -> list[UsageEntry]:
        wanted = rules.check_kinds(kinds)
        with self._lock:
            entries = self._current(session_id, self._created_at(session_id))
            return [
                entry
                for entry in entries
                if (wanted is None or entry.kind in wanted)
                and (run_id is None or entry.run_id == run_id)
            ]

    def get_rollup(self, session_id: str, *, run_id: str | None = None) -> UsageRollup:
        with self._lock:
            entries = self._current(session_id, self._created_at(session_id))
            own = [entry for entry in entries if run_id is None or entry.run_id == run_id]
            sub_agent_tokens = TokenCounts()
            for descendant_id, created_at in self._descendants(session_id, own, run_id).items():
                sub_agent_tokens += rules.sum_tokens(self._current(descendant_id, created_at))
        return rules.rollup(run_id, rules.group_entries(own), sub_agent_tokens)

    def query_usage(
        self,
        *,
        session_ids: Iterable[str] | None = None,
        agent_type: str | None = None,
        kinds: UsageKind | Iterable[UsageKind] | None = None,
        model: str | None = None,
        owner_id: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> PaginatedUsage:
        wanted_sessions = rules.check_session_ids(session_ids)
        wanted_kinds = rules.check_kinds(kinds)
        rules.check_time(since, "since")
        rules.check_time(until, "until")
        rules.check_page(offset, limit)
        sessions = self.session_store
        matching: list[UsageEntry] = []
        with self._lock:
            candidates = list(self._entries) if wanted_sessions is None else wanted_sessions
            for session_id in dict.fromkeys(candidates):
                if session_id not in self._entries:
                    continue
                state = sessions.load_state(session_id)
                entries = self._current(session_id, None if state is None else state.created_at)
                if state is None or (
                    (agent_type is not None and state.agent_type != agent_type)
                    or (owner_id is not None and state.owner_id != owner_id)
                ):
                    continue
                matching += [
                    entry
                    for entry in entries
                    if (wanted_kinds is None or entry.kind in wanted_kinds)
                    and (model is None or (isinstance(entry, TokensEntry) and entry.model == model))
                    and (since is None or entry.created_at >= since)
                    and (until is None or entry.created_at < until)
                ]
        matching.sort(key=lambda entry: (entry.created_at, entry.id))
        page = matching[offset : offset + limit]
        return PaginatedUsage(
            entries=page,
            total=len(matching),
            offset=offset,
            limit=limit,
            has_more=offset + len(page) < len(matching),
        )

    # Internals; callers hold the lock.

    def _created_at(self, session_id: str) -> datetime | None:
        """Return the session's creation time; raise `SessionNotFound` if there is none."""
        state = self.session_store.load_state(session_id)
        if state is None:
            raise SessionNotFound(session_id)
        return state.created_at

    def _current(self, session_id: str, created_at: datetime | None) -> list[UsageEntry]:
        """Return the entries of the session created at `created_at`.

        Entries recorded for an earlier session with the same id, or for one that is gone
        (`created_at` is `None`), are dropped.
        """
        if session_id in self._born and self._born[session_id] != created_at:
            del self._entries[session_id], self._born[session_id]
        return self._entries.get(session_id, [])

    def _descendants(
        self, session_id: str, own: list[UsageEntry], run_id: str | None
    ) -> dict[str, datetime]:
        """Return the creation time of each descendant a rollup counts, by session id."""
        sessions = self.session_store
        if run_id is None:
            frontier = self._children(session_id)
        else:
            frontier = []
            named = (
                entry.sub_session_id
                for entry in own
                if isinstance(entry, SubAgentEntry) and entry.sub_session_id
            )
            for child_id in dict.fromkeys(named):
                child = sessions.load_state(child_id)
                if child is not None and child.parent_session_id == session_id:
                    frontier.append((child_id, child.created_at))
        found: dict[str, datetime] = {}
        while frontier:
            descendant_id, created_at = frontier.pop()
            if descendant_id != session_id and descendant_id not in found:
                found[descendant_id] = created_at
                frontier += self._children(descendant_id)
        return found

    def _children(self, session_id: str) -> list[tuple[str, datetime]]:
        children, offset = [], 0
        while True:
            page = self.session_store.list_sessions(
                parent_session_id=session_id, offset=offset, limit=MAX_PAGE_SIZE
            )
            children += [(child.session_id, child.created_at) for child in page.sessions]
            if not page.has_more:
                return children
            offset += len(page.sessions)
