"""Waiting in tests for what other threads and processes do: polling, never a fixed sleep."""

import time
from collections.abc import Callable

import pytest


def wait_for[T](
    predicate: Callable[[], T], timeout: float = 30.0, what: str = "it", interval: float = 0.05
) -> T:
    """Poll `predicate` until it returns something truthy; return that.

    Fail the test, naming `what` was awaited, if `timeout` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            pytest.fail(f"Timed out after {timeout:g} s waiting for {what}.")
        time.sleep(interval)
    return result
