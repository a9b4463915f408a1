"""The Celery application; configuration comes from Django settings prefixed ``CELERY_``.

`autodiscover_tasks` finds Helix's tasks in `agents_app.tasks`, with the worker signal handlers
they need, as it would in any project.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "helix_project.settings")

app = Celery("helix")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
