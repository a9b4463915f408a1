"""Agent runs end to end on a real Celery worker subprocess (Redis broker when the run has
Redis, else the filesystem broker), against this run's test database."""

import time

import pytest

from agents_app.errors import RunNotActive
from agents_app.runs import services
from sessions_app.stores import get_session_store
from sessions_app.stores.types import MessageRole, RunStatus, SessionStatus
from sessions_app.usage import get_usage_store
from streams_app.backends import get_stream_manager
from tests.agents_app.agents import LONG_TEXT
from tests.agents_app.runs import chunk_types, finished, text_of
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def roles(session_id: str) -> list[str]:
    return [m.role for m in get_session_store().get_messages(session_id, limit=1000).messages]


def test_a_run_with_tools_ends_with_validated_structured_output(worker, owner):
    started = services.agent_start(
        user=owner, agent_type="researcher", message="What are django and postgresql?"
    )

    state = finished(started.session_id)

    assert state.status == SessionStatus.COMPLETED
    assert state.output["sources"] == ["django", "postgresql"]
    assert state.custom_state == {"searches": ["What are django and postgresql?"]}
    assert roles(started.session_id) == ["user", "assistant", "tool", "assistant"]
    assert chunk_types(started.stream_id) == [
        "text_delta",
        "text_delta",
        "tool_call_start",
        "tool_result",
        "run_completed",
    ]
    info = get_stream_manager().get_stream_info(started.stream_id)
    assert info.status == "ended"
    run = get_session_store().get_current_run(started.session_id)
    assert (run.status, run.step_count) == (RunStatus.COMPLETED, 2)


def test_parallel_tool_writes_all_land_and_every_step_commits(worker, owner):
    started = services.agent_start(user=owner, agent_type="notetaker", message="Take notes.")

    state = finished(started.session_id)

    assert state.status == SessionStatus.COMPLETED
    assert state.custom_state == {"notes": ["first", "second", "third"]}
    assert state.step_count == 3
    steps = [c.step_count for c in get_session_store().list_checkpoints(started.session_id)]
    assert steps == [3, 2, 1, 0]  # Newest first; 0 is the run's start.
    custom = [c.chunk for c in get_stream_manager().get_all_chunks(started.stream_id)]
    assert [c["data"] for c in custom if c["type"] == "custom"][-1] == {"noted": "third"}


def test_usage_is_recorded_with_each_step(worker, owner):
    started = services.agent_start(user=owner, agent_type="notetaker", message="Take notes.")
    finished(started.session_id)

    rollup = get_usage_store().get_rollup(started.session_id)

    assert set(rollup.tokens_by_model) == {"scripted"}
    assert rollup.tokens.total == rollup.tokens.prompt + rollup.tokens.completion > 0
    assert (rollup.tool_stats.total_calls, rollup.tool_stats.successful_calls) == (3, 3)
    assert rollup.custom == {"notes": {"characters": len("first" + "second" + "third")}}
    steps = [
        e.step_count for e in get_usage_store().get_entries(started.session_id, kinds=["tokens"])
    ]
    assert steps == [1, 2, 3]


def test_a_session_remembers_earlier_turns(worker, owner):
    first = services.agent_start(user=owner, agent_type="counter", message="add 5")
    finished(first.session_id)
    second = services.agent_start(
        user=owner, agent_type="counter", message="add 7", session_id=first.session_id
    )

    state = finished(second.session_id)

    assert second.session_id == first.session_id
    assert state.custom_state == {"count": 12}
    assert state.output == "The counter is now 12."
    assert [r.turn for r in get_session_store().list_runs(first.session_id)] == [1, 2]


def test_a_tool_that_raises_becomes_an_error_result_and_the_run_goes_on(worker, owner):
    started = services.agent_start(user=owner, agent_type="clumsy", message="Try it.")

    state = finished(started.session_id)

    assert state.status == SessionStatus.COMPLETED
    results = [
        c.chunk
        for c in get_stream_manager().get_all_chunks(started.stream_id)
        if c.chunk["type"] == "tool_result"
    ]
    assert results[0]["isError"] is True
    assert "cannot handle this" in results[0]["result"]["error"]


def test_what_a_model_or_tool_says_that_no_database_stores_is_stored_with_replacements(
    worker, owner
):
    started = services.agent_start(user=owner, agent_type="garbler", message="Read it.")

    state = finished(started.session_id)

    assert state.status == SessionStatus.COMPLETED
    assert text_of(started.stream_id) == "Odd\ufffd bytes \ufffd hereRead."
    chunks = [c.chunk for c in get_stream_manager().get_all_chunks(started.stream_id)]
    call = next(c for c in chunks if c["type"] == "tool_call_start")
    assert call["input"] == {"path": "a\ufffdb"}  # The model's arguments, as the tool got them.
    read = "a\ufffdb: bin\ufffdary \ufffd"
    assert next(c for c in chunks if c["type"] == "tool_result")["result"] == {"read": read}
    assert next(c for c in chunks if c["type"] == "custom")["data"] == {"read": read}
    assert state.custom_state == {"last": read, "all": [read]}
    messages = get_session_store().get_messages(started.session_id, limit=10).messages
    assert [m.content for m in messages if m.role == MessageRole.ASSISTANT] == [
        "Odd\ufffd bytes \ufffd here",
        "Read.",
    ]
    assert messages[1].tool_calls[0]["arguments"] == {"path": "a\ufffdb"}


