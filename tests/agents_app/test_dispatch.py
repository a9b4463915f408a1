"""Sending the runtime's tasks by name, at once or when the caller's transaction commits."""

import pytest
from celery.app import amqp
from celery.signals import before_task_publish
from django.db import transaction

from agents_app.runs import dispatch

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("private_queue")]


def test_a_step_is_sent_at_once_or_on_commit_with_its_arguments_plain_repr(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("Celery's safe repr of the arguments was called")

    monkeypatch.setattr(amqp, "saferepr", refuse)  # A tenth of a send's CPU.
    published: list[tuple] = []

    def sent(sender=None, headers=None, body=None, **kwargs) -> None:
        published.append((sender, headers["argsrepr"], list(body[0])))

    before_task_publish.connect(sent, weak=False)
    try:
        dispatch.send_step("s-1", "r-1", 2)
        with transaction.atomic():
            dispatch.step_on_commit("s-1", "r-1", 3)
            assert len(published) == 1  # The second waits for the commit.
    finally:
        before_task_publish.disconnect(sent)

    assert published == [
        (dispatch.RUN_STEP, repr(("s-1", "r-1", 2)), ["s-1", "r-1", 2]),
        (dispatch.RUN_STEP, repr(("s-1", "r-1", 3)), ["s-1", "r-1", 3]),
    ]
