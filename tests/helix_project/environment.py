"""manage.py as a subprocess: in a given environment, or on only the Helix variables a test
gives, not on the run's own."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.live import ROOT

# For a test whose manage.py runs only on the variables it gives (`run_manage`): the run's database
# and services are not its, so either backend's pass tests the same thing, and one does.
ENVIRONMENT_ONLY = pytest.mark.one_backend(
    "sqlite", reason="its manage.py runs on the variables it gives, not on the run's database"
)


def manage(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a manage.py command in `env` to completion and return its result."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_manage(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """Run manage.py with only the given Helix variables set (and a private var dir)."""
    clean = {k: v for k, v in os.environ.items() if not _is_setting(k)}
    clean.update(HELIX_VAR_DIR=str(tmp_path), **env)
    return manage(*args, env=clean, timeout=60)


def run_shell(script: str, *, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """Run a Python script in manage.py shell on a development run with the given variables."""
    return run_manage("shell", "-v", "0", "-c", script, tmp_path=tmp_path, DEBUG="true", **env)


def _is_setting(name: str) -> bool:
    return name in {"DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL"} or (
        name.startswith(("SECURE_", "CELERY_", "HELIX_"))
    )
