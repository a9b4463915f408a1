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
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from agents_app import broker
from helix_project.celery import app
from tests.live import ROOT, live_env

READY_TIMEOUT = 60.0
LOG_TAIL = 20_000  # Characters of a worker's log a failure shows.


@contextlib.contextmanager
def sending_to(broker_url: str):
    """Send this process's tasks to the broker at `broker_url` for a while, set as settings
    would set it (`agents_app.broker`); give workers the same URL in `CELERY_BROKER_URL`."""
    conf = {
        "broker_url": broker_url,
        "broker_transport": None,  # Chosen by the URL's scheme, unless the settings choose.
        **broker.celery_settings(broker_url, visibility_timeout=2, var_dir=settings.VAR_DIR),
    }
    previous = {name: app.conf[name] for name in conf}

    def configure(values: dict) -> None:
        app.conf.update(values)
        # Celery caches the connection and producer pools and the queues they declare;
        # dropped, they are built again from the configuration on the next send.
        app.__dict__.pop("amqp", None)
        app._pool = None

    configure(conf)
    try:
        yield
    finally:
        configure(previous)


class Worker:
    """A Celery worker process group that can be killed, paused and started again."""

    def __init__(
        self,
        tmp_path: Path,
        concurrency: int = 8,
        pool: str = "threads",
        **env: str,
    ) -> None:
        self.queue = f"test-{uuid.uuid4().hex[:12]}"
        self.name = uuid.uuid4().hex[:8]  # Workers sharing a queue still need names of their own.
        self.log = tmp_path / f"worker-{self.queue}.log"
        self.concurrency = concurrency
        self.pool = pool
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
        offset = self.log_end()
        self.spawn()
        self.wait_ready(offset)
        return self

    def log_end(self) -> int:
        """Return where the worker's log ends now, for `wait_ready` to read on from."""
        return self.log.stat().st_size if self.log.exists() else 0

    def wait_ready(self, offset: int) -> None:
        """Return once the worker, spawned, logged after `offset` that it consumes its queue."""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"The Celery worker exited:\n{self.read_log()}")
            if " ready." in self.read_log(offset):
                return
            time.sleep(0.1)
        pytest.fail(f"The Celery worker was not ready within {READY_TIMEOUT:.0f} s")

    def spawn(self) -> None:
        """Start the worker's process, without waiting for it."""
        app.conf.task_default_queue = self.queue  # Where this process sends tasks.
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "helix_project", "worker",
                 "--pool", self.pool, "--concurrency", str(self.concurrency), "--loglevel", "INFO",
                 "--without-mingle", "--without-gossip",
                 "--hostname", f"{self.queue}-{self.name}@%h"],
                cwd=ROOT, env=self.env, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,  # Its own process group: kill reaches the pool too.
            )  # fmt: skip

    def read_log(self, offset: int = 0) -> str:
        """Return the worker's log from `offset` bytes on."""
        with self.log.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    @contextlib.contextmanager
    def log_shown_on_failure(self):
        """Add the end of the worker's log to a failure raised inside the block: CI keeps no
        temporary files, and what the worker did is what explains a run that never settled."""
        try:
            yield
        except (AssertionError, pytest.fail.Exception) as failure:
            pytest.fail(f"{failure}\nThe worker's log ends:\n{self.read_log()[-LOG_TAIL:]}")

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
        self.ask_to_stop()
        self.wait_stopped()

    def ask_to_stop(self) -> None:
        """Ask the worker to stop gracefully (a warm shutdown), without waiting for it."""
        app.conf.task_default_queue = self._previous_queue
        if self.process is None or self.process.poll() is not None:
            return
        self.resume()
        self._signal(signal.SIGTERM)

    def wait_stopped(self) -> None:
        """Wait for the worker asked to stop; kill it if it has not stopped within 20 s."""
        if self.process is None:
            return
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)


@contextlib.contextmanager
def module_worker(django_db_blocker, tmp_path_factory, **env: str) -> Iterator[Worker]:
    """Start a worker for a module's tests (the database unblocked while it starts), with `env`
    over the defaults; stop it when the block exits."""
    with django_db_blocker.unblock():
        running = Worker(tmp_path_factory.mktemp("worker"), **env).start()
    try:
        yield running
    finally:
        running.stop()


class Supervisor:
    """Workers on one queue, each started again whenever it dies, as systemd or Kubernetes would.

    A worker runs many steps in threads, so a crash takes all of them down at once; the
    supervisor's restart and the broker's redelivery are what bring them back.
    """

    def __init__(self, tmp_path: Path, count: int, **options) -> None:
        """Prepare `count` workers on one queue and one beat, as production runs them."""
        self.workers = [Worker(tmp_path, **options) for _ in range(count)]
        for worker in self.workers[1:]:  # One queue: they share the work, as in production.
            worker.queue = self.workers[0].queue
            worker.env["CELERY_TASK_DEFAULT_QUEUE"] = worker.queue
        self.beat = Beat(tmp_path, self.workers[0].env)
        self.restarts = 0
        self._stopping = threading.Event()
        self._watching = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "Supervisor":
        """Start the workers and the beat together; return once every worker is ready."""
        try:
            offsets = [worker.log_end() for worker in self.workers]
            for worker in self.workers:
                worker.spawn()
            self.beat.start()
            for worker, offset in zip(self.workers, offsets, strict=True):
                worker.wait_ready(offset)
        except BaseException:
            self._stop_all()
            raise
        self._watching.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stopping.set()
        self._watching.join()
        self._stop_all()

    def _stop_all(self) -> None:
        """Ask the beat and every worker to stop, then wait for them all."""
        self.beat.ask_to_stop()
        for worker in self.workers:
            worker.ask_to_stop()
        self.beat.wait_stopped()
        for worker in self.workers:
            worker.wait_stopped()

    def read_logs(self) -> str:
        """Return what every worker logged."""
        return "".join(worker.read_log() for worker in self.workers)

    def _watch(self) -> None:
        """Start again every worker that died, without waiting for it: one that dies again
        before it says it is ready (a redelivered step that kills it at once) is started again
        on the next look, as a service manager would."""
        while not self._stopping.wait(0.05):
            for worker in self.workers:
                if worker.process.poll() is not None and not self._stopping.is_set():
                    self.restarts += 1
                    worker.spawn()


class Beat:
    """Celery beat, a process of its own as in production: it sends the schedule's tasks (the
    recovery sweep among them) to the queue its environment names."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        name = uuid.uuid4().hex[:8]
        self.schedule, self.log = tmp_path / f"beat-{name}", tmp_path / f"beat-{name}.log"
        self.env = env
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "helix_project", "beat",
                 "--schedule", str(self.schedule), "--loglevel", "INFO"],
                cwd=ROOT, env=self.env, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def ask_to_stop(self) -> None:
        """Ask the beat to stop (SIGTERM), without waiting for it."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)

    def wait_stopped(self) -> None:
        """Wait for the beat asked to stop; kill it if it has not stopped within 10 s."""
        if self.process is None:
            return
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
