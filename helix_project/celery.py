"""The Celery application; configuration comes from Django settings prefixed ``CELERY_``."""

import os

from celery import Celery
from celery.signals import task_prerun

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
