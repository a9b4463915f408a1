"""Waiting for agent runs and reading their streams, for the suites that run agents on a worker."""

import time

from sessions_app.stores import get_session_store
from sessions_app.stores.types import RunStatus, SessionStatus
from streams_app.backends import get_stream_manager
from tests.waiting import wait_for

FINISHED = {SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.INTERRUPTED}


def finished(session_id: str):
    """Wait until the session's run has finished; return its state."""
    return wait_for(
        lambda: (
            (state := get_session_store().load_state(session_id)).status in FINISHED
            and get_session_store().get_current_run(session_id).status != RunStatus.RUNNING
            and state
        ),
        what=f"session {session_id} to finish",
    )


def chunk_types(stream_id: str) -> list[str]:
    return [c.chunk["type"] for c in get_stream_manager().get_all_chunks(stream_id)]


def text_of(stream_id: str) -> str:
    chunks = get_stream_manager().get_all_chunks(stream_id)
    return "".join(c.chunk["delta"] for c in chunks if c.chunk["type"] == "text_delta")


def wait_until_ended(session_ids: list[str], timeout: float) -> dict[str, float]:
    """Wait until every session's run ended; return when each was seen ended (monotonic)."""
    store, deadline, ended = get_session_store(), time.monotonic() + timeout, {}
    while len(ended) < len(session_ids):
        assert time.monotonic() < deadline, f"{len(ended)} of {len(session_ids)} runs ended"
        for session_id in set(session_ids) - set(ended):
            if store.get_current_run(session_id).status != RunStatus.RUNNING:
                ended[session_id] = time.monotonic()
        time.sleep(0.1)
    return ended
