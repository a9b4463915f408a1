"""Faults in the broker (DESIGN invariant 9): whatever the broker loses, every run completes.

A Redis broker without persistence loses every queued and unacknowledged step when it restarts:
here its database is flushed mid-run, and the recovery sweep must enqueue those steps again.
RabbitMQ restarted mid-run keeps them in its quorum queues, and the workers reconnect. Either
way each run ends as a clean run of the same script does: the same messages, the same stream
log, each tool call applied once.

Every step goes through the broker (`STEP_TIME_SLICE_SECONDS=0`) and the workers have fewer
threads than there are runs, so most steps wait in the queue when the fault strikes.
"""

import subprocess
import time
from urllib.parse import urlsplit, urlunsplit

import kombu
import pytest
import redis
from django.conf import settings

from agents_app.runs import services
from sessions_app.stores import get_session_store
from tests.agents_app import agents  # noqa: F401 (registers the `steady` agent)
from tests.agents_app.worker import Supervisor, sending_to
from tests.faults.transcripts import transcript, wait_until_finished
from tests.services import RABBITMQ_URL, require
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("backends")]

RUNS = 30
AGENT = "steady"  # Three steps of streamed text and tool calls.
STEPS = 3
STALLED_RUN_SECONDS = 3
RECOVERY_INTERVAL_SECONDS = 1
# The Redis broker's own database, so that flushing it touches no other test's queues.
REDIS_BROKER_DB = 13


def broker_options(broker_url: str) -> dict:
    return {
        "CELERY_BROKER_URL": broker_url,
        "concurrency": 1,  # Two threads in all: most steps wait in the queue.
        "STEP_TIME_SLICE_SECONDS": "0",
        "STEP_LEASE_SECONDS": "1",
        "CELERY_VISIBILITY_TIMEOUT": "2",
        "HELIX_STALLED_RUN_SECONDS": str(STALLED_RUN_SECONDS),
        "HELIX_RECOVERY_INTERVAL_SECONDS": str(RECOVERY_INTERVAL_SECONDS),
        "HELIX_RUN_MAX_RECOVERIES": "1000",
    }


def redis_broker_url() -> str:
    parts = urlsplit(settings.REDIS_URL)
    return urlunsplit(parts._replace(path=f"/{REDIS_BROKER_DB}"))


def start_runs(owner, count: int) -> list[str]:
    return [
        services.agent_start(user=owner, agent_type=AGENT, message="Go.").session_id
        for _ in range(count)
    ]


def wait_for_progress(session_ids: list[str], steps: int, timeout: float = 60) -> None:
    """Wait until the runs together committed `steps` steps, and not all of them ended."""
    store, deadline = get_session_store(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = sum(store.load_state(session).step_count for session in session_ids)
        if done >= steps:
            assert done < len(session_ids) * STEPS, "every run ended before the fault"
            return
        time.sleep(0.1)
    pytest.fail(f"the runs committed {done} of {steps} steps within {timeout:.0f} s")


def outcome(session_ids: list[str], expected) -> dict[str, list[str]]:
    """Return each run's problems: what differs from the clean run."""
    store, found = get_session_store(), {}
    expected_notes = store.load_state(expected).custom_state
    for session in session_ids:
        problems = []
        if transcript(session) != transcript(expected):
            problems.append("messages or stream log differ from a clean run")
        if store.load_state(session).custom_state != expected_notes:
            problems.append(f"state {store.load_state(session).custom_state}")
        found[session] = problems
    return found


def clean_run(owner) -> str:
    (session,) = start_runs(owner, 1)
    wait_until_finished([session], timeout=60)
    return session


def report(figure, found: dict[str, list[str]], what: str) -> None:
    passed = sum(not problems for problems in found.values())
    figure(passed, len(found), what)
    assert passed == len(found), {s: p for s, p in found.items() if p}


def test_a_redis_broker_that_loses_its_queues_mid_run_loses_no_run(tmp_path, owner, figure):
    url = redis_broker_url()
    broker = redis.Redis.from_url(url)
    broker.flushdb()
    options = broker_options(url)
    with sending_to(url), Supervisor(tmp_path, 2, **options) as workers:
        expected = clean_run(owner)
        session_ids = start_runs(owner, RUNS)
        # Strike as soon as steps wait in the queue while the workers run others: the runs
        # are quick, so only a cheap look at the queue catches the moment on a busy machine.
        queue = workers.workers[0].queue
        wait_for(lambda: broker.llen(queue) >= RUNS // 3, what="steps queued")
        # What a restart without persistence empties: the queue and the unacknowledged steps.
        with broker.pipeline() as lost:
            lost.llen(workers.workers[0].queue).hlen("unacked").flushdb()
            queued, unacked, _ = lost.execute()
        flushed_at = time.monotonic()
        wait_until_finished(session_ids, timeout=60)
        took = time.monotonic() - flushed_at
        recovered = workers.read_logs().count("enqueued again")
    broker.flushdb()
    assert queued > 0, f"the flush found no step waiting in the queue ({unacked} unacknowledged)"
    assert recovered > 0, f"no run was recovered by the sweep ({queued} steps lost)"
    report(
        figure,
        outcome(session_ids, expected),
        f"runs completed as a clean run after the Redis broker lost {queued} queued and "
        f"{unacked} unacknowledged steps; {recovered} recovered by the sweep, the last run "
        f"ended {took:.1f} s after the flush",
    )


def test_rabbitmq_restarted_mid_run_loses_no_run(tmp_path, owner, figure):
    require("rabbitmq")
    options = broker_options(RABBITMQ_URL)
    workers = Supervisor(tmp_path, 2, **options)
    try:
        with sending_to(RABBITMQ_URL), workers:
            expected = clean_run(owner)
            session_ids = start_runs(owner, RUNS)
            wait_for_progress(session_ids, RUNS // 2)
            restarted_at = time.monotonic()
            restart_rabbitmq()
            down = time.monotonic() - restarted_at
            wait_until_finished(session_ids, timeout=120)
            took = time.monotonic() - restarted_at
            reconnected = workers.read_logs().count("Connection to broker lost")
    finally:  # Once every worker has stopped: a worker started meanwhile would find no queue.
        with kombu.Connection(RABBITMQ_URL) as connection:
            connection.default_channel.queue_delete(workers.workers[0].queue)
    assert reconnected >= len(workers.workers), "the restart did not reach every worker"
    report(
        figure,
        outcome(session_ids, expected),
        f"runs completed as a clean run after RabbitMQ was restarted mid-run (down {down:.1f} s); "
        f"the last run ended {took:.1f} s after the restart began",
    )


def restart_rabbitmq() -> None:
    """Stop RabbitMQ's application and start it again, as a broker restart would."""
    for command in ("stop_app", "start_app"):
        subprocess.run(["rabbitmqctl", command], check=True, capture_output=True, timeout=120)
    subprocess.run(["rabbitmqctl", "await_startup"], check=True, capture_output=True, timeout=120)
