"""A worker killed inside an MCP tool call: the call is not made again (DESIGN invariant 4).

The call is recorded before it is sent, so the worker that takes the step over finds it begun
and unfinished: it reports the call cut off rather than send it to the server a second time.
"""

import json

import pytest

from agents_app import tasks
from agents_app.runs import services
from agents_app.runtime.tool_calls import CUT_OFF
from sessions_app.stores import get_session_store
from sessions_app.stores.types import SessionStatus
from tests.agents_app.mcp.conftest import (
    AGENTS,
    CLIENT_SIDE,
    plan,
    settled,
    stream_chunks,
)
from tests.agents_app.worker import Worker
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), CLIENT_SIDE]

WORKER_SETTINGS = {
    "HELIX_AGENTS": AGENTS,
    "STEP_LEASE_SECONDS": "1",
    "INTERRUPT_POLL_SECONDS": "0.1",
    "CELERY_VISIBILITY_TIMEOUT": "2",
}


def test_a_worker_killed_inside_an_mcp_call_does_not_make_the_call_twice(
    tmp_path, owner, fixture_server
):
    first = Worker(tmp_path, **WORKER_SETTINGS).start()
    try:
        started = services.agent_start(
            user=owner,
            agent_type="mcp_http",
            message=plan([("patient__effect", {"label": "once", "seconds": 30})]),
        )
        wait_for(lambda: fixture_server.calls("effect"), what="the call to reach the server")
        first.kill()  # Inside the call: the server has had its effect, no answer came back.
    finally:
        first.stop()

    second = Worker(tmp_path, **WORKER_SETTINGS).start()
    try:
        # What the broker's redelivery does (the filesystem broker has none): the step again.
        tasks.run_step_task.delay(started.session_id, started.run_id, 1)
        with second.log_shown_on_failure():
            state = settled(started.session_id, timeout=120)
    finally:
        second.stop()

    assert state.status == SessionStatus.COMPLETED, state.error
    assert fixture_server.calls("effect") == [
        {"tool": "effect", "arguments": {"label": "once", "seconds": 30}}
    ]
    [result] = [c for c in stream_chunks(started.session_id) if c["type"] == "tool_result"]
    assert (result["toolName"], result["result"], result["isError"]) == (
        "patient__effect",
        {"error": CUT_OFF},
        True,
    )
    output = get_session_store().load_state(started.session_id).output
    assert output.startswith(f"Results: {json.dumps({'error': CUT_OFF})}\n")
