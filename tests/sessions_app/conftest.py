"""Fixtures for the session store suites: every test runs once per backend."""

import pytest

from sessions_app.stores.base import SessionStateStore
from sessions_app.stores.memory import InMemorySessionStateStore
from sessions_app.stores.orm import ORMSessionStateStore

STORE_BACKENDS: dict[str, type[SessionStateStore]] = {
    "memory": InMemorySessionStateStore,
    "orm": ORMSessionStateStore,
}


@pytest.fixture(params=sorted(STORE_BACKENDS))
def store_class(request: pytest.FixtureRequest, db: None) -> type[SessionStateStore]:
    """Return each store backend class in turn, with database access allowed."""
    return STORE_BACKENDS[request.param]


@pytest.fixture
def store(store_class: type[SessionStateStore]) -> SessionStateStore:
    return store_class()


@pytest.fixture
def session_id(store: SessionStateStore) -> str:
    """Return the id of a fresh session of agent type `assistant`."""
    return store.create_session(agent_type="assistant").session_id
