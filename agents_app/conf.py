"""The runtime's knobs in the ``HELIX`` setting, read when used (never at import)."""

from sessions_app.conf import helix_setting


def step_lease_seconds() -> float:
    """Return how long a step's lease lasts without renewal (``HELIX["STEP_LEASE_SECONDS"]``)."""
    return float(helix_setting("STEP_LEASE_SECONDS", 30.0))


def step_time_slice_seconds() -> float:
    """Return how long a task runs a run's steps one after another before it hands over.

    Past the slice, the task gives the run's next step to the broker and ends, so one long
    run never keeps a worker from the others (``HELIX["STEP_TIME_SLICE_SECONDS"]``; 0 runs one
    step per task).
    """
    return float(helix_setting("STEP_TIME_SLICE_SECONDS", 2.0))


def interrupt_poll_seconds() -> float:
    """Return how often a running step looks for an interrupt."""
    return float(helix_setting("INTERRUPT_POLL_SECONDS", 0.5))


def llm_max_retries() -> int:
    """Return how many times a retryable LLM error is retried before the run fails."""
    return int(helix_setting("LLM_MAX_RETRIES", 3))


def llm_retry_backoff_seconds() -> float:
    """Return the first retry's delay; each further retry doubles it."""
    return float(helix_setting("LLM_RETRY_BACKOFF_SECONDS", 1.0))


def step_error_retries() -> int:
    """Return how many times a step that raised is retried before its run fails."""
    return int(helix_setting("STEP_ERROR_RETRIES", 3))


def step_max_abandoned() -> int:
    """Return how many attempts in a row may leave a step unfinished before its run fails."""
    return int(helix_setting("STEP_MAX_ABANDONED", 5))


def stalled_run_seconds() -> float:
    """Return how long a running run may go without a lease or a commit before the recovery
    sweep enqueues its next step again (``HELIX["STALLED_RUN_SECONDS"]``)."""
    return float(helix_setting("STALLED_RUN_SECONDS", 120.0))


def run_max_recoveries() -> int:
    """Return how often in a row the sweep recovers a run stalled at one step before it fails
    the run instead (``HELIX["RUN_MAX_RECOVERIES"]``)."""
    return int(helix_setting("RUN_MAX_RECOVERIES", 3))


def step_error_backoff_seconds(errors: int) -> float:
    """Return the delay before retrying a step that raised `errors` times already."""
    return float(helix_setting("STEP_ERROR_BACKOFF_SECONDS", 1.0)) * 2**errors


def interrupt_observation_seconds() -> float:
    """Return how long `POST /api/chat/{id}/interrupt` waits for the run to stop."""
    return float(helix_setting("INTERRUPT_OBSERVATION_SECONDS", 5.0))


def max_agent_state_bytes() -> int:
    """Return the largest agent state a write may store, as compact JSON in UTF-8."""
    return int(helix_setting("MAX_AGENT_STATE_BYTES", 1024 * 1024))
