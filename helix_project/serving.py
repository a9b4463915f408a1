"""Daphne as an installed app, without its server loaded in every process.

Listed in `INSTALLED_APPS` for Daphne's `runserver`, which serves HTTP, WebSocket and SSE in
development. Daphne's own app config imports its server (Twisted, autobahn) as Django sets up:
about a third of a second of CPU in every worker, command and test process, none of which
serves. Its `runserver` imports the server itself, as it starts; so do `daphne` and `serve`.
"""

from django.apps import AppConfig


class DaphneConfig(AppConfig):
    """Daphne's app, for its `runserver` command; listed before `django.contrib.staticfiles`,
    whose `runserver` it overrides."""

    name = "daphne"
    verbose_name = "Daphne"
