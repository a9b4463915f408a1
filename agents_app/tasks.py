"""Celery tasks: thin wrappers that call the executor with ids (STYLE 6).

With them, the worker signal handlers Helix needs, connected when the site's Celery app finds
this module (`app.autodiscover_tasks()`): a sweep when a worker starts, its metrics server, the
size of its pool (a step task past its time slice goes on while threads are spare), a threads
pool's threads started with the worker, and closing broken database connections before each
task.
"""

import functools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from celery import current_app as app
from celery import shared_task
from celery.signals import task_prerun, worker_init, worker_process_init, worker_ready
from celery.worker import state as worker_state
from django.db import close_old_connections

from agents_app import conf
from agents_app.observability import server, tracing
from agents_app.operations import reaping
from agents_app.runs import dispatch
from agents_app.runtime import executor, recovery
from agents_app.subagents import children
from sessions_app.errors import VersionConflict
from streams_app.services import purge_expired_streams

logger = logging.getLogger(__name__)

# The longest a step task goes on with its run while its worker has threads to spare.
LONGEST_TASK_SECONDS = 60.0


@shared_task(
    name=dispatch.RUN_STEP, acks_late=True, reject_on_worker_lost=True, bind=True, max_retries=None
)
def run_step_task(self, session_id: str, run_id: str, step: int, errors: int = 0) -> None:
    """Run the run's steps from `step` on for a time slice; hand the next one to the broker.

    Each step is its own durable commit; after `HELIX["STEP_TIME_SLICE_SECONDS"]` the task
    enqueues the next step and ends, so runs take turns on the workers, unless its worker has
    threads to spare: then no task waits for this one's thread, and it goes on, for at most
    half the broker's visibility timeout. A step that raises is tried again with backoff
    (`errors` counts its failures); after `HELIX["STEP_ERROR_RETRIES"]` retries its run
    fails, rather than stay running forever.
    """
    try:
        outcome = executor.run_steps(
            session_id,
            run_id,
            step,
            time_slice=conf.step_time_slice_seconds(),
            spare=functools.partial(_threads_to_spare, self.request.id),
            longest=_longest_task_seconds(),
        )
    except Exception as error:
        if errors < conf.step_error_retries():
            logger.warning("Step %s of run %s failed; retrying", step, run_id, exc_info=True)
            raise self.retry(
                kwargs={"errors": errors + 1}, countdown=conf.step_error_backoff_seconds(errors)
            ) from error
        executor.fail_run(session_id, run_id, step, f"Step {step} kept failing: {error!r}")
        raise
    if outcome.next_step is not None:
        # The lease goes first: the next task may start at once, and would find it held (and
        # wait half a lease to try again). Dying in between strands nothing: the run holds no
        # lease and moves no more, which is what the recovery sweep looks for.
        executor.hand_over(session_id, outcome.holder)
        dispatch.send_step(session_id, run_id, outcome.next_step)
    if outcome.retry_after is not None:
        raise self.retry(countdown=outcome.retry_after)


@shared_task(
    name=dispatch.CHILD_FINISHED,
    acks_late=True,
    reject_on_worker_lost=True,
    bind=True,
    max_retries=None,
)
def child_finished_task(self, parent_session_id: str, child_session_id: str) -> None:
    """Bring a finished child session to its parent; try again if another child's finish raced."""
    try:
        children.child_finished(parent_session_id, child_session_id)
    except VersionConflict as conflict:
        raise self.retry(countdown=0.05) from conflict


@shared_task(name=dispatch.CHILD_TIMEOUT, acks_late=True)
def child_timeout_task(parent_session_id: str, child_session_id: str, timeout: float) -> None:
    """Abort a child session still running past its tool's timeout."""
    children.child_timed_out(parent_session_id, child_session_id, timeout)


@shared_task
def cleanup_expired_sessions_task() -> None:
    """Reap expired sessions and purge streams past their retention (the beat schedule's job).

    Safe beside another sweep: each session is taken by one of them only.
    """
    report = reaping.reap_expired_sessions()
    purged = purge_expired_streams(batch_size=reaping.DEFAULT_BATCH_SIZE)
    logger.info("Reaped %s expired sessions; purged %s streams", len(report.reaped), purged)


@shared_task
def recover_stalled_runs_task() -> None:
    """Enqueue again the next step of every run nothing has moved for a while (beat's job)."""
    report = recovery.recover_stalled_runs(enqueue=dispatch.send_step, fail=executor.fail_run)
    if report.recovered or report.failed:
        logger.warning(
            "Recovered %s stalled runs; failed %s stalled too often",
            len(report.recovered),
            len(report.failed),
        )


@worker_ready.connect
def _recover_on_start(sender, **kwargs) -> None:
    """A starting worker sweeps once: what died with its predecessor is found at once."""
    recover_stalled_runs_task.delay()


@dataclass
class _Pool:
    """How many tasks the pool of the worker in this process runs at once (0: not known)."""

    size: int = 0


_pool = _Pool()


@worker_ready.connect
def _note_pool_size(sender, **kwargs) -> None:
    """Note the pool's size, as the worker resolved it from its options."""
    _pool.size = sender.pool.limit or 0


@worker_ready.connect
def _start_pool_threads(sender, **kwargs) -> None:
    """Start every thread of a threads pool with the worker, as prefork starts its processes.

    Otherwise the pool starts a thread for each task that finds none idle, in the worker's
    consumer loop, which waits for each new thread to run: a burst of runs on a busy worker
    waited there a fifth of a second before its first steps began. A thread costs about 20 kB.
    """
    executor = getattr(sender.pool, "executor", None)
    if not isinstance(executor, ThreadPoolExecutor):
        return
    # Each submit finds every started thread waiting, none idle, so it starts one more.
    waiting = threading.Event()
    for _ in range(sender.pool.limit or 0):
        executor.submit(waiting.wait)
    waiting.set()


def _threads_to_spare(task_id: str) -> bool:
    """Return whether the worker running this task has threads to spare: its pool runs tasks
    in this process (threads; a forking pool's child sees none of its worker's tasks) and
    holds fewer than it can run, so none waits for a thread, here or in the broker (the
    worker prefetches as many as it can run)."""
    return task_id in worker_state.requests and len(worker_state.reserved_requests) < _pool.size


def _longest_task_seconds() -> float:
    """Return how long a step task may go on: half the broker's visibility timeout, past which
    a Redis broker hands the unacknowledged task to another worker, and a minute at most."""
    timeout = (app.conf.broker_transport_options or {}).get("visibility_timeout")
    return min(LONGEST_TASK_SECONDS, timeout / 2) if timeout else LONGEST_TASK_SECONDS


@worker_init.connect
def _serve_metrics(**kwargs) -> None:
    """Serve this worker's metrics, if ``HELIX["WORKER_METRICS_PORT"]`` is set (the threads
    pool's steps run in this process)."""
    if address := conf.worker_metrics_address():
        server.serve_metrics(*address)


@worker_process_init.connect
def _trace_pool_process(**kwargs) -> None:
    """Trace in each process of a forking pool too: the SDK's exporter thread is not forked."""
    tracing.configure()


@task_prerun.connect
def _drop_broken_connections(**kwargs) -> None:
    """Before each task, close database connections that failed or outlived CONN_MAX_AGE.

    Celery closes every connection around each task unless ``CELERY_DB_REUSE_MAX`` is set;
    workers that set it (with ``CONN_MAX_AGE``) keep theirs, and this drops the unusable ones.
    """
    close_old_connections()
