"""Fixtures for the stream suites: every conformance test runs once per backend."""

import pytest

from streams_app.backends.base import StreamManager
from streams_app.backends.memory import InMemoryStreamManager
from streams_app.backends.orm import ORMStreamManager

MANAGER_BACKENDS: dict[str, type[StreamManager]] = {
    "memory": InMemoryStreamManager,
    "orm": ORMStreamManager,
}
# Short, so that readers which depend on polling (notices are sent only after a commit, and
# transaction-wrapped tests never commit) finish quickly.
TEST_POLL_INTERVAL = 0.02


@pytest.fixture(params=sorted(MANAGER_BACKENDS))
def manager_class(request: pytest.FixtureRequest, db: None) -> type[StreamManager]:
    return MANAGER_BACKENDS[request.param]


@pytest.fixture
def manager(manager_class: type[StreamManager]) -> StreamManager:
    return manager_class(poll_interval=TEST_POLL_INTERVAL)


@pytest.fixture
def owned_session(owner) -> str:
    """Return the id of a session `owner` owns, whose stream has no writer yet."""
    from sessions_app.stores import get_session_store

    return (
        get_session_store()
        .create_session("chat-1", agent_type="researcher", owner_id=owner.pk)
        .session_id
    )


def session_cookie(user) -> str:
    """Log `user` in and return the `Cookie` header value that carries the login."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"
