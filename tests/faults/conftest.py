"""The fault-injection suite (`tests/faults/`): real processes, real faults, counted outcomes.

Each test injects one kind of fault many times and records its pass figure with `figure`; the
figures are printed together at the end of the run (by `tests/conftest.py`, which also collects
them from xdist workers), so CI's log shows what was proved.
"""

import pytest

from tests.services import require


@pytest.fixture
def figure(request):
    """Return `record(passed, tried, what)`, which keeps a pass figure for the summary."""

    def record(passed: int, tried: int, what: str) -> None:
        request.node.user_properties.append(
            ("figure", f"{passed}/{tried} {what} ({request.node.name})")
        )

    return record


@pytest.fixture
def backends():
    """Skip unless the run has PostgreSQL and Redis (`.ci/run` requires both)."""
    require("postgres")
    require("redis")
