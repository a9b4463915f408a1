"""Beginning and continuing runs: what start, resume, retry, a queued start and the end of a
suspension share.

A run begins in the caller's transaction: its record, its input and a checkpoint are written,
and its first step is enqueued when that transaction commits. A run started while another is
running may wait in the session's queue (`HELIX["RUN_CONCURRENCY"]`); the transaction that ends
the running run begins it. A suspended run continues, on a new step, in the transaction that
answers the last call it waits for.
"""

from dataclasses import dataclass, replace
from typing import Any, Literal

from django.core.exceptions import ImproperlyConfigured

from agents_app.definitions.inputs import input_messages
from agents_app.observability import tracing
from agents_app.runs import dispatch
from sessions_app.conf import helix_setting
from sessions_app.stores import get_session_store
from sessions_app.stores.types import (
    CheckpointMeta,
    Message,
    RunStatus,
    SessionState,
    SessionStatus,
)
from streams_app import chunks
from streams_app.backends import get_stream_manager
from streams_app.backends.base import StreamWriter

ConcurrencyPolicy = Literal["reject", "interrupt", "enqueue"]
POLICIES: tuple[ConcurrencyPolicy, ...] = ("reject", "interrupt", "enqueue")


@dataclass(frozen=True, kw_only=True)
class StartedRun:
    """A run that began, or, `queued`, that begins when the session's running run ends."""

    session_id: str
    stream_id: str
    run_id: str
    queued: bool = False


def concurrency_policy() -> ConcurrencyPolicy:
    """Return what starting a run does while one is running (``HELIX["RUN_CONCURRENCY"]``).

    `reject` refuses it; `enqueue` queues it until the running run ends; `interrupt` queues it
    and interrupts the running run.
    """
    policy = helix_setting("RUN_CONCURRENCY", "reject")
    if policy not in POLICIES:
        raise ImproperlyConfigured(
            f'HELIX["RUN_CONCURRENCY"] must be one of {", ".join(POLICIES)}, not {policy!r}.'
        )
    return policy


def begin_run(
    state: SessionState, run_id: str, messages: list[Message], *, branch_from: str | None = None
) -> StartedRun:
    """Record the run, drop the interrupt flag `state` shows, commit the run's input and a
    checkpoint, and enqueue its first step.

    The checkpoint is the point `retry` goes back to when the run's first step is dropped.
    The run's metadata keeps `fromSequence`, the stream's last sequence before the run's chunks,
    and `branchFrom`, the message a regenerating run answers anew (see `agent_regenerate`).
    """
    store = get_session_store()
    writer = get_stream_manager().create_writer(state.stream_id, run_id, state.agent_type)
    metadata = {"firstStep": state.step_count + 1, "fromSequence": writer.last_sequence}
    if branch_from is not None:
        metadata["branchFrom"] = branch_from
    metadata |= tracing.run_started(state.session_id, run_id, state.agent_type)
    # The commit locks the session until the caller's transaction ends: the run is recorded
    # under that lock, not a second one of its own.
    store.save_state_and_promote_staging(
        state.session_id,
        replace(state, status=SessionStatus.ACTIVE, error=None, failure_reason=None),
        messages,
        CheckpointMeta(
            step_id=f"{run_id}:start",
            step_count=state.step_count,
            stream_sequence=writer.last_sequence,
            run_id=run_id,
        ),
        expected_version=state.version,
    )
    store.create_run(state.session_id, run_id, metadata=metadata, session_locked=True)
    if state.interrupt_flag is not None:  # A flag raised after `state` was read is the new run's.
        store.clear_interrupt_flag(state.session_id)
    dispatch.step_on_commit(state.session_id, run_id, state.step_count + 1)
    return StartedRun(session_id=state.session_id, stream_id=state.stream_id, run_id=run_id)


def queue_run(state: SessionState, run_id: str, run_input: Any) -> StartedRun | None:
    """Queue a run behind the session's running one, as the policy says; `None` if none runs.

    Under `interrupt` the running run is asked to stop. Call it inside a transaction.
    """
    store = get_session_store()
    if not store.queue_run(state.session_id, run_id, run_input):
        return None
    if concurrency_policy() == "interrupt":
        store.set_interrupt_flag(state.session_id, "A new run was started.")
    return StartedRun(
        session_id=state.session_id, stream_id=state.stream_id, run_id=run_id, queued=True
    )


def begin_queued_run(session_id: str) -> StartedRun | None:
    """Begin the session's oldest queued run, if any.

    Call it in the transaction that ends the session's run, once the run's last chunk is written.
    """
    store = get_session_store()
    queued = store.take_queued_run(session_id)
    if queued is None:
        return None
    state = store.load_state(session_id)
    return begin_run(state, queued.run_id, input_messages(queued.input))


def waits_for_nothing(state: SessionState) -> bool:
    """Return whether every call the suspended step waits for is answered or finished."""
    answered = all("submission" in call for call in state.pending_client_tool_calls.values())
    children = (state.suspended_awaiting_children or {}).values()
    return answered and all(child["finished"] for child in children)


def continue_run(state: SessionState, writer: StreamWriter, run_id: str) -> None:
    """Continue a suspended run whose calls are all answered, on a new step.

    Write `run_resumed` with `writer` (on the session's stream), mark the run running again,
    and enqueue the next step when the caller's transaction commits. A client re-attaching
    follows the run from here.
    """
    write_run_resumed(writer, state, run_id, previous_run_id=run_id)
    get_session_store().update_run_status(
        run_id, RunStatus.RUNNING, metadata={"resumedFromSequence": writer.last_sequence - 1}
    )
    dispatch.step_on_commit(state.session_id, run_id, state.step_count + 1)


def write_run_resumed(
    writer: StreamWriter, state: SessionState, run_id: str, *, previous_run_id: str | None
) -> None:
    """Mark on the session's stream that `run_id` goes on from `previous_run_id`."""
    writer.write(
        chunks.RunResumed(
            step=state.step_count,
            session_id=state.session_id,
            agent_type=state.agent_type,
            run_id=run_id,
            previous_run_id=previous_run_id,
        )
    )
