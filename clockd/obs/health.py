"""Whether this process's store writes are failing (disk full, database down), for
``/healthz`` and for the leader's reaper.

A store that answers reads but refuses every write (``ENOSPC``) is *degraded*, not
healthy: ``/healthz`` says so (503, ``store_writable: false`` with the last error).
While writes fail, a worker cannot extend its leases nor record the outcomes it
holds; the leader's reaper therefore returns no expired lease until the store has
written nothing wrong for one visibility timeout (:meth:`StoreWrites.settled`), which
gives the worker's heartbeat time to extend the leases and its flush to record what
really happened — instead of a run that succeeded being recorded DEAD ("lease expired").

One tracker per process (``STORE_WRITES``): every mode reports into it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class StoreWrites:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._failing: dict[str, str] = {}  # mode -> last error message
        self._last_failure: float | None = None

    def failed(self, mode: str, message: str) -> None:
        with self._lock:
            self._failing[mode] = message
            self._last_failure = self._monotonic()

    def ok(self, mode: str) -> None:
        with self._lock:
            self._failing.pop(mode, None)

    def failing(self) -> str | None:
        """The last error of a mode whose store calls fail now, or None."""
        with self._lock:
            return next(iter(self._failing.values()), None)

    def settled(self, hold: float) -> bool:
        """No failure now, and none for ``hold`` seconds."""
        with self._lock:
            if self._failing:
                return False
            return self._last_failure is None or self._monotonic() - self._last_failure >= hold


STORE_WRITES = StoreWrites()
