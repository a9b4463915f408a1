"""What the fault suites compare runs by: waiting for many runs to finish, and a run's
transcript (its messages and its stream log) without what varies between two runs."""

import itertools
import json
import time

from sessions_app.stores import get_session_store
from sessions_app.stores.types import RunStatus, SessionStatus
from streams_app.backends import get_stream_manager

# Chunk fields that differ between two runs of the same script.
VARYING = {"timestamp", "sessionId", "agentType", "messageId", "toolCallId"}
TOOL_CHUNKS = {"tool_call_start", "tool_result", "custom"}
FINISHED = {SessionStatus.COMPLETED, SessionStatus.FAILED}


def wait_until_finished(session_ids: list[str], timeout: float) -> None:
    """Return once every session's run has completed or failed; fail after `timeout` seconds."""
    store, deadline = get_session_store(), time.monotonic() + timeout
    waiting = list(session_ids)
    while waiting and time.monotonic() < deadline:
        time.sleep(0.5)  # Polling a hundred runs harder would slow the workers it waits for.
        waiting = [s for s in waiting if not _finished(store, s)]
    assert not waiting, f"{len(waiting)} runs did not finish within {timeout:.0f} s: {waiting[:5]}"


def _finished(store, session_id: str) -> bool:
    state = store.load_state(session_id)
    return state.status in FINISHED and store.get_current_run(session_id).status in (
        RunStatus.COMPLETED,
        RunStatus.FAILED,
    )


def transcript(session_id: str) -> tuple[list, list]:
    """Return the session's messages and stream log, without what varies between runs."""
    store = get_session_store()
    messages = [
        (m.role, m.content, [(c["name"], c["arguments"]) for c in m.tool_calls], m.name)
        for m in store.get_messages(session_id, limit=1000).messages
    ]
    log = [
        {key: value for key, value in c.chunk.items() if key not in VARYING}
        for c in get_stream_manager().get_all_chunks(store.load_state(session_id).stream_id)
    ]
    return messages, in_tool_order(log)


def in_tool_order(log: list[dict]) -> list[dict]:
    """Return the log with each stretch of tool chunks sorted: parallel calls interleave."""
    ordered: list[dict] = []
    for is_tool, stretch in itertools.groupby(log, key=lambda c: c["type"] in TOOL_CHUNKS):
        chunks = list(stretch)
        ordered += sorted(chunks, key=json.dumps) if is_tool else chunks
    return ordered
