"""The runtime's knobs in the ``HELIX`` setting, read when used (never at import).

Each has a default for a site that leaves it out; README "Add Helix to your Django project"
lists them.
"""

from django.conf import settings

from sessions_app.conf import helix_setting


def step_lease_seconds() -> float:
    """Return how long a step's lease lasts without renewal (``HELIX["STEP_LEASE_SECONDS"]``)."""
    return float(helix_setting("STEP_LEASE_SECONDS", 30.0))


def step_time_slice_seconds() -> float:
    """Return how long a task runs a run's steps one after another before it hands over.

    Past the slice, the task gives the run's next step to the broker and ends, so one long
    run never keeps a worker from the others (``HELIX["STEP_TIME_SLICE_SECONDS"]``; 0 runs one
    step per task), unless its worker has threads to spare (`agents_app.tasks`).
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


def worker_metrics_address() -> tuple[str, int] | None:
    """Return the address a Celery worker serves its metrics on, or None to serve none.

    ``HELIX["WORKER_METRICS_PORT"]`` (unset: none) on ``HELIX["WORKER_METRICS_HOST"]``
    (``0.0.0.0``).
    """
    port = helix_setting("WORKER_METRICS_PORT")
    if not port:
        return None
    return str(helix_setting("WORKER_METRICS_HOST", "0.0.0.0")), int(port)


def celery_app() -> str:
    """Return the Celery app of the site's workers, as `celery -A` takes it.

    ``HELIX["CELERY_APP"]``; by default the settings module's package (`mysite` for
    `mysite.settings`), where Celery's guide to Django puts `celery.py`.
    """
    return helix_setting("CELERY_APP") or _settings_package()


def asgi_application() -> str:
    """Return the site's ASGI application as Daphne takes it (`mysite.asgi:application`).

    Django's ``ASGI_APPLICATION``, else `application` in the settings package's `asgi` module.
    """
    path = getattr(settings, "ASGI_APPLICATION", None) or f"{_settings_package()}.asgi.application"
    module, _, name = path.rpartition(".")
    return f"{module}:{name}"


def _settings_package() -> str:
    return (settings.SETTINGS_MODULE or "").rpartition(".")[0]
