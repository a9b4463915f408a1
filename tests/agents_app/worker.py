"""A real Celery worker as a subprocess, on this run's test database and broker.

With Redis in the run, the broker is Redis; without, kombu's filesystem broker in this run's
var directory. Either way the worker consumes a queue of its own, so runs never share tasks.
"""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from helix_project.celery import app
from tests.live import ROOT, live_env

READY_TIMEOUT = 60.0


class Worker:
    """A Celery worker process group that can be killed, paused and started again."""

    def __init__(
        self,
        tmp_path: Path,
        concurrency: int = 8,
        pool: str = "threads",
        beat: bool = False,
        **env: str,
    ) -> None:
        self.queue = f"test-{uuid.uuid4().hex[:12]}"
        self.log = tmp_path / f"worker-{self.queue}.log"
        self.concurrency = concurrency
        self.pool = pool
        # With `beat`, the worker also runs the beat schedule (the recovery sweep among it).
        self.beat = ["--beat", "--schedule", str(tmp_path / f"beat-{self.queue}")] if beat else []
        self.env = live_env(
            tmp_path,
            # The filesystem broker lives in the var directory: share this process's.
            HELIX_VAR_DIR=str(settings.VAR_DIR),
            CELERY_TASK_DEFAULT_QUEUE=self.queue,
            **{"HELIX_AGENTS": "agents_app.demo,tests.agents_app.agents", **env},
        )
        self.process: subprocess.Popen | None = None
        self._previous_queue = app.conf.task_default_queue

    def start(self) -> "Worker":
        """Start the worker and return once it consumes its queue."""
        app.conf.task_default_queue = self.queue  # Where this process sends tasks.
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "helix_project", "worker",
                 "--pool", self.pool, "--concurrency", str(self.concurrency), "--loglevel", "INFO",
                 "--without-mingle", "--without-gossip", "--hostname", f"{self.queue}@%h",
                 *self.beat],
                cwd=ROOT, env=self.env, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,  # Its own process group: kill reaches the pool too.
            )  # fmt: skip
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"The Celery worker exited:\n{self.read_log()}")
            if " ready." in self.read_log(offset):
                return self
            time.sleep(0.1)
        pytest.fail(f"The Celery worker was not ready within {READY_TIMEOUT:.0f} s")

    def read_log(self, offset: int = 0) -> str:
        """Return the worker's log from `offset` bytes on."""
        with self.log.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def kill(self) -> None:
        """Kill the worker and its pool at once, as a crash would."""
        self._signal(signal.SIGKILL)
        self.process.wait()

    def pause(self) -> None:
        """Freeze the worker and its pool, as an overloaded host might."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused worker go on."""
        self._signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the worker gracefully, or kill it if it does not stop."""
        app.conf.task_default_queue = self._previous_queue
        if self.process is None or self.process.poll() is not None:
            return
        self.resume()
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)


class Supervisor:
    """Workers on one queue, each started again whenever it dies, as systemd or Kubernetes would.

    A worker runs many steps in threads, so a crash takes all of them down at once; the
    supervisor's restart and the broker's redelivery are what bring them back.
    """

    def __init__(self, tmp_path: Path, count: int, **options) -> None:
        """Start `count` workers; the first also runs the beat schedule, as one beat would."""
        self.workers = [Worker(tmp_path, beat=n == 0, **options) for n in range(count)]
        for worker in self.workers[1:]:  # One queue: they share the work, as in production.
            worker.queue = self.workers[0].queue
            worker.env["CELERY_TASK_DEFAULT_QUEUE"] = worker.queue
        self.restarts = 0
        self._stopping = threading.Event()
        self._watching = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "Supervisor":
        for worker in self.workers:
            worker.start()
        self._watching.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stopping.set()
        self._watching.join()
        for worker in self.workers:
            worker.stop()

    def read_logs(self) -> str:
        """Return what every worker logged."""
        return "".join(worker.read_log() for worker in self.workers)

    def _watch(self) -> None:
        while not self._stopping.wait(0.05):
            for worker in self.workers:
                if worker.process.poll() is not None and not self._stopping.is_set():
                    self.restarts += 1
                    worker.start()
