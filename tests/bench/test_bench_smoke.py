"""Smoke-test `python -m bench --quick` on PostgreSQL: it runs and prints its ratios."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A metric, the ORM value, both raw values and both ratios.
RATIO_ROW = r"^  {metric} +[\d,.]+ +[\d,.]+ +\d+\.\d\d +[\d,.]+ +\d+\.\d\d "


@pytest.mark.postgres
def test_quick_bench_prints_ratios() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--quick"],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for title in (
        "append_messages, batch of 1 ",
        "append_messages, batch of 100 ",
        "save_state_and_promote_staging",
    ):
        assert title in result.stdout
    assert len(re.findall(RATIO_ROW.format(metric="messages/s"), result.stdout, re.M)) == 2
    for metric in ("p50 ms", "p99 ms"):
        assert re.search(RATIO_ROW.format(metric=metric), result.stdout, re.M), result.stdout
