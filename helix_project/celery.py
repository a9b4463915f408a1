"""The Celery application; configuration comes from Django settings prefixed ``CELERY_``."""

import os

from celery import Celery
from celery.signals import task_prerun, worker_init, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "helix_project.settings")

app = Celery("helix")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
def _drop_broken_connections(**kwargs: object) -> None:
    """Before each task, close database connections that failed or outlived CONN_MAX_AGE.

    Celery closes every connection around each task unless ``CELERY_DB_REUSE_MAX`` is set;
    workers that set it (with ``CONN_MAX_AGE``) keep theirs, and this drops the unusable ones.
    """
    from django.db import close_old_connections

    close_old_connections()


@worker_init.connect
def _observe(**kwargs: object) -> None:
    """Trace (if `OTEL_EXPORTER_OTLP_ENDPOINT` is set) and serve this worker's metrics (on
    `HELIX_WORKER_METRICS_PORT`, if set; the threads pool's steps run in this process)."""
    from agents_app.observability import server, tracing

    tracing.configure()
    if port := os.environ.get("HELIX_WORKER_METRICS_PORT"):
        server.serve_metrics(os.environ.get("HELIX_WORKER_METRICS_HOST", "0.0.0.0"), int(port))


@worker_process_init.connect
def _trace_pool_process(**kwargs: object) -> None:
    """Trace in each process of a forking pool too: the SDK's exporter thread is not forked."""
    from agents_app.observability import tracing

    tracing.configure()
