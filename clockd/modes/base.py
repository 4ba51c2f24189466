"""What every mode loop shares: a tick on an interval that survives store outages."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable

from clockd.errors import FencedOut, StoreError
from clockd.obs import metrics
from clockd.obs.health import STORE_WRITES

log = logging.getLogger(__name__)

TickFn = Callable[[], Awaitable[bool]]


async def wait_or_stop(stopping: asyncio.Event, seconds: float) -> bool:
    """Sleep up to ``seconds``; True if ``stopping`` was set meanwhile."""
    if stopping.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=max(0.0, seconds))
    return stopping.is_set()


async def fault_hold_while(path: str | None, what: str, **extra: object) -> None:
    """Fault injection for the failure drills only (``CLOCKD_FAULT_HOLD_WHILE``, read by
    clockd.wiring.Faults; None in production): wait for as long as ``path`` exists, as a
    pause of the drill's choosing between a lease check and the write it guards."""
    if not _exists(path):
        return
    log.warning(
        "fault injection: holding %s while %s exists",
        what,
        path,
        extra={"action": "fault_hold", **extra},
    )
    while _exists(path):  # noqa: ASYNC110  # polls a file the drill removes
        await asyncio.sleep(0.05)


def _exists(path: str | None) -> bool:
    """For the drills' hold fault only (a stat of a local file, never in production)."""
    return path is not None and os.path.exists(path)


class Backoff:
    """Exponential backoff for a failing dependency, reset on success."""

    def __init__(self, first: float = 0.2, cap: float = 10.0) -> None:
        self.first, self.cap, self.current = first, cap, 0.0

    def failed(self) -> float:
        self.current = self.first if self.current == 0 else min(self.cap, self.current * 2)
        return self.current

    def ok(self) -> None:
        self.current = 0.0


async def run_ticks(
    name: str,
    tick: TickFn,
    interval: float,
    stopping: asyncio.Event,
) -> None:
    """Call ``tick()`` until ``stopping``. A tick returns True when it did a full batch
    (more work may be waiting, so tick again at once). Store errors are logged once per
    outage and retried with backoff: a dead database stalls a mode, never kills it."""
    backoff = Backoff()
    failing = False
    while not stopping.is_set():
        try:
            busy = await tick()
        except FencedOut as exc:
            log.warning("%s: %s", name, exc.message, extra={"action": "fenced_out", "mode": name})
            busy = False
        except StoreError as exc:
            metrics.store_errors.labels(mode=name).inc()
            STORE_WRITES.failed(name, exc.message)
            delay = backoff.failed()
            if not failing:
                log.error(
                    "%s: store error, retrying: %s",
                    name,
                    exc.message,
                    extra={"action": "store_unavailable", "mode": name},
                )
            failing = True
            if await wait_or_stop(stopping, delay):
                return
            continue
        if failing:
            log.info("%s: store reachable again", name, extra={"action": "store_reachable", "mode": name})
            failing = False
            STORE_WRITES.ok(name)
        backoff.ok()
        if busy:
            await asyncio.sleep(0)
            continue
        if await wait_or_stop(stopping, interval):
            return
