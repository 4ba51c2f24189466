"""Clock watch: measures this process's offset from the database server's clock.

A leader or materializer decides what is due by its own wall clock; if that
clock is off by more than ``max_skew`` it would fire early or late without
anyone noticing (clock failure is silent). So the offset is measured every
``interval`` (midpoint of the round trip, so network latency cancels out),
exported as ``clockd_clock_offset_seconds``, published with every measurement
(``on_measure``: the coordinator's member record, so ``clockctl status`` and the
dashboard show every node's offset), and while it exceeds
``max_skew`` the leader and materializer step down — they check ``ok`` before
each tick — and say why in the log (``reason`` holds the why for status);
a worker does not claim meanwhile (a claim takes what is due by its clock).

Between two measurements a wall clock can jump (a VM resumed, ``date -s``, an
NTP step): ``ok`` also compares how far the wall clock moved against the
monotonic clock since the last measurement, so a jump is caught on the very next
check — before a materializer plans with it — not up to ``interval`` later; the
watch then re-measures at once. Standing by, the same check sees a clock put
right (estimate back within ``max_skew``) and re-measures at once too, so the
node resumes within a tick of the fix. Slow drift is caught by the measurements.

Invariant: ``ok`` is False until a first measurement succeeded (a process that
starts with a wrong clock must not act on its first tick), and whenever the
offset estimated from the last measurement plus the wall-minus-monotonic change
since exceeds ``max_skew``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import timedelta

from clockd.coord import ClockReading
from clockd.core.clock import Clock
from clockd.errors import StoreError
from clockd.obs import metrics
from clockd.store import Store

log = logging.getLogger(__name__)


class ClockWatch:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        max_skew: timedelta = timedelta(seconds=2),
        interval: float = 10.0,
        on_change: Callable[[str | None], None] | None = None,
        on_measure: Callable[[ClockReading], None] | None = None,
    ) -> None:
        """``on_change(reason)`` is called when the node steps down, ``on_change(None)``
        when it resumes (the supervisor hands it ``Coordinator.stand_by``);
        ``on_measure(reading)`` after every measurement (``Coordinator.publish_clock``)."""
        self.store, self.clock = store, clock
        self.on_change, self.on_measure = on_change, on_measure
        self.max_skew = max_skew.total_seconds()
        self.interval = interval
        self.offset: float | None = None
        self.reason: str | None = None  # why leader/materializer stepped down, while they are down
        self._healthy = True
        self._base: float | None = None  # wall minus monotonic at the last measurement
        self._recheck_for: float | None = None  # the _base a re-measure was asked for, standing by
        self._remeasure = asyncio.Event()

    def _wall_minus_mono(self) -> float:
        return self.clock.now().timestamp() - self.clock.monotonic()

    @property
    def ok(self) -> bool:
        if self.offset is None or self._base is None:
            return False  # not measured yet
        if not self._healthy:
            # Standing by: once the wall clock looks right again (NTP stepped it back),
            # re-measure now, not up to ``interval`` later, so the node resumes within a
            # tick as it stepped down within one. Only a measurement resumes it; asked
            # once per measurement.
            estimate = self.offset + self._wall_minus_mono() - self._base
            if self._recheck_for != self._base and abs(estimate) <= self.max_skew:
                self._recheck_for = self._base
                self._remeasure.set()
            return False
        moved = self._wall_minus_mono() - self._base
        estimate = self.offset + moved
        if abs(estimate) > self.max_skew:
            self._step_down(estimate, f"the wall clock jumped {moved:+.3f}s since the last check")
            self._remeasure.set()
            return False
        return True

    def _step_down(self, offset: float, why: str) -> None:
        self._healthy = False
        self.reason = f"clock offset from the database is {offset:+.3f}s (limit {self.max_skew:.3f}s): {why}"
        log.error(
            "%s: leader and materializer step down until it is fixed (check NTP on this host)",
            self.reason,
            extra={"action": "clock_skew_step_down", "offset": offset},
        )
        if self.on_change is not None:
            self.on_change(self.reason)

    async def measure(self) -> float:
        before = self.clock.now()
        server = await self.store.server_time()
        after = self.clock.now()
        midpoint = before + (after - before) / 2
        offset = (midpoint - server).total_seconds()
        self.offset = offset
        self._base = self._wall_minus_mono()
        metrics.clock_offset.set(offset)
        if self.on_measure is not None:
            self.on_measure(ClockReading(offset, self.max_skew, server))
        healthy = abs(offset) <= self.max_skew
        if healthy and not self._healthy:
            self._healthy = True
            self.reason = None
            log.info(
                "clock offset %.3fs is back within %.3fs: resuming",
                offset,
                self.max_skew,
                extra={"action": "clock_skew_recovered", "offset": offset},
            )
            if self.on_change is not None:
                self.on_change(None)
        elif not healthy and self._healthy:
            self._step_down(offset, "measured")
        return offset

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            self._remeasure.clear()
            with contextlib.suppress(StoreError):  # the modes log store outages themselves
                await self.measure()
            # Sleep the interval, unless ``ok`` saw a jump (re-measure now) or we stop; not
            # measured yet (the store was down), the roles wait for it: retry soon.
            wait = self.interval if self.offset is not None else min(self.interval, 0.5)
            stop = asyncio.ensure_future(stopping.wait())
            again = asyncio.ensure_future(self._remeasure.wait())
            try:
                await asyncio.wait({stop, again}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
                again.cancel()
