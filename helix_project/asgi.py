"""ASGI entry point: Helix's application (`agents_app.asgi`) around Django's, as any project
that adds Helix has it."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "helix_project.settings")
application = get_asgi_application()

from agents_app.asgi import helix_application  # noqa: E402  (needs the app registry)

application = helix_application(application)
