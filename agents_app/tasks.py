"""Celery tasks: thin wrappers that call the executor with ids (STYLE 6)."""

import logging

from celery import shared_task

from agents_app import conf, executor, reaping, subagents
from sessions_app.errors import VersionConflict
from streams_app.services import purge_expired_streams

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, reject_on_worker_lost=True, bind=True, max_retries=None)
def run_step_task(self, session_id: str, run_id: str, step: int, errors: int = 0) -> None:
    """Run one agent step; enqueue the next one or retry as the executor says.

    A step that raises is tried again with backoff (`errors` counts its failures); after
    `HELIX["STEP_ERROR_RETRIES"]` retries its run fails, rather than stay running forever.
    """
    try:
        outcome = executor.run_step(session_id, run_id, step)
    except Exception as error:
        if errors < conf.step_error_retries():
            logger.warning("Step %s of run %s failed; retrying", step, run_id, exc_info=True)
            raise self.retry(
                kwargs={"errors": errors + 1}, countdown=conf.step_error_backoff_seconds(errors)
            ) from error
        executor.fail_run(session_id, run_id, step, f"Step {step} kept failing: {error!r}")
        raise
    if outcome.next_step is not None:
        run_step_task.delay(session_id, run_id, outcome.next_step)
    if outcome.retry_after is not None:
        raise self.retry(countdown=outcome.retry_after)


@shared_task(acks_late=True, reject_on_worker_lost=True, bind=True, max_retries=None)
def child_finished_task(self, parent_session_id: str, child_session_id: str) -> None:
    """Bring a finished child session to its parent; try again if another child's finish raced."""
    try:
        subagents.child_finished(parent_session_id, child_session_id)
    except VersionConflict as conflict:
        raise self.retry(countdown=0.05) from conflict


@shared_task(acks_late=True)
def child_timeout_task(parent_session_id: str, child_session_id: str, timeout: float) -> None:
    """Abort a child session still running past its tool's timeout."""
    subagents.child_timed_out(parent_session_id, child_session_id, timeout)


@shared_task
def cleanup_expired_sessions_task() -> None:
    """Reap expired sessions and purge streams past their retention (the beat schedule's job).

    Safe beside another sweep: each session is taken by one of them only.
    """
    report = reaping.reap_expired_sessions()
    purged = purge_expired_streams(batch_size=reaping.DEFAULT_BATCH_SIZE)
    logger.info("Reaped %s expired sessions; purged %s streams", len(report.reaped), purged)
