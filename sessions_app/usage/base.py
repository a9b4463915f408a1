"""The `UsageStore` contract (reference 001 "Usage Response", 000 `DOUsageStore`, 003
`queryUsage`), in Python.

Every method is synchronous and has an `a`-prefixed async twin that runs it through
`sync_to_async`, as the session store's do. Values crossing the contract are the typed values of
`sessions_app.usage.types`.

Conventions every backend keeps (the conformance suite checks each one):

- Recording for a session that does not exist raises `SessionNotFound`; so does a read of one
  session (`get_entries`, `get_rollup`). `query_usage` filters and never raises it.
- A malformed entry raises `InvalidUsageEntry`, a bad read argument `InvalidUsageQuery` (both
  `InvalidInput`, a `ValueError`, HTTP 400). A batch with one bad entry, or one entry for a
  missing session, writes nothing.
- A session's entries go with it: deleting the session deletes its usage.
- Entries come back in recording order from `get_entries`, and in `(created_at, id)` order
  from `query_usage`.
"""

import abc
from collections.abc import Iterable, Sequence
from datetime import datetime

from sessions_app.stores.base import async_twin
from sessions_app.usage.types import PaginatedUsage, UsageEntry, UsageKind, UsageRollup


class UsageStore(abc.ABC):
    """Usage entries of sessions: tokens, tool calls, sub-agent calls and custom metrics."""

    def record_entry(self, entry: UsageEntry) -> UsageEntry:
        """Record one entry; return it as stored, with `id` and `created_at` filled."""
        return self.record_entries([entry])[0]

    @abc.abstractmethod
    def record_entries(
        self, entries: Sequence[UsageEntry], *, sessions_locked: bool = False
    ) -> list[UsageEntry]:
        """Record the entries, all or none; return them as stored, in order.

        Works inside a caller's transaction, so a step commit can record its usage with it.
        `sessions_locked` says that the caller's transaction holds the entries' sessions
        locked (a step commit holds its session's row): they exist, and a store that would
        look them up first may skip it.
        """

    def add_entries(self, entries: Sequence[UsageEntry], *, sessions_locked: bool = False) -> None:
        """Record the entries as `record_entries` does, without returning them.

        A step commit records its usage so: a store that would read back what the database
        gave the entries (their ids) may skip that, and a round trip of the commit with it.
        """
        self.record_entries(entries, sessions_locked=sessions_locked)

    @abc.abstractmethod
    def get_entries(
        self,
        session_id: str,
        *,
        kinds: UsageKind | Iterable[UsageKind] | None = None,
        run_id: str | None = None,
    ) -> list[UsageEntry]:
        """Return the session's entries of the given kinds (and run) in recording order."""

    @abc.abstractmethod
    def get_rollup(self, session_id: str, *, run_id: str | None = None) -> UsageRollup:
        """Return the session's usage summed up, limited to one run if `run_id` is given.

        `tokens_including_sub_agents` adds the tokens of the session's descendants, the
        sessions whose parent chain leads to it. Limited to a run, the descendants are the
        child sessions that the run's sub-agent entries name, with their own descendants
        (their whole usage: a child's runs are not the parent's).
        """

    @abc.abstractmethod
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
        """Return a page of entries across sessions that match every given filter.

        `agent_type` and `owner_id` are those of the entry's session; `model` matches tokens
        entries. `since` is inclusive and `until` exclusive, so consecutive windows neither
        overlap nor leave a gap.
        """

    arecord_entry = async_twin(record_entry)
    arecord_entries = async_twin(record_entries)
    aadd_entries = async_twin(add_entries)
    aget_entries = async_twin(get_entries)
    aget_rollup = async_twin(get_rollup)
    aquery_usage = async_twin(query_usage)
