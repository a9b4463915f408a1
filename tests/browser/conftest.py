"""A live Helix for the browser suites: a real Celery worker and Daphne on this run's test
database, shared by a module's scenarios."""

from collections.abc import Iterator

import pytest
from django.conf import settings

from tests.agents_app.worker import Worker
from tests.live import live_env
from tests.live_clients import Daphne
from tests.services import require

AGENTS = "agents_app.demo,tests.browser.chat_agents"


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Worker]:
    require("chromium")
    running = Worker(
        tmp_path_factory.mktemp("worker"), INTERRUPT_POLL_SECONDS="0.1", HELIX_AGENTS=AGENTS
    )
    with django_db_blocker.unblock():
        running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def daphne(worker: Worker, tmp_path_factory) -> Iterator[Daphne]:
    folder = tmp_path_factory.mktemp("daphne")
    env = live_env(
        folder,
        HELIX_AGENTS=AGENTS,
        # Steps go where the worker takes them: its queue, on the broker this run shares.
        HELIX_VAR_DIR=str(settings.VAR_DIR),
        CELERY_TASK_DEFAULT_QUEUE=worker.queue,
    )
    server = Daphne(env, folder / "daphne.log")
    server.start()
    yield server
    server.stop()
