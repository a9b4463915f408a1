"""Crash recovery and fencing on real Celery workers with the Redis broker (DESIGN invariants
3 and 4): runs killed mid-step complete after redelivery exactly as a clean run does, and a
worker paused past its lease can neither write to the stream nor commit."""

import itertools
import json
import random
import time

import pytest

from agents_app import services
from sessions_app.stores import get_session_store
from sessions_app.stores.types import SessionStatus
from sessions_app.usage import get_usage_store
from streams_app.backends import get_stream_manager
from tests.agents_app.test_runtime import finished, text_of, wait_for
from tests.agents_app.worker import Worker
from tests.services import require

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS, RUNS_PER_ROUND = 5, 4
# Chunk fields that differ between two runs of the same script: ids, times.
VARYING = {"timestamp", "sessionId", "agentType", "messageId", "toolCallId"}
TOOL_CHUNKS = {"tool_call_start", "tool_result", "custom"}


@pytest.fixture
def crashable_worker(tmp_path):
    require("redis")  # Only a real broker hands a dead worker's unacknowledged task on.
    worker = Worker(
        tmp_path,
        CELERY_VISIBILITY_TIMEOUT="2",
        STEP_LEASE_SECONDS="2",
        INTERRUPT_POLL_SECONDS="0.1",
    ).start()
    yield worker
    worker.stop()


def transcript(session_id: str) -> tuple[list, list]:
    """Return the session's messages and stream log, without what varies between runs."""
    messages = [
        (m.role, m.content, [(c["name"], c["arguments"]) for c in m.tool_calls], m.name)
        for m in get_session_store().get_messages(session_id, limit=1000).messages
    ]
    stream_id = get_session_store().load_state(session_id).stream_id
    log = [
        {key: value for key, value in c.chunk.items() if key not in VARYING}
        for c in get_stream_manager().get_all_chunks(stream_id)
    ]
    return messages, in_tool_order(log)


def in_tool_order(log: list[dict]) -> list[dict]:
    """Return the log with each stretch of tool chunks sorted: parallel calls interleave."""
    ordered: list[dict] = []
    for is_tool, stretch in itertools.groupby(log, key=lambda c: c["type"] in TOOL_CHUNKS):
        chunks = list(stretch)
        ordered += sorted(chunks, key=json.dumps) if is_tool else chunks
    return ordered


def test_runs_killed_mid_step_complete_as_a_clean_run_does(crashable_worker, owner):
    clean = services.agent_start(user=owner, agent_type="steady", message="Go.")
    assert finished(clean.session_id).status == SessionStatus.COMPLETED
    expected = transcript(clean.session_id)
    rng = random.Random(20261122)

    for _ in range(ROUNDS):
        runs = [
            services.agent_start(user=owner, agent_type="steady", message="Go.")
            for _ in range(RUNS_PER_ROUND)
        ]
        wait_for(lambda runs=runs: text_of(runs[0].stream_id), what="the runs to start")
        time.sleep(rng.uniform(0.0, 1.0))
        crashable_worker.kill()
        crashable_worker.start()
        for run in runs:
            state = finished(run.session_id)
            assert state.status == SessionStatus.COMPLETED
            assert state.custom_state == {"notes": ["a", "b", "c"]}
            assert transcript(run.session_id) == expected
            tokens = get_usage_store().get_entries(run.session_id, kinds=["tokens"])
            assert [entry.step_count for entry in tokens] == [1, 2, 3]  # Recorded once each.


def test_a_worker_paused_past_its_lease_cannot_write_or_commit(tmp_path, owner):
    require("redis")
    options = {"CELERY_VISIBILITY_TIMEOUT": "2", "STEP_LEASE_SECONDS": "1"}
    paused = Worker(tmp_path, concurrency=1, **options).start()
    successor = None
    try:
        started = services.agent_start(user=owner, agent_type="talker", message="Talk.")
        wait_for(lambda: text_of(started.stream_id), what="the model to start talking")
        paused.pause()
        successor = Worker(tmp_path, concurrency=1, **options)
        successor.queue = paused.queue
        successor.env["CELERY_TASK_DEFAULT_QUEUE"] = paused.queue
        successor.start()
        state = finished(started.session_id)
        assert state.status == SessionStatus.COMPLETED
        expected = transcript(started.session_id)
        paused.resume()
        wait_for(
            lambda: "was taken over by another worker and did not commit" in paused.read_log(),
            what="the paused worker to say it was taken over",
        )
        assert transcript(started.session_id) == expected
    finally:
        paused.stop()
        if successor is not None:
            successor.stop()
