"""Leader: the one process that returns expired leases and prunes history.

Exactly one leader acts at a time: it acts only while its lease is valid on
the monotonic clock, and every write it makes carries the lease's fencing
token (``Fence("leader", token)``), so a leader that was paused past its lease
cannot commit after a successor has written.

Each tick: return expired worker leases (the attempt is recorded LOST and the
occurrence redelivered or, out of attempts, DEAD); every ``sweep_every``, apply
the misfire policy to queued occurrences no worker reached within their
schedule's ``max_lateness`` (``Store.sweep_misfires``: MISSED with the reason)
and free overlap slots whose holder ended without releasing them (canceled or
missed while waiting to retry); every ``prune_every``, delete terminal history
older than ``retention``; every ``queue_vacuum_every``, vacuum the queue table
(``Store.vacuum_queue``: autovacuum comes at most once a minute, and the claims walk
the dead entries it leaves behind until then) and ANALYZE it, or a partition of
history, when its statistics say "nearly empty" while it fills (planned as one row
otherwise); sample backlog, queue, dead-letter
and reconciler figures (``clockd.modes.sampler``).

With a ``Notifier``: a reaped attempt is a ``failure`` (and ``dead`` when it was
the last), and the occurrences a sweep made MISSED are looked up among the
schedules that ask for ``on_missed``; each occurrence that went DEAD is also a
warning line (``run_dead``).

A worker may claim a late row before the sweep gets to it: the sweep bounds how
long a late row can wait, it does not race the claim (the claim skips rows the
sweep holds, and the sweep skips rows a claim holds).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from clockd.coord import Coordinator
from clockd.core.clock import Clock
from clockd.core.model import AttemptOutcome, OccurrenceState
from clockd.core.notify import NotifyEvent, for_event
from clockd.errors import FencedOut
from clockd.modes.base import fault_hold_while, run_ticks
from clockd.modes.clockwatch import ClockWatch
from clockd.modes.sampler import Sampler, SamplerSettings
from clockd.obs import metrics
from clockd.obs.health import STORE_WRITES
from clockd.runner.notify import Notifier, Outcome
from clockd.store import Fence, Reaped, Store

log = logging.getLogger(__name__)

# How the reason of an occurrence the sweep made MISSED ends (clockd.store.misfire_verdicts);
# tests/integration/test_notify.py fails if the two drift apart.
SWEPT_SUFFIX = "; no worker reached it in time"


@dataclass(frozen=True, slots=True)
class LeaderSettings:
    interval: float = 1.0
    reap_batch: int = 1000
    retention: timedelta = timedelta(days=30)
    prune_every: float = 3600.0
    prune_batch: int = 10_000
    sweep_every: float = 5.0  # seconds between misfire sweeps (0: every tick)
    sweep_batch: int = 1000  # oldest waiting rows looked at per queue
    queue_vacuum_every: float = 2.0  # seconds between vacuums of the queue (0: never)
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    # Seconds the reaper waits after the last store error before returning expired
    # leases (the visibility timeout: see clockd.obs.health).
    reap_hold: float = 30.0  # metrics read from the store, and the reconciler
    # CLOCKD_FAULT_HOLD_WHILE (read only by clockd.wiring.Faults): hold each tick between
    # the lease check and its first write while this file exists, so a partition drill
    # can make a cut-off leader write after its deadline. None in production.
    hold_while: str | None = None


def _due(last: float | None, every: float, mono: float) -> bool:
    """Whether a chore last done at monotonic ``last`` (None: not yet) is due again."""
    return last is None or mono - last >= every


class Leader:
    def __init__(
        self,
        store: Store,
        coord: Coordinator,
        clock: Clock,
        settings: LeaderSettings | None = None,
        clock_watch: ClockWatch | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.clock_watch = clock_watch
        self.notifier = notifier
        self.store, self.coord, self.clock = store, coord, clock
        self.settings = settings or LeaderSettings()
        self.sampler = Sampler(store, clock, self.settings.sampler)
        self._last_prune: float | None = None
        self._last_sweep: float | None = None
        self._last_vacuum: float | None = None
        self._vacuum_refused = False
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
        await fault_hold_while(self.settings.hold_while, "a leader tick", token=lease.token)
        try:
            reaped = (
                await self.store.reap_expired(fence, self.settings.reap_batch, now)
                if STORE_WRITES.settled(self.settings.reap_hold)
                else []
            )
            if reaped:
                metrics.leases_reaped.inc(len(reaped))
                log.warning(
                    "returned %d expired lease(s)",
                    len(reaped),
                    extra={"action": "leases_reaped", "count": len(reaped)},
                )
                await self._after_reap(reaped)
            mono = self.clock.monotonic()
            if _due(self._last_sweep, self.settings.sweep_every, mono):
                self._last_sweep = mono
                await self._sweep(fence, now)
            if _due(self._last_prune, self.settings.prune_every, mono):
                self._last_prune = mono
                pruned = await self.store.prune(fence, now - self.settings.retention, self.settings.prune_batch, now)
                if pruned:
                    log.info(
                        "pruned %d occurrences",
                        pruned,
                        extra={"action": "history_pruned", "count": pruned},
                    )
            every = self.settings.queue_vacuum_every
            if every > 0 and not self._vacuum_refused and _due(self._last_vacuum, every, mono):
                self._last_vacuum = mono
                await self._vacuum_queue()
        except FencedOut:
            metrics.fenced_writes_rejected.labels(resource_kind="leader").inc()
            self.coord.lost(lease)
            raise
        await self.sampler.maybe(now)  # backlog, per-queue depth and age, dead letters, reconciler
        return len(reaped) >= self.settings.reap_batch

    async def _vacuum_queue(self) -> None:
        """No fence: a vacuum changes no row a successor could disagree with, and a
        deposed leader's last one is as harmless as autovacuum's."""
        if await self.store.vacuum_queue():
            return
        self._vacuum_refused = True  # a role's rights do not change while it runs
        log.warning(
            "cannot vacuum the queue table as this database role (only its owner, the database's owner or a "
            "superuser may): the claims slow down as dead rows pile up between autovacuum's visits; run the "
            "leader as the owner, set queue_vacuum_every: 0s to silence this, or lower autovacuum_naptime",
            extra={"action": "queue_vacuum_refused"},
        )

    async def _sweep(self, fence: Fence, now: datetime) -> None:
        missed = await self.store.sweep_misfires(fence, self.settings.sweep_batch, now)
        if missed:
            metrics.occurrences_swept_missed.inc(missed)
            log.warning(
                "%d queued occurrence(s) missed: no worker reached them within max_lateness",
                missed,
                extra={"action": "misfire_swept", "count": missed},
            )
            if self.notifier is not None:
                await self._notify_swept(now)
        freed = await self.store.release_stale_slots(fence, self.settings.sweep_batch, now)
        if freed:
            log.info(
                "freed %d overlap slot(s) whose holder ended without releasing them",
                freed,
                extra={"action": "overlap_slots_freed", "count": freed},
            )

    async def _after_reap(self, reaped: list[Reaped]) -> None:
        """Lost attempts: a warning for each occurrence that went DEAD; notifications."""
        for row in reaped:
            dead = row.next_state is OccurrenceState.DEAD
            if dead:
                log.warning(
                    "occurrence %s went DEAD: its attempt %d was lost (lease expired) and it has no attempt left",
                    row.occurrence_id,
                    row.attempt,
                    extra={"action": "run_dead", "occurrence": row.occurrence_id, "attempt": row.attempt},
                )
            if self.notifier is None:
                continue
            occurrence = await self.store.get_occurrence(row.occurrence_id)
            if occurrence is None:
                continue
            self.notifier.notify(
                Outcome(
                    schedule_id=occurrence.schedule_id,
                    version=occurrence.version,
                    schedule_name=occurrence.schedule_name,
                    occurrence_id=occurrence.id,
                    scheduled_for=occurrence.scheduled_for,
                    state=row.next_state,
                    attempt=row.attempt,
                    outcome=AttemptOutcome.LOST,
                    error="the worker's lease expired (crash, pause or partition)",
                )
            )

    async def _notify_swept(self, now: datetime) -> None:
        """The sweep reports a count: find its MISSED rows among the schedules that ask
        for ``on_missed`` (their newest occurrences, finished by this sweep; the
        notifier drops one it has already sent)."""
        assert self.notifier is not None
        for schedule in await self.store.list_schedules():
            if for_event(schedule.definition.notify, NotifyEvent.MISSED) is None:
                continue
            for occurrence in await self.store.list_occurrences(schedule.id, limit=50):
                if (
                    occurrence.state is not OccurrenceState.MISSED
                    or occurrence.finished_at is None
                    or occurrence.finished_at < now - timedelta(seconds=1)
                    # the sweep's own verdicts (clockd.store.misfire_verdicts), not the
                    # materializer's, which it notified itself
                    or not (occurrence.reason or "").endswith(SWEPT_SUFFIX)
                ):
                    continue
                self.notifier.missed(
                    schedule, occurrence.id, occurrence.version, occurrence.scheduled_for, occurrence.reason
                )
