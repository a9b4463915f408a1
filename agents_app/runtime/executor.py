"""One agent step, as the plain function a Celery task calls (DESIGN "One turn, end to end").

`run_step(session_id, run_id, step)` is idempotent by session, run and step, so a redelivered
task is safe (DESIGN invariant 4):

- a step whose commit landed does nothing, except enqueue the next step when its attempt died
  between commit and enqueue (the lease is free and the run goes on);
- a step that died before commit is run again by whoever takes the session's lease next.
  The lease tells it that its last holder never released it (`Lease.taken_over`), so it first
  drops the dead attempt's partial chunks (`cleanup_to_step`), cuts messages back to the last
  checkpoint and rolls back staged changes; a lease released cleanly needs none of that. No
  tool call runs twice: the store's records of the dead attempt's calls say which finished
  (their outcomes are replayed) and which were cut off (`tool_calls`);
- an attempt that lost its lease (a worker paused too long) can neither write chunks (its
  exclusive stream writer is fenced) nor commit (taking the lease bumped the version);
- a step left unfinished by more than `HELIX["STEP_MAX_ABANDONED"]` attempts in a row (one
  that kills its worker, say) fails its run instead of being delivered for ever.

The step commit stages the tools' state changes and writes messages, state, their promotion,
checkpoint and usage in one transaction, with the run's last chunk and the end of the stream
when the run finishes.
"""

import contextlib
import logging
import time
import uuid
from collections.abc import Callable

from agents_app import conf
from agents_app.observability import metrics, tracing
from agents_app.runtime.attempt import Attempt
from agents_app.runtime.types import LeaseLost, StepOutcome
from sessions_app.errors import SessionNotFound, VersionConflict
from sessions_app.stores import get_session_store
from sessions_app.stores.types import RunRecord, RunStatus, SessionState, SessionStatus
from streams_app.errors import WriterSuperseded

logger = logging.getLogger(__name__)


def run_steps(
    session_id: str,
    run_id: str,
    step: int,
    *,
    time_slice: float,
    spare: Callable[[], bool] = lambda: False,
    longest: float = 0.0,
) -> StepOutcome:
    """Run the run's steps from `step` on, one durable commit each, for about `time_slice`.

    Past the slice it goes on while `spare()` says that its worker has threads to spare (no
    other task waits for this one's), up to `longest` seconds in all. Then it returns the
    outcome of the last step run: the task hands its `next_step` to the broker, so a long
    run takes turns with the others rather than keeping a worker to itself. A slice of 0 runs
    one step.
    """
    holder = uuid.uuid4().hex
    began = time.monotonic()
    kept: StepOutcome | None = None
    while True:
        outcome = run_step(session_id, run_id, step, holder=holder, kept=kept)
        if outcome.next_step is None:
            return outcome
        ran = time.monotonic() - began
        if ran >= time_slice and (time_slice <= 0 or ran >= longest or not spare()):
            return outcome
        step, kept = outcome.next_step, outcome


def hand_over(session_id: str, holder: str) -> None:
    """Release the lease a run kept between steps, before its next step goes to the broker."""
    with contextlib.suppress(SessionNotFound):
        get_session_store().release_lease(session_id, holder)


def run_step(
    session_id: str,
    run_id: str,
    step: int,
    *,
    holder: str,
    kept: StepOutcome | None = None,
) -> StepOutcome:
    """Run step `step` of the run as `holder`, or do what a redelivery of it requires.

    A step its run committed already is done with, unless the lease says that its holder
    died since (it never released it): that holder may have died before handing the next
    step on, so this attempt runs it.

    `kept` is the outcome of the run's previous step, when `holder` kept the lease since its
    commit: the step goes on with the claim that commit left and that step's stream writer,
    reading and writing nothing first, where a step of its own takes the lease and opens a
    writer (two writes, each its own commit). Had the lease been lost meanwhile, the taker's
    claim fenced this holder off: its watcher's renewal fails, and so would its commit. The
    step goes on with the active branch the previous one left too, if it has it.
    """
    store = get_session_store()
    lease_seconds = conf.step_lease_seconds()
    if kept is not None:
        claim, writer, history = kept.claim, kept.writer, kept.history
    else:
        writer = history = None
        try:
            claim = store.claim_step(session_id, holder, lease_seconds)
        except SessionNotFound:
            return StepOutcome()
    if claim is None:  # Another attempt runs it; if that worker died, its lease runs out.
        return StepOutcome(retry_after=lease_seconds / 2)
    lease = claim.lease
    state, run = _current(claim.state, claim.run, run_id)
    if state is not None and state.step_count >= step and lease.taken_over:
        step = state.step_count + 1  # The run goes on where its dead holder left it.
    elif state is None or state.step_count >= step:  # Ended, or a step committed already.
        store.release_lease(session_id, holder, clean=not lease.taken_over)
        return StepOutcome()
    attempt = Attempt(
        store,
        state,
        run,
        step,
        holder,
        history_revision=claim.history_revision,
        history=history,
    )
    if lease.abandoned > conf.step_max_abandoned():
        return attempt.give_up(
            f"Step {step} was left unfinished by {lease.abandoned} attempts in a row "
            "(its worker died, stalled or failed each time)."
        )
    try:
        with (
            metrics.step(state.agent_type),
            tracing.step_span(
                run.metadata,
                session_id=session_id,
                run_id=run_id,
                step=step,
                agent_type=state.agent_type,
            ),
        ):
            return attempt.run(recover=lease.taken_over, writer=writer)
    except (LeaseLost, WriterSuperseded, VersionConflict) as error:
        logger.warning(
            "Step %s of run %s was taken over by another worker and did not commit: %s",
            step,
            run_id,
            error,
        )
        return StepOutcome()
    except BaseException:
        store.release_lease(session_id, holder, clean=False)  # Its leftovers need undoing.
        raise


def fail_run(
    session_id: str, run_id: str, step: int, message: str, *, failure_reason: str = "step_error"
) -> bool:
    """Fail the run at `step` after it kept failing or stalling; return whether it was failed now.

    It waits for no one: if another attempt holds the lease, that attempt decides.
    """
    store = get_session_store()
    holder = uuid.uuid4().hex
    claim = store.claim_step(session_id, holder, conf.step_lease_seconds())
    if claim is None:
        return False
    state, run = _current(claim.state, claim.run, run_id)
    if state is None or state.step_count >= step:
        store.release_lease(session_id, holder, clean=not claim.lease.taken_over)
        return False
    attempt = Attempt(store, state, run, step, holder)
    attempt.fail(attempt.open_writer(), message, failure_reason=failure_reason)
    return True


def _current(
    state: SessionState, run: RunRecord | None, run_id: str
) -> tuple[SessionState | None, RunRecord | None]:
    """Return the session and its current run if that is the run, and running."""
    if run is None or run.run_id != run_id or run.status != RunStatus.RUNNING:
        return None, None
    if state.status != SessionStatus.ACTIVE:
        return None, None
    return state, run
