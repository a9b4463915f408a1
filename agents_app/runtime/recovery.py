"""The recovery sweep: no run stays `running` with nothing moving it (DESIGN invariant 9).

A run moves only while a step task for it exists, and a task can be lost: a broker restarted
without persistence, a queue purged, a worker killed after its step's commit and before it
enqueued the next. The sweep (Celery beat, every `HELIX_RECOVERY_INTERVAL_SECONDS`, and once
when a worker starts) finds runs that neither held a lease nor committed a step for
`HELIX["STALLED_RUN_SECONDS"]` and enqueues their next step again.

A recovered run whose task was only slow, not lost, gets a second task; that is safe: the
second claims the lease only after the first released it, then finds the step committed and
does nothing (`executor.run_step`). A run the sweep finds stalled at the same step more than
`HELIX["RUN_MAX_RECOVERIES"]` times in a row fails with `failure_reason="stalled"`.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils import timezone

from agents_app import conf
from agents_app.observability.metrics import RECOVERIES
from sessions_app.stores import get_session_store
from sessions_app.stores.types import StalledRun

logger = logging.getLogger(__name__)

BATCH_SIZE = 100


@dataclass
class RecoveryReport:
    """What one sweep did: the runs it enqueued again and the runs it failed."""

    recovered: list[StalledRun] = field(default_factory=list)
    failed: list[StalledRun] = field(default_factory=list)


def recover_stalled_runs(
    enqueue: Callable[[str, str, int], Any], fail: Callable[..., bool]
) -> RecoveryReport:
    """Enqueue the next step of every stalled run again, or fail those stalled too often.

    `enqueue(session_id, run_id, step)` sends a step task (`dispatch.send_step`);
    `fail(session_id, run_id, step, message, failure_reason=...)` fails a run (the executor's
    `fail_run`). Both come from the caller, which keeps this module out of the runtime's loop.
    """
    store, report = get_session_store(), RecoveryReport()
    idle_since = timezone.now() - timedelta(seconds=conf.stalled_run_seconds())
    while batch := store.mark_stalled_runs(idle_since, limit=BATCH_SIZE):
        for run in batch:
            if run.recoveries > conf.run_max_recoveries():
                _give_up(run, fail)
                report.failed.append(run)
                RECOVERIES.labels("failed").inc()
                continue
            logger.warning(
                "Run %s of session %s had not moved for %.0f s: step %s enqueued again "
                "(recovery %s)",
                run.run_id,
                run.session_id,
                conf.stalled_run_seconds(),
                run.step,
                run.recoveries,
            )
            enqueue(run.session_id, run.run_id, run.step)
            report.recovered.append(run)
            RECOVERIES.labels("recovered").inc()
        if len(batch) < BATCH_SIZE:
            break
    return report


def _give_up(run: StalledRun, fail: Callable[..., bool]) -> None:
    message = (
        f"The run stalled at step {run.step}: recovered {run.recoveries - 1} times, "
        "it never moved on."
    )
    if fail(run.session_id, run.run_id, run.step, message, failure_reason="stalled"):
        logger.error("Run %s of session %s failed: %s", run.run_id, run.session_id, message)
