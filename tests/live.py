"""Helpers for tests that run Helix's processes (Daphne, Celery workers) as subprocesses."""

import os
import socket
from pathlib import Path

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """Return a TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def database_url() -> str:
    """Return a DATABASE_URL for this run's test database."""
    database = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{database['NAME']}"
    credentials = database["USER"] + (f":{database['PASSWORD']}" if database["PASSWORD"] else "")
    return f"postgres://{credentials}@{database['HOST']}:{database['PORT']}/{database['NAME']}"


def live_env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    """Return the environment of a Helix process serving this run's test database."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DEBUG": "true",
        "HELIX_VAR_DIR": str(tmp_path / "var"),
        "PYTHONUNBUFFERED": "1",
        **overrides,
    }
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    return env
