"""The step task: it runs a run's steps for a time slice, then hands the next to the broker."""

import dataclasses

import pytest
from celery.signals import before_task_publish
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents_app import tasks
from agents_app.runs import services
from agents_app.runtime import executor
from agents_app.runtime.types import StepOutcome
from sessions_app.models import AgentSession
from sessions_app.stores import get_session_store
from sessions_app.stores.statements import statements
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
    """The steps after the first go on under the lease and with the writer the first took, as
    its commit left them: nothing read or written before each, where taking the lease and
    opening a writer are a write and a commit each."""
    settings.HELIX = {**settings.HELIX, "STEP_TIME_SLICE_SECONDS": 60}
    started = services.agent_start(user=owner, agent_type="steady", message="Go.")
    session = AgentSession.objects.get(pk=started.session_id)
    epoch = Stream.objects.get(pk=session.stream_id).writer_epoch

    with CaptureQueriesContext(connection) as queries:
        tasks.run_step_task.apply(args=(started.session_id, started.run_id, 1))

    after = AgentSession.objects.get(pk=started.session_id)
    assert after.step_count == 3
    assert after.version == session.version + 1 + 3  # One claim, three commits.
    assert Stream.objects.get(pk=session.stream_id).writer_epoch == epoch + 1
    lock = statements(connection.vendor).lock_for_commit.split("%s")[0]
    sent = [query["sql"] for query in queries.captured_queries]
    first_commit = next(n for n, sql in enumerate(sent) if sql.startswith(lock))
    table = connection.ops.quote_name(AgentSession._meta.db_table)
    reads = [  # Of the session's row: all of it, or its version.
        sql
        for sql in sent[first_commit + 1 :]
        if sql.startswith("SELECT") and (f"{table}.*" in sql or f'{table}."version"' in sql)
    ]
    assert [sql.startswith(lock) for sql in reads] == [True, True]  # The later commits' locks.


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
    it once: its claim reads the history revision that the branch it keeps is checked against
    at each commit."""
    settings.HELIX = {**settings.HELIX, "STEP_TIME_SLICE_SECONDS": 60}

    session_id, seen, reads = _run_one_slice(owner, "recorder")

    history = get_session_store().get_history(session_id)
    assert len(history) == 6
    assert seen == [history[:1], history[:3], history[:5]]
    assert reads == 1


def test_a_step_reads_the_history_again_when_a_write_changed_it_during_the_step_before(
    owner, settings
):
    settings.HELIX = {**settings.HELIX, "STEP_TIME_SLICE_SECONDS": 60}

    session_id, seen, reads = _run_one_slice(owner, "rewriter")  # Its tools edit message 1.

    assert [request[0].content for request in seen] == ["Go.", "rewritten 0", "rewritten 1"]
    assert seen[-1] == get_session_store().get_history(session_id)[:5]
    assert reads == 3


def test_a_write_between_the_steps_is_found_by_the_commit_of_the_step_after(owner):
    """A step goes on with the branch its previous one left, as its commit left it: a write
    landing in between is as one landing during the step, which its commit finds (the history
    revision moved), so the step after reads the branch again."""
    started = services.agent_start(user=owner, agent_type="recorder", message="Go.")
    session_id, run_id = started.session_id, started.run_id
    first = executor.run_step(session_id, run_id, 1, holder="task-a")
    assert first.history is not None  # The next step could go on with it...
    store = get_session_store()
    message = store.get_history(session_id)[0]
    store.update_message(session_id, dataclasses.replace(message, content="Edited."))  # ...but.

    second = executor.run_step(session_id, run_id, 2, holder="task-a", kept=first)
    assert second.history is None
    executor.run_step(session_id, run_id, 3, holder="task-a", kept=second)

    seen = agents.REQUESTS_SEEN.pop(session_id)
    assert [request[0].content for request in seen] == ["Go.", "Go.", "Edited."]
    assert seen[-1] == store.get_history(session_id)[:5]


def test_a_step_whose_kept_lease_was_taken_commits_nothing(owner):
    """The taker's claim fenced the holder off: the step it goes on with cannot commit, and
    the taker's own attempt will clean up what it streamed."""
    started = services.agent_start(user=owner, agent_type="steady", message="Go.")
    session_id, run_id = started.session_id, started.run_id
    first = executor.run_step(session_id, run_id, 1, holder="task-a")
    assert (first.next_step, first.holder) == (2, "task-a")
    store = get_session_store()
    store.release_lease(session_id, "task-a", clean=False)  # As if it ran out...
    taken = store.claim_step(session_id, "task-b", ttl=30)  # ...and was taken.

    second = executor.run_step(session_id, run_id, 2, holder="task-a", kept=first)

    assert second == StepOutcome()
    after = AgentSession.objects.get(pk=session_id)
    assert (after.step_count, after.version, after.lease_holder) == (
        1,
        taken.lease.version,
        "task-b",
    )
