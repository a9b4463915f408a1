"""Many steps in flight in one worker process (DESIGN "Concurrency"): a step waiting on its model
holds a thread, not a process, so one worker carries hundreds of conversations at once, and a
tool that blocks its thread holds up no other step."""

import time

import pytest

from agents_app.runs import services
from sessions_app.stores import get_session_store
from sessions_app.stores.types import SessionStatus
from streams_app.backends import get_stream_manager
from tests.agents_app.agents import SLOW_REPLY
from tests.agents_app.runs import wait_until_ended
from tests.agents_app.worker import Worker

# Both measure how steps overlap in time, which tests running beside them would distort.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.alone]

IN_FLIGHT = 200


def test_two_hundred_steps_wait_on_their_models_at_once_in_one_worker_process(tmp_path, owner):
    worker = Worker(tmp_path, concurrency=IN_FLIGHT).start()
    try:
        sessions = [
            services.agent_start(user=owner, agent_type="slow-streamer", message="Go.").session_id
            for _ in range(IN_FLIGHT)
        ]
        wait_until_ended(sessions, timeout=120)
    finally:
        worker.stop()

    store, streams = get_session_store(), get_stream_manager()
    spans = []
    for session_id in sessions:
        state = store.load_state(session_id)
        assert (state.status, state.output) == (SessionStatus.COMPLETED, SLOW_REPLY)
        log = streams.get_all_chunks(state.stream_id)
        assert [c.sequence for c in log] == list(range(1, len(log) + 1))
        deltas = [c.chunk for c in log if c.chunk["type"] == "text_delta"]
        assert "".join(d["delta"] for d in deltas) == SLOW_REPLY
        assert log[-1].chunk["type"] == "run_completed"
        spans.append((deltas[0]["timestamp"], deltas[-1]["timestamp"]))
    # Every reply streamed over SLOW_REPLY_SECONDS, longer than starting them all takes; one
    # after another they would take many minutes. Nearly all streamed at the same moment.
    busiest = max(sum(start <= moment <= end for start, end in spans) for moment, _ in spans)
    assert busiest >= IN_FLIGHT * 0.9, f"at most {busiest} replies streamed at once"


def test_a_tool_that_blocks_its_thread_holds_up_no_other_step(tmp_path, owner):
    worker = Worker(tmp_path, concurrency=8).start()
    try:
        sleeper = services.agent_start(user=owner, agent_type="sleeper", message="Nap.")
        time.sleep(0.5)  # Its tool is asleep now.
        started = time.monotonic()
        quick = [
            services.agent_start(user=owner, agent_type="counter", message="add 1").session_id
            for _ in range(5)
        ]
        ended = wait_until_ended(quick, timeout=30)
        slept = wait_until_ended([sleeper.session_id], timeout=30)
    finally:
        worker.stop()

    assert max(ended.values()) < slept[sleeper.session_id]  # All done while the tool slept,
    assert max(ended.values()) - started < 2.5  # well within its three seconds.
    assert get_session_store().load_state(sleeper.session_id).status == SessionStatus.COMPLETED
