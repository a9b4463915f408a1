"""Run-control services in-process: ownership, bad input, states that refuse, and lifecycle
hooks. Their first steps go to a private queue no worker reads (see `test_runtime` for runs)."""

import contextlib
from collections.abc import Iterator

import pytest
from django.db import connection

from agents_app.definitions.agent import Agent
from agents_app.definitions.hooks import AbortResult, AgentHooks
from agents_app.definitions.inputs import InvalidInput
from agents_app.definitions.registry import AgentNotFound, get_registry
from agents_app.errors import AgentTypeMismatch, HookRefused, InvalidResume, RunNotActive
from agents_app.runs import services
from agents_app.runs.control import abort_session
from sessions_app.errors import SessionNotFound
from sessions_app.models import AgentSession
from sessions_app.stores import get_session_store
from sessions_app.stores.statements import statements
from sessions_app.stores.types import SessionStatus
from streams_app.backends import get_stream_manager
from tests.step_commits import race_a_step_commit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("private_queue")]


@pytest.fixture
def hooked():
    """Register an agent whose hooks record what they saw; `refuse` makes before_start refuse."""
    seen: dict = {"refuse": False}

    def before_start(context):
        seen["before"] = (context.body, context.execution_state.is_executing)
        if context.execution_state.is_executing:
            context.execution_state.interrupt("new message")
        if seen["refuse"]:
            return AbortResult(status=401, body={"error": "User ID required"})
        return None

    async def after_start(context):  # Async hooks run too.
        seen["after"] = (context.session_id, context.run_id, context.agent_type)

    agent = Agent(
        name="hooked", hooks=AgentHooks(before_start=before_start, after_start=after_start)
    )
    get_registry().register(agent)
    yield seen
    get_registry().unregister("hooked")


def test_start_runs_the_hooks_around_the_run(owner, hooked):
    started = services.agent_start(user=owner, agent_type="hooked", message="Hi", user_id="u-1")

    body, executing = hooked["before"]
    assert body["agentType"] == "hooked"
    assert body["input"] == {"message": "Hi"}
    assert body["userId"] == "u-1"
    assert executing is False
    assert hooked["after"] == (started.session_id, started.run_id, "hooked")


def test_a_refusing_hook_writes_nothing_and_answers_with_its_status(owner, hooked):
    hooked["refuse"] = True

    with pytest.raises(HookRefused) as caught:
        services.agent_start(user=owner, agent_type="hooked", message="Hi")

    assert caught.value.http_status == 401
    assert caught.value.http_body() == {"error": "User ID required"}
    assert not AgentSession.objects.exists()
    assert "after" not in hooked


def test_a_hook_can_interrupt_the_running_execution(owner, hooked):
    started = services.agent_start(user=owner, agent_type="hooked", message="Hi")

    with pytest.raises(RunNotActive):  # Still running until its step sees the flag.
        services.agent_start(
            user=owner, agent_type="hooked", message="Again", session_id=started.session_id
        )

    assert hooked["before"][1] is True
    flag = get_session_store().check_interrupt_flag(started.session_id)
    assert flag.reason == "new message"


def test_another_users_session_is_refused_as_a_missing_one(owner, stranger):
    mine = services.agent_start(user=owner, agent_type="counter", message="add 1")
    controls = [services.agent_resume, services.agent_retry, services.agent_interrupt]
    for session_id in (mine.session_id, "no-such-session"):
        for control in [*controls, services.agent_abort]:
            with pytest.raises(SessionNotFound):
                control(user=stranger, session_id=session_id)
    with pytest.raises(SessionNotFound):
        services.agent_start(
            user=stranger, agent_type="counter", message="x", session_id=mine.session_id
        )
    state = get_session_store().load_state(mine.session_id)
    assert (state.status, state.aborted, state.message_count) == (SessionStatus.ACTIVE, False, 1)
    assert get_session_store().check_interrupt_flag(mine.session_id) is None


