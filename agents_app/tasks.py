"""Celery tasks: thin wrappers that call the executor with ids (STYLE 6)."""

from celery import shared_task

from agents_app import executor


@shared_task(acks_late=True, reject_on_worker_lost=True, bind=True, max_retries=None)
def run_step_task(self, session_id: str, run_id: str, step: int) -> None:
    """Run one agent step; enqueue the next one or retry as the executor says."""
    outcome = executor.run_step(session_id, run_id, step)
    if outcome.next_step is not None:
        run_step_task.delay(session_id, run_id, outcome.next_step)
    if outcome.retry_after is not None:
        raise self.retry(countdown=outcome.retry_after)
