"""A step task past its time slice goes on with its run while its worker has threads to spare,
and hands the run's next step to the broker once none is spare (DESIGN "Concurrency")."""

import pytest

from agents_app.runs import services
from helix_project.celery import app
from sessions_app.models import AgentSession
from sessions_app.stores.types import SessionStatus
from streams_app.models import Stream
from tests.agents_app import agents  # noqa: F401 (registers `steady`)
from tests.agents_app.runs import wait_until_ended
from tests.agents_app.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("threads", "tasks"),
    [(4, 1), (1, 3)],  # Threads to spare: one task. Its only thread: a task per step.
)
def test_a_task_goes_on_past_its_slice_only_while_its_worker_has_threads_to_spare(
    tmp_path, owner, threads, tasks
):
    worker = Worker(tmp_path, concurrency=threads, STEP_TIME_SLICE_SECONDS="0.001")
    app.conf.task_default_queue = worker.queue  # The run waits in its queue meanwhile.
    started = services.agent_start(user=owner, agent_type="steady", message="Go.")
    session = AgentSession.objects.get(pk=started.session_id)
    epoch = Stream.objects.get(pk=session.stream_id).writer_epoch
    try:
        worker.start()
        wait_until_ended([started.session_id], timeout=60)
    finally:
        worker.stop()

    after = AgentSession.objects.get(pk=started.session_id)
    assert (after.status, after.step_count) == (SessionStatus.COMPLETED, 3)
    # Each task takes the lease and opens the run's stream writer once.
    assert Stream.objects.get(pk=session.stream_id).writer_epoch == epoch + tasks
