"""Clock watch: measures this process's offset from the database server's clock.

A leader or materializer decides what is due by its own wall clock; if that
clock is off by more than ``max_skew`` it would fire early or late without
anyone noticing (clock failure is silent). So the offset is measured every
``interval`` (midpoint of the round trip, so network latency cancels out),
exported as ``clockd_clock_offset_seconds``, and while it exceeds
``max_skew`` the leader and materializer step down — they check ``ok`` before
each tick — and say why in the log.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from clockd.core.clock import Clock
from clockd.errors import StoreError
from clockd.modes.base import wait_or_stop
from clockd.obs import metrics
from clockd.store import Store

log = logging.getLogger(__name__)


class ClockWatch:
    def __init__(
        self, store: Store, clock: Clock, max_skew: timedelta = timedelta(seconds=2), interval: float = 10.0
    ) -> None:
        self.store, self.clock = store, clock
        self.max_skew = max_skew.total_seconds()
        self.interval = interval
        self.offset: float | None = None
        self.ok = True

    async def measure(self) -> float:
        before = self.clock.now()
        server = await self.store.server_time()
        after = self.clock.now()
        midpoint = before + (after - before) / 2
        offset = (midpoint - server).total_seconds()
        self.offset = offset
        metrics.clock_offset.set(offset)
        healthy = abs(offset) <= self.max_skew
        if healthy != self.ok:
            self.ok = healthy
            if healthy:
                log.info(
                    "clock offset %.3fs is back within %.3fs: resuming",
                    offset,
                    self.max_skew,
                    extra={"action": "clock_skew_recovered", "offset": offset},
                )
            else:
                log.error(
                    "clock offset from the database is %.3fs (limit %.3fs): leader and materializer "
                    "step down until it is fixed (check NTP on this host)",
                    offset,
                    self.max_skew,
                    extra={"action": "clock_skew_step_down", "offset": offset},
                )
        return offset

    async def run(self, stopping: asyncio.Event) -> None:
        while True:
            try:
                await self.measure()
            except StoreError:
                pass  # the modes log store outages themselves
            if await wait_or_stop(stopping, self.interval):
                return
