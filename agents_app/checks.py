"""System checks: what Helix needs from a project's settings beyond its own defaults."""

from typing import Any

from django.apps import apps
from django.apps.config import AppConfig
from django.conf import settings
from django.core import checks

REQUIRED_APPS = ("rest_framework", "rest_framework.authtoken", "sessions_app", "streams_app")


def check_site(app_configs: list[AppConfig] | None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Return an error for each app Helix needs that is not installed, and for a missing
    default channel layer (stream notices and live state travel on it)."""
    errors: list[checks.CheckMessage] = [
        checks.Error(
            f"Helix needs {name!r} in INSTALLED_APPS.",
            hint='README "Add Helix to your Django project" lists the apps.',
            id="helix.E001",
        )
        for name in REQUIRED_APPS
        if not apps.is_installed(name)
    ]
    if "default" not in getattr(settings, "CHANNEL_LAYERS", {}):
        errors.append(
            checks.Error(
                "Helix needs a default channel layer in CHANNEL_LAYERS.",
                hint="channels.layers.InMemoryChannelLayer for a first try on one machine; "
                "channels_redis in production.",
                id="helix.E002",
            )
        )
    return errors
