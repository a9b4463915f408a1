"""Sending the runtime's Celery tasks, by name: when the caller's transaction commits, or now.

Runs, run control, sub-agents and the reaper hand work to the workers; the tasks
(`agents_app.tasks`) call back into them. Sending by name keeps that one way: nothing below the
tasks imports them. A name the sending process has registered goes through its task (with the
task's options); any other is sent as it is, and the worker that registered it runs it.
"""

from celery import Signature, current_app
from django.db import transaction

RUN_STEP = "agents_app.tasks.run_step_task"
CHILD_FINISHED = "agents_app.tasks.child_finished_task"
CHILD_TIMEOUT = "agents_app.tasks.child_timeout_task"


def step_on_commit(session_id: str, run_id: str, step: int) -> None:
    """Enqueue the run's `step` once the caller's transaction commits."""
    _on_commit(RUN_STEP, (session_id, run_id, step))


def send_step(session_id: str, run_id: str, step: int) -> None:
    """Enqueue the run's `step` now."""
    _signature(RUN_STEP, (session_id, run_id, step)).apply_async()


def child_finished_on_commit(parent_session_id: str, child_session_id: str) -> None:
    """Tell the parent session, once the caller's transaction commits, that its child ended."""
    _on_commit(CHILD_FINISHED, (parent_session_id, child_session_id))


def child_timeout_on_commit(parent_session_id: str, child_session_id: str, timeout: float) -> None:
    """Abort the child session `timeout` seconds after the caller's transaction commits, if it
    still runs then."""
    _on_commit(CHILD_TIMEOUT, (parent_session_id, child_session_id, timeout), countdown=timeout)


def _on_commit(task_name: str, args: tuple, **options: float) -> None:
    transaction.on_commit(_signature(task_name, args, **options).apply_async)


def _signature(task_name: str, args: tuple, **options: float) -> Signature:
    """Return the task's signature with `args`, its message carrying their plain repr.

    Celery writes the arguments' text into each message, with its safe repr unless told:
    a tenth of a send's CPU. The runtime's arguments are ids and numbers, short enough that
    both give the same text.
    """
    return current_app.signature(
        task_name, args=args, argsrepr=repr(args), kwargsrepr="{}", **options
    )
