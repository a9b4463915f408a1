"""Smoke-test `python -m bench --quick` on PostgreSQL and Redis: each part prints its ratios."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.steps import WORKER_PROCESSES
from tests.services import RABBITMQ_URL, require

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


@pytest.fixture(scope="module")
def live_parts() -> subprocess.CompletedProcess[str]:
    """One quick run of the parts that start Daphne and workers, which two tests read."""
    return _quick_bench("stores", "streams", "steps", "scaleout", "inflight")


@pytest.mark.postgres
def test_quick_bench_prints_ratios(live_parts) -> None:
    result = live_parts
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


@pytest.mark.postgres
def test_quick_in_flight_bench_reports_its_share_connections_and_fairness(live_parts) -> None:
    stdout = live_parts.stdout
    assert "Conversations in flight" in stdout
    for metric in ("share of the ideal 20 steps/s", "peak database connections"):
        assert re.search(rf"^  N=20: {metric} .*(PASS|FAIL)$", stdout, re.M), stdout
    # Against the raw floor's waiting chains, which ran on the same workers and all ended.
    floor_row = STRICT_ROW.format(metric="N=20: steps/s vs the raw floor's, neither followed")
    assert re.search(floor_row, stdout, re.M), stdout
    # As ours run (a chain's hops in one task), and with a task a hop.
    for floor in (r"The raw floor \(no hop\)", "With a hop a step"):
        assert re.search(rf"{floor}: [\d.]+ steps/s \([\d.]+ of the ideal", stdout), stdout
    assert re.search(r"N=20 with no client following: [\d.]+ steps/s", stdout), stdout
    assert re.search(r"^  N=20: first delta p50 ms +[\d.]+", stdout, re.M), stdout
    assert "Fairness: one-step runs beside a long run" in stdout
    assert re.search(r"^  short run p99 ms, beside the long run +[\d.]+", stdout, re.M), stdout


@pytest.mark.postgres
def test_quick_scaleout_completes_every_run_and_checks_every_transcript(live_parts) -> None:
    result = live_parts
    workers = f"{WORKER_PROCESSES} Celery worker processes"
    assert f"Scale-out: 20 sessions over 2 Daphne and {workers}" in result.stdout
    # The run stops unless every client got exactly its session's stored log.
    assert "every client's transcript equalled the stored log (20 of 20)" in result.stdout
    for metric in ("runs/s", "steps/s", "chunks/s", "p50 ms", "p99 ms"):
        assert re.search(VALUE_ROW.format(metric=metric), result.stdout, re.M), result.stdout


@pytest.mark.postgres
def test_quick_scaleout_on_rabbitmq_completes_every_run_and_checks_every_transcript() -> None:
    require("rabbitmq")
    result = _quick_bench("scaleout", CELERY_BROKER_URL=RABBITMQ_URL)
    assert "every client's transcript equalled the stored log (20 of 20)" in result.stdout


@pytest.mark.postgres
def test_quick_memory_bench_finds_what_raw_sql_finds_and_prints_ratios() -> None:
    result = _quick_bench("memory")
    print(result.stdout)
    for title in (
        "get_history of the active branch, 1,997 of a session's 2,000 messages ",
        "search_messages, a phrase in one session of 1,000 messages, 20,000 messages in all ",
        "search_owner_messages, all words across one owner's 4 sessions ",
    ):
        assert title in result.stdout
    # Built in the throwaway database, which the run drops: no data set is left behind.
    assert "data: built in " in result.stdout
    assert "the throwaway database" in result.stdout
    # The run stops if ours and the hand-written SQL find different messages.
    assert "returned the same 1,997 messages in the same order, root first" in result.stdout
    assert result.stdout.count("found the same messages in the same order every time") == 2
    assert len(re.findall(RATIO_ROW.format(metric="p50 ms"), result.stdout, re.M)) == 3
    assert len(re.findall(RATIO_ROW.format(metric="p99 ms"), result.stdout, re.M)) == 2
    assert len(re.findall(VALUE_ROW.format(metric="p50 ms"), result.stdout, re.M)) == 2


@pytest.mark.postgres
def test_quick_state_bench_delivers_every_round_once_and_prints_ratios() -> None:
    result = _quick_bench("state")
    assert "set_agent_state to 10 WebSocket clients, call start to arrival " in result.stdout
    # The run stops unless every client got every round once, in order, then the last write.
    assert "every client of every side received all 12 rounds' states once" in result.stdout
    for metric in ("p50 ms", "p99 ms"):
        rows = re.findall(RATIO_ROW.format(metric=metric), result.stdout, re.M)
        assert len(rows) == 1, result.stdout


@pytest.mark.postgres
def test_quick_model_stream_bench_reads_every_reply_whole_and_prints_ratios() -> None:
    result = _quick_bench("model-stream")
    # Each side checks that it read every event of every reply, or the run stops.
    title = "A model's reply (103 events, 10 ms apart) to a request of 76 messages and 8 tools"
    assert title in result.stdout
    for metric in ("µs per event, 1 stream", "µs per event, 5 streams at once"):
        assert re.search(RATIO_ROW.format(metric=metric), result.stdout, re.M), result.stdout


def _quick_bench(*parts: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m bench --quick` on the given parts; fail unless it exits 0."""
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", *(f"--only={part}" for part in parts)],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.postgres
def test_quick_reaping_and_admin_benches_clear_their_data_and_print_figures() -> None:
    result = _quick_bench("reaping", "admin")
    # Each side checks that it took every expired session, or the run stops.
    assert "Reaping 5,000 expired sessions, batches of 100 " in result.stdout
    for metric in ("delete s", "fail s"):
        assert re.search(STRICT_ROW.format(metric=metric), result.stdout, re.M), result.stdout
    for metric in ("delete lock", "fail lock"):
        assert re.search(VALUE_ROW.format(metric=metric), result.stdout, re.M), result.stdout
    assert "Admin sessions list over 5,000 sessions " in result.stdout
    for metric in ("list ms", "status ms"):
        assert re.search(STRICT_ROW.format(metric=metric), result.stdout, re.M), result.stdout
    assert re.search(VALUE_ROW.format(metric="list p50"), result.stdout, re.M), result.stdout
    # Then every targeted figure of the run again, in one table with the machine above it.
    summary = result.stdout.split("Summary (Markdown")[1]
    assert re.search(r"^Measured on .+, \d+ cores, PostgreSQL [\d.]+, Redis", summary, re.M)
    assert "| Reaping 5,000 expired sessions: delete s |" in summary
    assert "| Admin sessions list over 5,000 sessions: list p50 |" in summary