@contextlib.contextmanager
def sent_statements() -> Iterator[list[str]]:
    """Collect the SQL text of every statement sent in the block, before parameters are bound."""
    sent: list[str] = []

    def record(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield sent


def test_a_start_without_a_hook_reads_the_session_once_and_no_execution_state(owner):
    """For ownership, before anything else; its transaction begins from what that read. An
    agent without a `before_start` hook is not given the execution state, which would read
    the session again."""
    session_id = services.agent_session_create(user=owner, agent_type="counter").session_id

    with sent_statements() as sent:
        started = services.agent_start(
            user=owner, agent_type="counter", message="add 1", session_id=session_id
        )

    sql = statements(connection.vendor)
    assert sent.count(sql.load_session) == 1
    # Is one running? Asked in the transaction only.
    assert sent.count(sql.current_run) == 1
    # The commit's lock holds the session for the run's record too: no lock of its own.
    assert sent.count(sql.lock_for_commit) == 1
    assert sent.count(sql.lock_session) == 0
    assert started.session_id == session_id
    assert get_session_store().get_current_run(session_id).run_id == started.run_id


def test_a_start_drops_the_interrupt_flag_it_read_and_no_flag_it_did_not(owner):
    """A flag left from the run before must not stop the new run; where the session's read
    showed none, the start does not spend a statement dropping one."""
    store = get_session_store()
    flagged, clean = (
        services.agent_session_create(user=owner, agent_type="counter").session_id for _ in range(2)
    )
    store.set_interrupt_flag(flagged, "Raised as the last run ended.")

    for session_id in (flagged, clean):
        with sent_statements() as sent:
            services.agent_start(
                user=owner, agent_type="counter", message="add 1", session_id=session_id
            )
        drops = sent.count(statements(connection.vendor).clear_interrupt_flag)
        assert drops == (1 if session_id == flagged else 0)

    assert store.check_interrupt_flag(flagged) is None
    assert store.check_interrupt_flag(clean) is None


def test_a_start_reads_the_session_again_after_its_before_start_hook(owner, hooked):
    """The hook may change the session (it may interrupt its run): the start's transaction
    reads it afresh."""
    session_id = services.agent_session_create(user=owner, agent_type="hooked").session_id

    with sent_statements() as sent:
        services.agent_start(user=owner, agent_type="hooked", message="Hi", session_id=session_id)

    loads = sent.count(statements(connection.vendor).load_session)
    assert loads == 3  # Ownership, the hook's execution state, then the transaction's.
    assert hooked["before"][1] is False


def test_bad_input_and_unknown_agents_write_nothing(owner):
    with pytest.raises(InvalidInput):
        services.agent_start(user=owner, agent_type="counter", message=[])
    with pytest.raises(AgentNotFound) as caught:
        services.agent_start(user=owner, agent_type="nobody", message="Hi")
    assert "counter" in caught.value.available_types
    assert not AgentSession.objects.exists()


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ("a\x00b", "holds a NUL character"),
        ([{"content": "x", "metadata": {"note": "\ud800"}}], "holds an unpaired surrogate"),
    ],
)
def test_input_no_database_stores_is_refused_before_anything_is_written(owner, message, problem):
    session_id = services.agent_session_create(user=owner, agent_type="counter").session_id

    with pytest.raises(InvalidInput, match=problem) as caught:
        services.agent_start(
            user=owner, agent_type="counter", message=message, session_id=session_id
        )

    assert caught.value.details["problems"] == [
        {"location": "message", "problem": f"{problem}, which no database stores"}
    ]
    state = get_session_store().load_state(session_id)
    assert (state.message_count, state.version) == (0, 1)
    assert get_session_store().get_current_run(session_id) is None


def test_states_that_refuse_each_control(owner):
    started = services.agent_start(user=owner, agent_type="counter", message="add 1")
    session_id = started.session_id

    with pytest.raises(RunNotActive):
        services.agent_start(user=owner, agent_type="counter", message="x", session_id=session_id)
    with pytest.raises(AgentTypeMismatch):
        services.agent_start(
            user=owner, agent_type="researcher", message="x", session_id=session_id
        )
    with pytest.raises(RunNotActive):
        services.agent_resume(user=owner, session_id=session_id)
    with pytest.raises(RunNotActive):
        services.agent_retry(user=owner, session_id=session_id)

    services.agent_abort(user=owner, session_id=session_id, reason="test")

    state = get_session_store().load_state(session_id)
    assert (state.status, state.aborted) == (SessionStatus.FAILED, True)
    with pytest.raises(RunNotActive):
        services.agent_interrupt(user=owner, session_id=session_id)
    with pytest.raises(RunNotActive):
        services.agent_abort(user=owner, session_id=session_id)
    with pytest.raises(RunNotActive):
        services.agent_start(user=owner, agent_type="counter", message="x", session_id=session_id)


def test_resume_refuses_unknown_modes_and_checkpoints(owner):
    started = services.agent_start(user=owner, agent_type="counter", message="add 1")
    store = get_session_store()
    run = store.get_current_run(started.session_id)
    store.update_run_status(run.run_id, "interrupted")
    store.update_status(started.session_id, SessionStatus.INTERRUPTED)

    for mode, checkpoint_id in (("sideways", None), ("branch", "nope"), ("branch", None)):
        with pytest.raises(InvalidResume):
            services.agent_resume(
                user=owner, session_id=started.session_id, mode=mode, checkpoint_id=checkpoint_id
            )
    with pytest.raises(InvalidResume, match="no step to retry"):
        services.agent_resume(user=owner, session_id=started.session_id, mode="retry")


@pytest.mark.postgres
def test_aborting_a_session_while_its_step_commits_outlasts_the_deadlock():
    store, streams = get_session_store(), get_stream_manager()
    session = store.create_session(None, agent_type="researcher")
    streams.create_writer(session.stream_id, "run-1", "researcher")

    failures = race_a_step_commit(
        streams,
        session.session_id,
        session.stream_id,
        lambda: abort_session(session.session_id, "Enough."),
    )

    # PostgreSQL aborts the abort, which waited first; it goes again after the commit.
    assert failures == []
    state = store.load_state(session.session_id)
    assert (state.status, state.aborted) == (SessionStatus.FAILED, True)
    assert state.error == "Aborted: Enough."
    assert streams.get_stream_info(session.stream_id).status == "failed"
