"""Fixtures for the runtime suites: a private task queue, and a real worker for a module."""

import uuid

import pytest

from helix_project.celery import app
from tests.agents_app.worker import module_worker


@pytest.fixture
def private_queue():
    """Send this test's tasks to a queue of its own, purged afterwards (no worker reads it)."""
    previous = app.conf.task_default_queue
    queue = app.conf.task_default_queue = f"unit-{uuid.uuid4().hex[:12]}"
    yield queue
    app.conf.task_default_queue = previous
    with app.connection_for_write() as connection:
        connection.default_channel.queue_purge(queue)


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker, tmp_path_factory):
    """A real Celery worker for the module's runs, quick to poll, retry and give up."""
    with module_worker(
        django_db_blocker,
        tmp_path_factory,
        INTERRUPT_POLL_SECONDS="0.1",
        LLM_RETRY_BACKOFF_SECONDS="0.05",
        STEP_LEASE_SECONDS="10",
        STEP_ERROR_RETRIES="2",
        STEP_ERROR_BACKOFF_SECONDS="0.05",
    ) as running:
        yield running
