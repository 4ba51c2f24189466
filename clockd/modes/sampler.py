"""The leader's samples: cluster-wide figures read from the store, exported as metrics.

Only the leader samples (one process, so a figure is never counted twice), from its
tick, on its own cadence:

* every ``sample_every`` (10 s): the backlog by stage (``clockd_backlog``: schedules
  whose cursor is due, outbox, queued, running; counts over the hot tables, ~0.1 s of
  database time each under a top-of-hour burst, which is why they are not read every
  tick), queue depth and the oldest claimable row's age per
  queue (``clockd_queue_depth``, ``clockd_queue_oldest_age_seconds``), the dead-letter
  queue's size (``clockd_dlq_size``), the MISSED / SKIPPED_OVERLAP occurrences that ended
  since the last sample by reason (``clockd_occurrences_not_run_total``; by their
  ``finished_at``, so a row committed after its window was sampled is not counted: a
  lower bound);
* every ``reconcile_every`` (60 s): the reconciler over the last ``reconcile_window``
  (1 h) ending ``reconcile_margin`` before now (two materializer horizons: by then every
  instant of the window has been within the materializer's reach for a whole horizon),
  exported as ``clockd_occurrences_unaccounted`` and logged (``reconcile_unaccounted``)
  when not zero.

A failed sample is logged and skipped: observing must never stop the leader's work.
Reads only, so nothing here is fenced.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime, timedelta

from clockd.core.clock import Clock
from clockd.core.instants import format_instant
from clockd.errors import StoreError
from clockd.obs import metrics
from clockd.services.reconcile import RECONCILE_MAX_SCHEDULES, run_reconcile
from clockd.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SamplerSettings:
    sample_every: float = 10.0  # seconds
    reconcile_every: float = 60.0  # seconds; 0 turns the reconciler off
    reconcile_window: timedelta = timedelta(hours=1)
    reconcile_margin: timedelta = timedelta(minutes=4)  # 2 × the default horizon
    # The periodic reconciliation loads every live schedule's versions and an hour of
    # occurrences into the leader's memory; above this many schedules it is skipped (and
    # the gauge reads -1) so the leader's memory never grows with the fleet. Run
    # `clockctl reconcile NAME` or per tenant for larger fleets.
    reconcile_max_schedules: int = RECONCILE_MAX_SCHEDULES


class Sampler:
    def __init__(self, store: Store, clock: Clock, settings: SamplerSettings | None = None) -> None:
        self.store, self.clock = store, clock
        self.settings = settings or SamplerSettings()
        self._last_sample: float | None = None
        self._last_reconcile: float | None = None
        self._reconcile_skipped = False
        self._since: datetime | None = None  # end of the last sampled window
        self._queues: set[str] = set()
        self.last_unaccounted: int | None = None

    async def maybe(self, now: datetime) -> None:
        """Sample what is due; called by the leader's tick while it leads."""
        mono = self.clock.monotonic()
        if self._last_sample is None or mono - self._last_sample >= self.settings.sample_every:
            self._last_sample = mono
            await self._guarded("sample", self.sample(now))
        every = self.settings.reconcile_every
        if every > 0 and (self._last_reconcile is None or mono - self._last_reconcile >= every):
            self._last_reconcile = mono
            await self._guarded("reconcile", self.reconcile(now))

    async def _guarded(self, what: str, work: Awaitable[object]) -> None:
        try:
            await work
        except StoreError as exc:
            log.warning("leader %s failed: %s", what, exc.message, extra={"action": "sample_failed", "what": what})

    async def sample(self, now: datetime) -> None:
        since = self._since if self._since is not None else now - timedelta(seconds=self.settings.sample_every)
        backlog = await self.store.backlog(now)
        metrics.backlog.labels(stage="due").set(backlog.due_schedules)
        metrics.backlog.labels(stage="outbox").set(backlog.outbox)
        metrics.backlog.labels(stage="queued").set(backlog.queued)
        metrics.backlog.labels(stage="running").set(backlog.running)
        seen = set()
        for q in backlog.queues:
            seen.add(q.queue)
            metrics.queue_depth.labels(queue=q.queue).set(q.ready)
            age = (now - q.oldest_ready_at).total_seconds() if q.oldest_ready_at else 0.0
            metrics.oldest_queued_age.labels(queue=q.queue).set(max(0.0, age))
        for gone in self._queues - seen:
            metrics.queue_depth.labels(queue=gone).set(0)
            metrics.oldest_queued_age.labels(queue=gone).set(0)
        self._queues |= seen
        metrics.dlq_size.set(await self.store.dead_count())
        if since < now:
            for (state, reason), count in (await self.store.not_run_counts(since, now)).items():
                metrics.occurrences_not_run.labels(state=str(state), reason=reason).inc(count)
        self._since = now

    async def reconcile(self, now: datetime) -> int:
        live = await self.store.live_schedules_count()
        if live > self.settings.reconcile_max_schedules:
            if not self._reconcile_skipped:
                log.warning(
                    "periodic reconciliation skipped: %d live schedules exceed %d "
                    "(run clockctl reconcile NAME per schedule, or --tenant T per tenant, instead)",
                    live,
                    self.settings.reconcile_max_schedules,
                    extra={"action": "reconcile_skipped", "count": live},
                )
            self._reconcile_skipped = True
            metrics.occurrences_unaccounted.set(-1)
            return -1
        self._reconcile_skipped = False
        end = now - self.settings.reconcile_margin
        start = end - self.settings.reconcile_window
        report = await run_reconcile(self.store, start, end, keep_accounted=False)
        self.last_unaccounted = report.unaccounted
        metrics.occurrences_unaccounted.set(report.unaccounted)
        if report.unaccounted:
            shown = "; ".join(f"{e.schedule} {format_instant(e.instant)} {e.status}" for e in report.problems[:5])
            log.warning(
                "%d expected instant(s) not accounted for between %s and %s: %s",
                report.unaccounted,
                format_instant(start),
                format_instant(end),
                shown,
                extra={"action": "reconcile_unaccounted", "count": report.unaccounted},
            )
        else:
            log.debug(
                "reconciled %d expected instant(s): all accounted for",
                report.expected,
                extra={"action": "reconciled", "count": report.expected},
            )
        return report.unaccounted