def test_a_failure_whose_message_no_database_stores_fails_the_run_with_replacements(worker, owner):
    started = services.agent_start(user=owner, agent_type="mumbler", message="Go.")

    state = finished(started.session_id)

    assert (state.status, state.error) == (SessionStatus.FAILED, "The model failed: bad\ufffd byte")
    run = get_session_store().get_current_run(started.session_id)
    assert (run.status, run.error) == (RunStatus.FAILED, state.error)


def test_a_run_fails_at_its_step_limit(worker, owner):
    started = services.agent_start(user=owner, agent_type="looper", message="Go.")

    state = finished(started.session_id)

    assert state.status == SessionStatus.FAILED
    assert state.error == "Reached the limit of 3 steps."
    assert state.step_count == 3
    assert chunk_types(started.stream_id)[-1] == "run_failed"
    assert get_stream_manager().get_stream_info(started.stream_id).status == "failed"


def test_retryable_model_errors_are_retried_and_their_partial_text_dropped(worker, owner):
    started = services.agent_start(user=owner, agent_type="flaky", message="Hello?")

    state = finished(started.session_id)

    assert state.status == SessionStatus.COMPLETED
    assert text_of(started.stream_id) == "Recovered."


def test_a_failed_run_fails_its_stream_and_can_be_retried(worker, owner):
    started = services.agent_start(user=owner, agent_type="second-chance", message="Hi.")
    failed = finished(started.session_id)
    assert failed.status == SessionStatus.FAILED
    assert "bad request" in failed.error
    assert get_stream_manager().get_stream_info(started.stream_id).status == "failed"

    retried = services.agent_retry(user=owner, session_id=started.session_id)

    state = finished(started.session_id)
    assert state.status == SessionStatus.COMPLETED
    assert state.output == "Second time lucky."
    assert retried.run_id != started.run_id
    assert chunk_types(started.stream_id)[-2:] == ["text_delta", "run_completed"]


def test_a_step_that_keeps_raising_fails_its_run_after_its_retries(worker, owner):
    offset = len(worker.read_log())
    started = services.agent_start(user=owner, agent_type="buggy", message="Hi.")

    state = finished(started.session_id)

    assert state.status == SessionStatus.FAILED
    assert "Step 1 kept failing: KeyError('missing')" in state.error
    assert get_session_store().get_current_run(started.session_id).status == RunStatus.FAILED
    assert get_stream_manager().get_stream_info(started.stream_id).status == "failed"
    assert chunk_types(started.stream_id)[-1] == "run_failed"
    assert worker.read_log(offset).count("retrying") == 2  # STEP_ERROR_RETRIES


def interrupted_mid_stream(owner) -> services.StartedRun:
    started = services.agent_start(user=owner, agent_type="talker", message="Talk.")
    wait_for(lambda: len(text_of(started.stream_id)) > 20, what="the model to start talking")
    asked_at = time.monotonic()
    services.agent_interrupt(user=owner, session_id=started.session_id, reason="enough")
    state = finished(started.session_id)
    assert time.monotonic() - asked_at < 2.0  # Observed while streaming, not at the end.
    assert state.status == SessionStatus.INTERRUPTED
    assert chunk_types(started.stream_id)[-1] == "run_interrupted"
    return started


@pytest.mark.parametrize("mode", ["continue", "retry", "branch"])
def test_an_interrupted_run_resumes_in_each_mode(worker, owner, mode):
    started = interrupted_mid_stream(owner)
    partial = get_session_store().get_messages(started.session_id).messages[-1]
    assert partial.role == MessageRole.ASSISTANT
    assert 0 < len(partial.content) < len(LONG_TEXT)
    start_checkpoint = get_session_store().list_checkpoints(started.session_id)[-1]

    resumed = services.agent_resume(
        user=owner,
        session_id=started.session_id,
        mode=mode,
        checkpoint_id=start_checkpoint.checkpoint_id if mode == "branch" else None,
    )

    state = finished(started.session_id)
    assert state.status == SessionStatus.COMPLETED
    assert state.output == LONG_TEXT
    assert resumed.run_id != started.run_id
    # `continue` keeps the partial reply; `retry` and `branch` went back before it.
    expected = ["user", "assistant", "assistant"] if mode == "continue" else ["user", "assistant"]
    assert roles(started.session_id) == expected
    assert "run_resumed" in chunk_types(started.stream_id)


def test_an_aborted_run_fails_for_good(worker, owner):
    started = services.agent_start(user=owner, agent_type="talker", message="Talk.")
    wait_for(lambda: text_of(started.stream_id), what="the model to start talking")

    services.agent_abort(user=owner, session_id=started.session_id, reason="stop now")

    state = get_session_store().load_state(started.session_id)
    assert (state.status, state.aborted, state.abort_reason) == (
        SessionStatus.FAILED,
        True,
        "stop now",
    )
    assert get_stream_manager().get_stream_info(started.stream_id).status == "failed"
    time.sleep(1.0)  # The worker notices, and may not commit anything.
    assert roles(started.session_id) == ["user"]
    for control in (services.agent_retry, services.agent_resume):
        with pytest.raises(RunNotActive):
            control(user=owner, session_id=started.session_id)


def test_the_on_complete_hook_runs_when_a_run_ends(worker, owner):
    started = services.agent_start(user=owner, agent_type="reporter", message="Go.")

    assert finished(started.session_id).status == SessionStatus.COMPLETED

    custom = wait_for(
        lambda: get_usage_store().get_rollup(started.session_id).custom,
        what="the hook to record the run's end",
    )
    assert custom == {"on_complete": {"completed": 1}}
