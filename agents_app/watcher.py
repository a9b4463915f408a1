"""The watch a step keeps while it runs: it renews the step's lease and looks for interrupts.

A thread beside the step renews the lease every third of its time to live, so a live worker
keeps it and a paused one loses it, and looks at the durable interrupt flag every
`INTERRUPT_POLL_SECONDS`, so an interrupt stops a streaming model within about that long.
"""

import logging
import threading
from collections.abc import Callable
from types import TracebackType

from django.db import connections

from sessions_app.stores import get_session_store

logger = logging.getLogger(__name__)


class StepWatch:
    """Renew a lease and watch for interrupts in a thread, until the block exits."""

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
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="helix-step-watch", daemon=True)

    def __enter__(self) -> "StepWatch":
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._done.set()
        self._thread.join()

    @property
    def stopped(self) -> bool:
        """Return whether the step must stop: interrupted, or its lease lost."""
        return self.interrupted or self.lease_lost

    def _run(self) -> None:
        store = get_session_store()
        renew_every = self.lease_seconds / 3
        since_renewal = 0.0
        try:
            while not self._done.wait(self.poll_seconds):
                since_renewal += self.poll_seconds
                if since_renewal >= renew_every:
                    since_renewal = 0.0
                    if not store.renew_lease(self.session_id, self.holder, self.lease_seconds):
                        self.lease_lost = True
                if store.check_interrupt_flag(self.session_id) is not None:
                    self.interrupted = True
                if self.stopped:
                    self.on_stop()
                    return
        finally:
            connections.close_all()  # This thread's own connection.
