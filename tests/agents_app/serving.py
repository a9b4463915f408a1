"""`manage.py serve` as a subprocess on the embedded default, for the suites that start it."""

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helix_project.environment import manage
from tests.live import ROOT, free_port


def embedded_env(var_dir: Path) -> dict[str, str]:
    """Return this environment switched to the embedded default under `var_dir`."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}
    }
    return {
        **env,
        "HELIX_VAR_DIR": str(var_dir),
        "DEBUG": "true",
        "PYTHONUNBUFFERED": "1",
        "HELIX_CLEANUP_INTERVAL_SECONDS": "1",
    }


def http_status(url: str) -> int | None:
    """Return the status code of GET `url`, or `None` if nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def group_alive(pgid: int) -> bool:
    """Return whether any process is left in process group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class Serve:
    """A running `manage.py serve` whose output goes to a log file."""

    def __init__(self, env: dict[str, str], port: int, log: Path) -> None:
        self.env = env
        self.site = f"http://127.0.0.1:{port}"
        self.log = log
        with log.open("wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "serve", "--port", str(port)],
                cwd=ROOT,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                process_group=0,
            )

    def output(self) -> str:
        """Return everything serve and its children have written so far."""
        return self.log.read_text(errors="replace")

    def child_pids(self) -> list[int]:
        """Return the pids serve reports for its children, each leading its process group."""
        return [int(pid) for pid in re.findall(r"\bpid (\d+)", self.output())]

    def wait_for(self, condition: Callable[[], object], timeout: float, what: str) -> None:
        """Poll `condition` until it is true; fail if serve exits or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                pytest.fail(f"serve exited with {self.process.returncode} before {what}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:g} s waiting until {what}")
            time.sleep(0.1)

    def kill(self) -> None:
        """Kill serve and its children with everything they started."""
        for pgid in [self.process.pid, *self.child_pids()]:
            if group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
        self.process.wait()


@contextmanager
def serving(tmp_path: Path) -> Iterator[Serve]:
    """Migrate a fresh var dir, start serve on it and kill what is left of it afterwards."""
    env = embedded_env(tmp_path / "var")
    migrated = manage("migrate", "--noinput", env=env)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    server = Serve(env, free_port(), tmp_path / "serve.log")
    try:
        yield server
    finally:
        server.kill()
        print(f"--- output of manage.py serve ---\n{server.output()}")
