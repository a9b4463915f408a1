"""A worker on the threads pool starts its pool's threads with it, as prefork starts its
processes: a burst of runs then waits on no thread's start (`agents_app.tasks`)."""

import os
import time

import pytest

from tests.agents_app.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 40


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_a_threads_pool_worker_starts_every_thread_of_its_pool_before_any_task(tmp_path):
    worker = Worker(tmp_path, concurrency=THREADS).start()
    try:
        deadline = time.monotonic() + 10
        while threads_of(worker.process.pid) < THREADS and time.monotonic() < deadline:
            time.sleep(0.05)
        running = threads_of(worker.process.pid)
    finally:
        worker.stop()

    # The pool's threads, and the worker's own few (its main thread, the flusher, ...).
    assert THREADS < running < THREADS + 20
