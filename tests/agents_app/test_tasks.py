"""The step task: it runs a run's steps for a time slice, then hands the next to the broker."""

import pytest
from celery.signals import before_task_publish

from agents_app import tasks
from agents_app.runs import services
from sessions_app.models import AgentSession
from tests.agents_app import agents  # noqa: F401 (registers `steady`)

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
