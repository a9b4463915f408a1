"""Starting a run while one runs: `HELIX["RUN_CONCURRENCY"]` rejects, enqueues or interrupts."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from agents_app.errors import RunNotActive
from agents_app.runs import services
from sessions_app.stores import get_session_store
from sessions_app.stores.types import MessageRole, RunStatus, SessionStatus
from streams_app.backends import get_stream_manager
from tests.agents_app.agents import LONG_TEXT
from tests.agents_app.runs import chunk_types, finished, text_of
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def policy(settings):
    """Set the concurrency policy for the test."""

    def use(name: str) -> None:
        settings.HELIX = {**settings.HELIX, "RUN_CONCURRENCY": name}

    return use


def start(owner, message: str, agent_type: str = "talker") -> services.StartedRun:
    return services.agent_start(
        user=owner, agent_type=agent_type, session_id="s-1", message=message
    )


@pytest.mark.usefixtures("private_queue")
def test_reject_is_the_default_and_queues_nothing(owner):
    first = start(owner, "One.")

    with pytest.raises(RunNotActive) as caught:
        start(owner, "Two.")

    assert caught.value.http_status == 409
    assert caught.value.details["status"] == "running"
    assert get_session_store().get_current_run("s-1").run_id == first.run_id
    assert get_session_store().list_queued_runs("s-1") == []


@pytest.mark.usefixtures("private_queue")
@pytest.mark.parametrize("name", ["enqueue", "interrupt"])
def test_enqueue_and_interrupt_queue_the_start_behind_the_running_run(owner, policy, name):
    first = start(owner, "One.")
    policy(name)

    second = start(owner, "Two.")

    store = get_session_store()
    assert second.queued is True
    assert second.run_id != first.run_id
    assert [q.run_id for q in store.list_queued_runs("s-1")] == [second.run_id]
    assert store.list_queued_runs("s-1")[0].input == "Two."
    assert store.get_current_run("s-1").run_id == first.run_id  # Nothing began yet.
    assert [m.content for m in store.get_messages("s-1").messages] == ["One."]
    flag = store.check_interrupt_flag("s-1")
    assert (flag is not None) == (name == "interrupt")


@pytest.mark.usefixtures("private_queue")
def test_an_idle_session_starts_at_once_whatever_the_policy(owner, policy):
    policy("enqueue")

    started = start(owner, "One.")

    assert started.queued is False
    assert get_session_store().get_current_run("s-1").run_id == started.run_id


@pytest.mark.usefixtures("private_queue")
def test_abort_drops_the_queued_runs(owner, policy):
    start(owner, "One.")
    policy("enqueue")
    start(owner, "Two.")

    services.agent_abort(user=owner, session_id="s-1", reason="stop")

    assert get_session_store().list_queued_runs("s-1") == []


def test_an_unknown_policy_is_a_configuration_error(owner, policy):
    policy("sometimes")

    with pytest.raises(ImproperlyConfigured, match="reject, interrupt, enqueue"):
        start(owner, "One.")


def _user_and_assistant_contents(session_id: str) -> list[tuple[str, str]]:
    messages = get_session_store().get_messages(session_id, limit=100).messages
    return [(m.role, m.content) for m in messages]


def test_a_queued_run_begins_on_the_worker_when_the_running_one_completes(worker, owner, policy):
    first = start(owner, "One.")
    wait_for(lambda: text_of(first.stream_id), what="the first run to start talking")
    policy("enqueue")

    second = start(owner, "Two.")
    wait_for(
        lambda: get_session_store().get_current_run("s-1").run_id == second.run_id,
        what="the queued run to begin",
    )
    state = finished("s-1")

    runs = get_session_store().list_runs("s-1")
    assert [(r.run_id, r.status) for r in runs] == [
        (first.run_id, RunStatus.COMPLETED),
        (second.run_id, RunStatus.COMPLETED),
    ]
    assert state.status == SessionStatus.COMPLETED
    assert _user_and_assistant_contents("s-1") == [
        (MessageRole.USER, "One."),
        (MessageRole.ASSISTANT, LONG_TEXT),
        (MessageRole.USER, "Two."),
        (MessageRole.ASSISTANT, LONG_TEXT),
    ]
    types = chunk_types(first.stream_id)
    assert types.count("run_completed") == 2
    assert types[-1] == "run_completed"
    assert get_stream_manager().get_stream_info(first.stream_id).status == "ended"
    assert get_session_store().list_queued_runs("s-1") == []


def test_interrupt_stops_the_running_run_and_begins_the_new_one(worker, owner, policy):
    first = start(owner, "One.")
    wait_for(lambda: text_of(first.stream_id), what="the first run to start talking")
    policy("interrupt")

    second = start(owner, "Two.")
    wait_for(
        lambda: get_session_store().get_current_run("s-1").run_id == second.run_id,
        what="the queued run to begin",
    )
    finished("s-1")

    runs = get_session_store().list_runs("s-1")
    assert [(r.run_id, r.status) for r in runs] == [
        (first.run_id, RunStatus.INTERRUPTED),
        (second.run_id, RunStatus.COMPLETED),
    ]
    contents = _user_and_assistant_contents("s-1")
    assert [role for role, _ in contents] == ["user", "assistant", "user", "assistant"]
    assert len(contents[1][1]) < len(LONG_TEXT)  # Cut short by the interrupt.
    assert contents[2:] == [(MessageRole.USER, "Two."), (MessageRole.ASSISTANT, LONG_TEXT)]
    types = chunk_types(first.stream_id)
    assert types.index("run_interrupted") < types.index("run_completed")
