"""Real concurrent writers for the concurrency suites."""

import threading
from collections.abc import Callable

from django.db import connections


def run_in_threads(count: int, work: Callable[[int], object]) -> list[object]:
    """Run `work(i)` in `count` threads released together; return results or raised errors.

    Each thread has its own database connection and commits its own transactions, so on
    PostgreSQL they contend on row locks exactly as Celery workers do (on SQLite, on the
    database write lock).
    """
    barrier = threading.Barrier(count)
    results: list[object] = [None] * count

    def target(index: int) -> None:
        try:
            barrier.wait()
            results[index] = work(index)
        except Exception as error:
            results[index] = error
        finally:
            connections.close_all()

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a writer thread hung"
    return results
