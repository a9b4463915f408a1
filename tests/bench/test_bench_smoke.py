"""Smoke-test `python -m bench --quick` on PostgreSQL and Redis: it runs and prints its ratios."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A metric, our value, both raw values and both ratios.
RATIO_ROW = r"^  {metric} +[\d,.]+ +[\d,.]+ +\d+\.\d\d +[\d,.]+ +\d+\.\d\d "
# A metric, our value and ratio against the strict raw side only.
STRICT_ROW = r"^  {metric} +[\d,.]+ +- +- +[\d,.]+ +\d+\.\d\d "
# A metric and our value, without raw sides.
VALUE_ROW = r"^  {metric} +[\d,.]+ +- +- +- +- "
DELIVERY_TITLES = (
    "delivery to 1 WebSocket subscriber, ",
    "delivery to 10 WebSocket subscribers, ",
    "delivery to 10 SSE subscribers, ",
    "delivery to 100 WebSocket subscribers, ",
)


@pytest.mark.postgres
def test_quick_bench_prints_ratios() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--quick"],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for title in (
        "append_messages, batch of 1 ",
        "append_messages, batch of 100 ",
        "save_state_and_promote_staging",
        "StreamWriter.write, one ",
        *DELIVERY_TITLES,
        "replay of 2,000 stored chunks",
        "Agent steps on Celery workers vs raw baselines",
    ):
        assert title in result.stdout
    assert len(re.findall(RATIO_ROW.format(metric="messages/s"), result.stdout, re.M)) == 2
    assert re.search(RATIO_ROW.format(metric="chunks/s"), result.stdout, re.M), result.stdout
    # One commit table and one per delivery table.
    for metric in ("p50 ms", "p99 ms"):
        rows = re.findall(RATIO_ROW.format(metric=metric), result.stdout, re.M)
        assert len(rows) == 1 + len(DELIVERY_TITLES), result.stdout
    for metric in ("WebSocket ms", "SSE ms"):
        assert re.search(VALUE_ROW.format(metric=metric), result.stdout, re.M), result.stdout
    for metric in ("steps/s, 1", "steps/s, 50"):  # Against the raw floor and raw commits.
        assert re.search(RATIO_ROW.format(metric=metric), result.stdout, re.M), result.stdout
    assert re.search(STRICT_ROW.format(metric="ms per step"), result.stdout, re.M), result.stdout
