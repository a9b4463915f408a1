"""Fixtures for the runtime suites."""

import uuid

import pytest

from helix_project.celery import app


@pytest.fixture
def private_queue():
    """Send this test's tasks to a queue of its own, purged afterwards (no worker reads it)."""
    previous = app.conf.task_default_queue
    queue = app.conf.task_default_queue = f"unit-{uuid.uuid4().hex[:12]}"
    yield queue
    app.conf.task_default_queue = previous
    with app.connection_for_write() as connection:
        connection.default_channel.queue_purge(queue)
