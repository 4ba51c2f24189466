"""Leader: the one process that returns expired leases and prunes history.

Exactly one leader acts at a time: it acts only while its lease is valid on
the monotonic clock, and every write it makes carries the lease's fencing
token (``Fence("leader", token)``), so a leader that was paused past its lease
cannot commit after a successor has written.

Each tick: return expired worker leases (the attempt is recorded LOST and the
occurrence redelivered or, out of attempts, DEAD); every ``prune_every``,
delete terminal history older than ``retention``; refresh backlog gauges.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta

from clockd.coord import Coordinator
from clockd.core.clock import Clock
from clockd.errors import FencedOut
from clockd.modes.base import run_ticks
from clockd.modes.clockwatch import ClockWatch
from clockd.obs import metrics
from clockd.store import Fence, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaderSettings:
    interval: float = 1.0
    reap_batch: int = 1000
    retention: timedelta = timedelta(days=30)
    prune_every: float = 3600.0
    prune_batch: int = 10_000


class Leader:
    def __init__(
        self,
        store: Store,
        coord: Coordinator,
        clock: Clock,
        settings: LeaderSettings | None = None,
        clock_watch: ClockWatch | None = None,
    ) -> None:
        self.clock_watch = clock_watch
        self.store, self.coord, self.clock = store, coord, clock
        self.settings = settings or LeaderSettings()
        self._last_prune: float | None = None
        self._was_leader = False

    async def run(self, stopping: asyncio.Event) -> None:
        await run_ticks("leader", self.tick, self.settings.interval, stopping)

    async def tick(self) -> bool:
        lease = self.coord.leader_lease()
        if self.clock_watch is not None and not self.clock_watch.ok:
            lease = None  # stepped down: our clock cannot be trusted to say what is due
        is_leader = lease is not None
        if is_leader != self._was_leader:
            self._was_leader = is_leader
            metrics.leadership.set(1 if is_leader else 0)
        now = self.clock.now()
        if lease is None:
            return False
        fence = Fence(lease.resource, lease.token)
        try:
            reaped = await self.store.reap_expired(fence, self.settings.reap_batch, now)
            if reaped:
                metrics.leases_reaped.inc(len(reaped))
                log.warning(
                    "returned %d expired lease(s)",
                    len(reaped),
                    extra={"action": "leases_reaped", "count": len(reaped)},
                )
            mono = self.clock.monotonic()
            if self._last_prune is None or mono - self._last_prune >= self.settings.prune_every:
                self._last_prune = mono
                pruned = await self.store.prune(fence, now - self.settings.retention, self.settings.prune_batch, now)
                if pruned:
                    log.info(
                        "pruned %d occurrences",
                        pruned,
                        extra={"action": "history_pruned", "count": pruned},
                    )
        except FencedOut:
            metrics.fenced_writes_rejected.labels(resource_kind="leader").inc()
            self.coord.lost(lease)
            raise
        backlog = await self.store.backlog(now)
        metrics.backlog.labels(stage="due").set(backlog.due_schedules)
        metrics.backlog.labels(stage="outbox").set(backlog.outbox)
        metrics.backlog.labels(stage="queued").set(backlog.queued)
        metrics.backlog.labels(stage="running").set(backlog.running)
        oldest = backlog.oldest_queued_at
        metrics.oldest_queued_age.set(max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)
        return len(reaped) >= self.settings.reap_batch
