"""A live Helix for the browser suites: a real Celery worker and Daphne on this run's test
database, shared by a module's scenarios."""

from collections.abc import Iterator

import pytest

from tests.agents_app.worker import Worker, module_worker
from tests.live_clients import Daphne, live_daphne
from tests.services import require

AGENTS = "agents_app.demo,tests.browser.chat_agents"


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Worker]:
    """A worker running the chat agents for a module's scenarios, which need Chromium."""
    require("chromium")
    with module_worker(
        django_db_blocker, tmp_path_factory, INTERRUPT_POLL_SECONDS="0.1", HELIX_AGENTS=AGENTS
    ) as running:
        yield running


@pytest.fixture(scope="module")
def daphne(worker: Worker, tmp_path_factory) -> Iterator[Daphne]:
    """Daphne serving the chat page, its runs' steps going to `worker`."""
    with live_daphne(tmp_path_factory.mktemp("daphne"), AGENTS, worker.queue) as server:
        yield server
