"""The namespaced ``HELIX`` setting and the backends it names.

``HELIX`` maps a backend name to ``{"BACKEND": dotted path, "OPTIONS": {...}}``, as Django's
``STORAGES`` does. Backends are built on first use and rebuilt after the setting changes (tests
override it with ``override_settings``).
"""

import functools
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string


def helix_setting(name: str, default: Any = None) -> Any:
    """Return ``HELIX[name]``, or `default` when the setting does not name it."""
    return getattr(settings, "HELIX", {}).get(name, default)


@functools.cache
def load_backend(name: str, default_backend: str) -> Any:
    """Return the backend ``HELIX[name]`` configures, built once per configuration."""
    config = helix_setting(name, {"BACKEND": default_backend})
    backend_class = import_string(config["BACKEND"])
    return backend_class(**config.get("OPTIONS", {}))


@receiver(setting_changed)
def _reset_backends(*, setting: str, **kwargs: Any) -> None:
    if setting == "HELIX":
        load_backend.cache_clear()
