"""The session manager (reference 002 `SessionManager`): one owner's conversations of one agent.

Every call is scoped to the owner and the agent type: another owner's session, or another
agent's, is `SessionNotFound`, exactly as a missing one. Message writes go through each session's
`ConversationMemory`, so they touch the session's `updated_at` and list order follows them.
"""

from collections.abc import Mapping, Sequence
from dataclasses import replace

from pydantic import Field

from sessions_app.errors import MessageNotFound, SessionNotFound
from sessions_app.memory.session import AppendOutcome, ConversationMemory, MemoryConfig
from sessions_app.memory.tools import MemoryTool, ToolInput
from sessions_app.models import generate_id
from sessions_app.stores import get_session_store
from sessions_app.stores.base import SessionStateStore
from sessions_app.stores.types import NEW_ROOT, Message, MessageHit, PaginatedSessions, SessionState
from sessions_app.usage import get_usage_store
from sessions_app.usage.types import CustomEntry, TokenCounts, TokensEntry

COST_METRIC = "cost"
# The model usage is booked under when the session records none (a usage entry needs one).
UNNAMED_MODEL = "unknown"


class SessionSearchInput(ToolInput):
    query: str = Field(description="Search query")


class SessionManager:
    """Create, list, search and fork one owner's sessions of one agent type."""

    def __init__(
        self,
        *,
        agent_type: str,
        owner_id: int | None,
        config: MemoryConfig | None = None,
        store: SessionStateStore | None = None,
    ) -> None:
        self.agent_type = agent_type
        self.owner_id = owner_id
        self.config = config or MemoryConfig()
        self.store = store or get_session_store()

    # Lifecycle

    def create(
        self,
        name: str = "",
        *,
        parent_session_id: str | None = None,
        model: str | None = None,
        source: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> SessionState:
        """Create a session; a parent session must be one of the owner's."""
        if parent_session_id is not None:
            self.get_owned(parent_session_id)
        return self.store.create_session(
            agent_type=self.agent_type,
            owner_id=self.owner_id,
            parent_session_id=parent_session_id,
            name=name,
            model=model,
            source=source,
            metadata=metadata,
        )

    def get(self, session_id: str) -> SessionState | None:
        """Return the owner's session, or `None`."""
        state = self.store.load_state(session_id)
        if state is None or (state.owner_id, state.agent_type) != (self.owner_id, self.agent_type):
            return None
        return state

    def get_owned(self, session_id: str) -> SessionState:
        """Return the owner's session; raise `SessionNotFound` for any other id."""
        state = self.get(session_id)
        if state is None:
            raise SessionNotFound(session_id)
        return state

    def list_sessions(self, *, offset: int = 0, limit: int = 50) -> PaginatedSessions:
        """Return a page of the owner's sessions, most recently updated first."""
        return self.store.list_sessions(
            owner_id=self.owner_id,
            agent_type=self.agent_type,
            order_by="-updated_at",
            offset=offset,
            limit=limit,
        )

    def rename(self, session_id: str, name: str) -> None:
        self.get_owned(session_id)
        self.store.rename_session(session_id, name)

    def delete(self, session_id: str) -> bool:
        """Delete the session with its messages and everything else it holds."""
        self.get_owned(session_id)
        return self.store.delete_session(session_id)

    def session(self, session_id: str) -> ConversationMemory:
        """Return the memory of the owner's session."""
        self.get_owned(session_id)
        return ConversationMemory(session_id, self.config, store=self.store)

    # Messages

    def append(self, session_id: str, message: Message) -> AppendOutcome:
        return self.session(session_id).append(message)

    def upsert(self, session_id: str, message: Message) -> AppendOutcome:
        return self.session(session_id).upsert(message)

    def append_all(self, session_id: str, messages: Sequence[Message]) -> AppendOutcome:
        return self.session(session_id).append_all(messages)

    def get_history(self, session_id: str, leaf_id: str | None = None) -> list[Message]:
        return self.session(session_id).get_history(leaf_id)

    def get_message_count(self, session_id: str) -> int:
        return self.get_owned(session_id).message_count

    def clear_messages(self, session_id: str) -> int:
        return self.session(session_id).clear()

    def delete_messages(self, session_id: str, message_ids: Sequence[str]) -> int:
        return self.session(session_id).delete(message_ids)

    def fork(self, session_id: str, at_message_id: str, name: str = "") -> SessionState:
        """Return a new session holding the history up to `at_message_id`, fresh ids.

        Compactions are applied first, so a summary is copied as the message it shows as.
        """
        source = self.get_owned(session_id)
        history = self.session(session_id).get_history(at_message_id)
        if not history:
            raise MessageNotFound(session_id, at_message_id)
        forked = self.create(
            name,
            parent_session_id=session_id,
            model=source.model,
            source=source.source,
            metadata=source.metadata,
        )
        copies = [replace(m, id=generate_id(), parent_id=None, sequence=None) for m in history]
        copies[0] = replace(copies[0], parent_id=NEW_ROOT)
        self.store.append_messages(forked.session_id, copies)
        return self.get_owned(forked.session_id)

    # Usage and search

    def add_usage(
        self, session_id: str, input_tokens: int, output_tokens: int, cost: float = 0.0
    ) -> None:
        """Record tokens and cost the application spent on the session outside a run.

        The tokens are booked under the session's model, or `UNNAMED_MODEL` when it has none.
        """
        state = self.get_owned(session_id)
        entries: list = [
            TokensEntry(
                session_id=session_id,
                model=state.model or UNNAMED_MODEL,
                tokens=TokenCounts(prompt=input_tokens, completion=output_tokens),
            )
        ]
        if cost:
            entries.append(
                CustomEntry(
                    session_id=session_id, metric_type=COST_METRIC, name=COST_METRIC, value=cost
                )
            )
        get_usage_store().record_entries(entries)

    def search(self, query: str, *, limit: int = 20) -> list[MessageHit]:
        """Return the messages of all the owner's sessions holding every word of `query`."""
        if self.owner_id is None:
            return []
        return self.store.search_owner_messages(self.owner_id, query, limit=limit)

    def tools(self) -> list[MemoryTool]:
        """Return the manager's `session_search` tool."""
        return [
            MemoryTool(
                name="session_search",
                description=(
                    "Search past conversations for relevant context. Searches across all sessions."
                ),
                input_model=SessionSearchInput,
                execute=lambda arguments: self._search_reply(arguments.query),
            )
        ]

    def _search_reply(self, query: str) -> str:
        hits = self.search(query, limit=10)
        if not hits:
            return "No results found."
        return "\n---\n".join(f"[{hit.role}] {hit.content}" for hit in hits)
