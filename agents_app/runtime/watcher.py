"""The watch kept over running steps: it renews their leases and looks for their interrupts.

One thread per process watches every step running in it, all at once: each look reads the
interrupt flags of every step due for one in one query, and renews every lease due for renewal
in one statement, so a worker running hundreds of steps costs the database two statements per
look, not two per step. The thread looks when the first step is due, a poll
(`INTERRUPT_POLL_SECONDS`) after its last look, and takes with it every step at least half a
poll past its own: steps that start at scattered times fall in step, so a worker with hundreds
of steps in flight looks a few times per poll, not once per step. A step's first look comes at
least half a poll after it starts, so a short step costs the watch nothing; from then on its
flag is read at least every poll, so an interrupt stops a streaming model within about that
long, and its lease is renewed every third of its time to live, so a live worker keeps it and
a paused one loses it.
"""

import logging
import os
import threading
import time
from collections.abc import Callable
from types import TracebackType

from django.db import connections

from sessions_app.connections import release_connection
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
        self.renewed_at = self.looked_at = time.monotonic()

    def __enter__(self) -> "StepWatch":
        _watcher().add(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _watcher().remove(self)

    @property
    def stopped(self) -> bool:
        """Return whether the step must stop: interrupted, or its lease lost."""
        return self.interrupted or self.lease_lost

    def ready_for_look(self, now: float) -> bool:
        """Return whether a look now may take this step: half a poll or more since its last."""
        return now - self.looked_at >= self.poll_seconds / 2

    def due_for_renewal(self, now: float) -> bool:
        return now - self.renewed_at >= self.lease_seconds / 3


class _Watcher:
    """A thread that looks at the watched steps that are due, together."""

    def __init__(self) -> None:
        self._watches: dict[int, StepWatch] = {}
        self._wake = threading.Condition()  # Guards the two below.
        # When the thread looks next, or `None` while it waits for a watch.
        self._next_look: float | None = None
        threading.Thread(target=self._run, name="helix-step-watch", daemon=True).start()

    def add(self, watch: StepWatch) -> None:
        """Watch a step; wake the thread only if the step is due before it looks next.

        A busy worker starts steps all the time, each due a poll later than those before it:
        they wait for the look the thread has planned, rather than wake it to plan again.
        """
        with self._wake:
            self._watches[id(watch)] = watch
            due = watch.looked_at + watch.poll_seconds
            if self._next_look is None or due < self._next_look:
                self._wake.notify()

    def remove(self, watch: StepWatch) -> None:
        with self._wake:
            self._watches.pop(id(watch), None)

    def _run(self) -> None:
        while True:
            with self._wake:
                watches = [w for w in self._watches.values() if not w.stopped]
                if not watches:
                    self._next_look = None
                    self._wake.wait()
                    continue
                self._next_look = min(w.looked_at + w.poll_seconds for w in watches)
                pause = self._next_look - time.monotonic()
                if pause > 0:
                    self._wake.wait(pause)
                    continue
            now = time.monotonic()
            due = [w for w in watches if w.ready_for_look(now)]
            try:
                self._look(due, now)
            except Exception:  # The database may be away; the next look tries again.
                logger.warning("Could not watch %d running steps", len(due), exc_info=True)
                connections.close_all()
            finally:
                release_connection()

    def _look(self, due: list[StepWatch], now: float) -> None:
        """Renew the due leases, read the due flags, and stop the steps that must stop."""
        store = get_session_store()
        for watch in due:
            watch.looked_at = now
        renewing: dict[float, list[StepWatch]] = {}
        for watch in due:
            if watch.due_for_renewal(now):
                renewing.setdefault(watch.lease_seconds, []).append(watch)
        for lease_seconds, watches in renewing.items():
            held = store.renew_leases({w.session_id: w.holder for w in watches}, lease_seconds)
            for watch in watches:
                watch.renewed_at = now
                watch.lease_lost = watch.session_id not in held
        flags = store.check_interrupt_flags([w.session_id for w in due])
        for watch in due:
            watch.interrupted = watch.session_id in flags
            if watch.stopped:
                watch.on_stop()


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
