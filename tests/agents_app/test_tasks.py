"""The step task: it runs a run's steps for a time slice, then hands the next to the broker."""

import dataclasses

import pytest
from celery.signals import before_task_publish
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents_app import conf, tasks
from agents_app.runs import services
from agents_app.runtime import executor
from agents_app.runtime.types import StepOutcome
from sessions_app.models import AgentSession
from sessions_app.stores import get_session_store
from streams_app.models import Stream
from tests.agents_app import agents  # Registers `steady`, `recorder` and `rewriter`.

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("private_queue")]


def test_the_next_step_is_sent_once_its_session_lease_is_free(owner, settings):
    # A worker thread may take the task the moment it is sent: had its run still held the
    # lease then, the task would find it taken and wait half a lease to try again.
    settings.HELIX = {**settings.HELIX, "STEP_TIME_SLICE_SECONDS": 0}
    started = services.agent_start(user=owner, agent_type="steady", message="Go.")
    holders: list[str] = []

    def sent(sender=None, **kwargs) -> None:
        if sender == tasks.run_step_task.name:
            holders.append(AgentSession.objects.get(pk=started.session_id).lease_holder)

    before_task_publish.connect(sent, weak=False)
    try:
        for step in (1, 2, 3):  # As the broker would deliver them, one after another.
            tasks.run_step_task.apply(args=(started.session_id, started.run_id, step))
    finally:
        before_task_publish.disconnect(sent)

    assert holders == ["", ""]  # Steps 2 and 3, each sent with the lease free.
    assert AgentSession.objects.get(pk=started.session_id).step_count == 3


def test_the_steps_of_one_slice_take_the_lease_and_open_the_stream_writer_once(owner, settings):
    """The steps after the first go on under the lease and with the writer the first took: a
    read each, where taking the lease and opening a writer are a write and a commit each."""
    settings.HELIX = {**settings.HELIX, "STEP_TIME_SLICE_SECONDS": 60}
    started = services.agent_start(user=owner, agent_type="steady", message="Go.")
    session = AgentSession.objects.get(pk=started.session_id)
    epoch = Stream.objects.get(pk=session.stream_id).writer_epoch

    tasks.run_step_task.apply(args=(started.session_id, started.run_id, 1))

    after = AgentSession.objects.get(pk=started.session_id)
    assert after.step_count == 3
    assert after.version == session.version + 1 + 3  # One claim, three commits.
    assert Stream.objects.get(pk=session.stream_id).writer_epoch == epoch + 1


def _run_one_slice(owner, agent_type: str) -> tuple[str, list[list], int]:
    """Run a three-step run in one task; return its session, the messages each step's model
    request held, and how often the task read the active branch from the database."""
    started = services.agent_start(user=owner, agent_type=agent_type, message="Go.")
    with CaptureQueriesContext(connection) as queries:
        tasks.run_step_task.apply(args=(started.session_id, started.run_id, 1))
    reads = sum("WITH RECURSIVE" in query["sql"] for query in queries.captured_queries)
    return started.session_id, agents.REQUESTS_SEEN.pop(started.session_id), reads


def test_the_steps_of_one_slice_go_on_with_the_history_their_commits_left(owner, settings):
    """Each step's model is asked with the active branch exactly as stored, but the task reads
    it only until it has a history revision to check the branch it keeps against: once on
    PostgreSQL, whose claim reads the revision, twice on SQLite, where the resumption does."""
    settings.HELIX = {**settings.HELIX, "STEP_TIME_SLICE_SECONDS": 60}

    session_id, seen, reads = _run_one_slice(owner, "recorder")

    history = get_session_store().get_history(session_id)
    assert len(history) == 6
    assert seen == [history[:1], history[:3], history[:5]]
    assert reads == (1 if connection.vendor == "postgresql" else 2)


def test_a_step_reads_the_history_again_when_a_write_changed_it_during_the_step_before(
    owner, settings
):
    settings.HELIX = {**settings.HELIX, "STEP_TIME_SLICE_SECONDS": 60}

    session_id, seen, reads = _run_one_slice(owner, "rewriter")  # Its tools edit message 1.

    assert [request[0].content for request in seen] == ["Go.", "rewritten 0", "rewritten 1"]
    assert seen[-1] == get_session_store().get_history(session_id)[:5]
    assert reads == 3


def test_a_step_reads_the_history_again_when_a_write_changed_it_between_the_steps(owner):
    started = services.agent_start(user=owner, agent_type="recorder", message="Go.")
    session_id, run_id = started.session_id, started.run_id
    first = executor.run_step(session_id, run_id, 1, holder="task-a")
    second = executor.run_step(
        session_id, run_id, 2, holder="task-a", writer=first.writer, history=first.history
    )
    assert second.history is not None  # The next step could go on with it...
    store = get_session_store()
    message = store.get_history(session_id)[0]
    store.update_message(session_id, dataclasses.replace(message, content="Edited."))  # ...but.

    executor.run_step(
        session_id, run_id, 3, holder="task-a", writer=second.writer, history=second.history
    )

    seen = agents.REQUESTS_SEEN.pop(session_id)
    assert [request[0].content for request in seen] == ["Go.", "Go.", "Edited."]
    assert seen[-1] == store.get_history(session_id)[:5]


def test_a_step_whose_kept_lease_was_taken_claims_the_step_as_any_other(owner):
    started = services.agent_start(user=owner, agent_type="steady", message="Go.")
    session_id, run_id = started.session_id, started.run_id
    first = executor.run_step(session_id, run_id, 1, holder="task-a")
    assert (first.next_step, first.holder) == (2, "task-a")
    store = get_session_store()
    store.release_lease(session_id, "task-a", clean=False)  # As if it ran out...
    assert store.claim_step(session_id, "task-b", ttl=30) is not None  # ...and was taken.

    second = executor.run_step(session_id, run_id, 2, holder="task-a", writer=first.writer)

    assert second == StepOutcome(retry_after=conf.step_lease_seconds() / 2)
    assert AgentSession.objects.get(pk=session_id).step_count == 1
    assert AgentSession.objects.get(pk=session_id).lease_holder == "task-b"
