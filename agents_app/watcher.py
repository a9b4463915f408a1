"""The watch kept over running steps: it renews their leases and looks for their interrupts.

One thread per process watches every step running in it. A step's first look comes
`INTERRUPT_POLL_SECONDS` after it starts, so a short step costs the watch nothing; from then on
its interrupt flag is read every `INTERRUPT_POLL_SECONDS`, so an interrupt stops a streaming
model within about that long, and its lease is renewed every third of its time to live, so a
live worker keeps it and a paused one loses it.
"""

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from types import TracebackType

from django.db import connections

from sessions_app.stores import get_session_store

logger = logging.getLogger(__name__)


class StepWatch:
    """What the watch knows of one step; a context manager that watches it while it runs."""

    def __init__(
        self,
        *,
        session_id: str,
        holder: str,
        lease_seconds: float,
        poll_seconds: float,
        on_stop: Callable[[], None],
    ) -> None:
        self.session_id = session_id
        self.holder = holder
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.on_stop = on_stop
        self.interrupted = False
        self.lease_lost = False
        self.done = False
        self.renewed_at = time.monotonic()

    def __enter__(self) -> "StepWatch":
        _watcher().add(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.done = True  # The watcher drops it at its next look.

    @property
    def stopped(self) -> bool:
        """Return whether the step must stop: interrupted, or its lease lost."""
        return self.interrupted or self.lease_lost

    def look(self) -> None:
        """Renew the lease when due and look for an interrupt; stop the step if it must."""
        store = get_session_store()
        if time.monotonic() - self.renewed_at >= self.lease_seconds / 3:
            self.renewed_at = time.monotonic()
            if not store.renew_lease(self.session_id, self.holder, self.lease_seconds):
                self.lease_lost = True
        if store.check_interrupt_flag(self.session_id) is not None:
            self.interrupted = True
        if self.stopped:
            self.on_stop()


class _Watcher:
    """A thread that looks at each watched step when it is due."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, StepWatch]] = []
        self._order = itertools.count()  # Breaks ties between steps due at the same moment.
        self._wake = threading.Condition()
        threading.Thread(target=self._run, name="helix-step-watch", daemon=True).start()

    def add(self, watch: StepWatch) -> None:
        with self._wake:
            self._schedule(watch)
            self._wake.notify()

    def _schedule(self, watch: StepWatch) -> None:
        due = time.monotonic() + watch.poll_seconds
        heapq.heappush(self._due, (due, next(self._order), watch))

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wake.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, watch = heapq.heappop(self._due)
            if not watch.done:
                self._look(watch)
            with self._wake:
                if not (watch.done or watch.stopped):
                    self._schedule(watch)
                idle = not self._due
            if idle:
                connections.close_all()  # This thread's own connection, until it is needed again.

    @staticmethod
    def _look(watch: StepWatch) -> None:
        try:
            watch.look()
        except Exception:  # The database may be away; the next look tries again.
            logger.warning("Could not watch the step of %s", watch.session_id, exc_info=True)
            connections.close_all()


_watchers: dict[int, _Watcher] = {}
_watchers_lock = threading.Lock()


def _watcher() -> _Watcher:
    """Return this process's watcher; a forked worker child starts its own."""
    with _watchers_lock:
        pid = os.getpid()
        if pid not in _watchers:
            _watchers.clear()
            _watchers[pid] = _Watcher()
        return _watchers[pid]
