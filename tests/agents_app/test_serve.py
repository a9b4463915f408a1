"""`manage.py serve` runs the embedded system: Daphne with static files, a Celery worker, and
Celery beat running the expired-session sweep."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Celery 5.7 has no `celery.ping` task; `celery.accumulate` is a built-in that returns its args.
SEND_PING = (
    "from helix_project.celery import app; "
    "print(app.send_task('celery.accumulate', args=['ping']).id)"
)

# Start the demo research agent as a new user would, and wait for its run to end.
RUN_DEMO = """
import time
from django.contrib.auth import get_user_model
from agents_app.runs.services import agent_start
from sessions_app.stores import get_session_store
user = get_user_model().objects.create_user("demo")
started = agent_start(user=user, agent_type="researcher", message="What is celery?")
for _ in range(300):
    state = get_session_store().load_state(started.session_id)
    if state.status != "active":
        break
    time.sleep(0.1)
print(state.status, state.output["sources"])
"""


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


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run a manage.py command to completion and return its result."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
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


@pytest.mark.one_backend("sqlite", reason="serve runs the embedded default whatever the run's")
def test_serve_runs_site_worker_and_beat_and_stops_on_sigint(serve: Serve) -> None:
    login = f"{serve.site}/admin/login/"
    serve.wait_for(lambda: http_status(login) == 200, 60, "the login page answered 200")
    assert http_status(f"{serve.site}/static/admin/css/base.css") == 200
    serve.wait_for(lambda: " ready." in serve.output(), 60, "the Celery worker was ready")

    sent = manage("shell", "-v", "0", "-c", SEND_PING, env=serve.env)
    assert sent.returncode == 0, sent.stdout + sent.stderr
    task_id = sent.stdout.split()[-1]
    serve.wait_for(
        lambda: f"Task celery.accumulate[{task_id}] succeeded" in serve.output(),
        30,
        "the worker ran the task sent through the filesystem broker",
    )

    demo = manage("shell", "-v", "0", "-c", RUN_DEMO, env=serve.env)
    assert demo.stdout.split() == ["completed", "['celery']"], demo.stdout + demo.stderr

    serve.wait_for(
        lambda: re.search(
            r"Task agents_app.tasks.cleanup_expired_sessions_task\[\S+\] succeeded", serve.output()
        ),
        30,
        "beat had the worker run the expired-session sweep",
    )

    children = serve.child_pids()
    assert len(children) == 3
    serve.process.send_signal(signal.SIGINT)
    assert serve.process.wait(timeout=15) == 0
    assert [pgid for pgid in children if group_alive(pgid)] == []
