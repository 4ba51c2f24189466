"""Materializer: turns schedules into occurrences ahead of time, one fenced batch per shard.

Each tick asks which of the shards this node holds have a schedule whose cursor
(``next_run_at``) falls within ``now + horizon`` (one index probe per shard), then,
shard by shard, reads those schedules — an index range read, never a scan of all
schedules — plans their instants (``clockd.core.planning``), and
writes them with ``Store.materialize``: in ONE transaction per shard batch the
fence is advanced to the shard lease's token, cursors move only if unchanged,
occurrences are inserted if absent, and outbox rows are written. A zombie
whose lease passed its deadline does not even try (``lease.valid``), and if it
was paused between that check and the commit, the fence rejects it.

Pipelined: while shard batches are being written, the next shard's due schedules
are read (another connection) and planned (this process's CPU), so the database and
the planner work at the same time instead of taking turns. Up to ``writes_in_flight``
writes (two) are in flight at once, each its own transaction (on PostgreSQL on its own
connection; SQLite's store runs one transaction at a time on its thread, so there the
second waits its turn), started in the order of the shards; a shard has one batch per
tick, so its own writes never overlap. A failed write ends the tick (the others in
flight commit or fail on their own, never cut). Each write still checks its own lease
right before it starts, and is fenced. Why two: on a database whose cores are busy,
each backend gets at most its fair share of them, and one writing backend could not
keep up with 10,000 occurrences a second beside the workers' (README, "Two materializer
writes in flight").

Full ticks while caught up: a full tick reads and plans every shard with a cursor within
the horizon. Once every shard was planned to at least half the horizon, the next full
tick waits ``full_every`` seconds (2 s); the ticks between (every ``interval``, 0.5 s)
only probe — one index probe per shard — for a cursor below the last full tick's reach:
a schedule created, resumed or changed since, a shard taken over. Any such cursor runs a
full tick at once, so a new schedule waits no longer than before; so does a wall clock
stepped past the next full tick's time. What waits is the horizon's creep for the
schedules already planned, which the horizon covers (only with a horizon of at least four
``full_every``). Why: each full tick costs per shard (a due read, a fenced transaction
and its commit) and moves the cursor of every schedule that had an instant since the last
one — in the sustained run at 10,000/s (periods of 1–10 s) full ticks 0.5 s apart wrote
620–800 materializer transactions in its minute and moved 306,000–344,000 cursors, full
ticks 2 s apart 460–560 and 260,000–297,000, at ~10 % less materializer CPU and ~5 % less
CPU per execution in all (README, "Full ticks every 2 s while caught up").

Cursor semantics: ``next_run_at`` is the earliest instant not yet materialized.
Materializing never moves it backwards and never writes an instant twice
(deterministic ids + ``UNIQUE(schedule_id, version, scheduled_for)``).

Observed on commit: ``clockd_schedule_lag_seconds{step="enqueued"}`` for each
occurrence a direct-dispatch batch wrote ENQUEUED — how late it was staged (``now -
available_at``, 0 when staged ahead, the normal case), so a materializer behind shows
its lateness there (the relay observes the rows it stages).

Catch-up pacing: late instants that misfire ``catch_up`` (or ``fire_once``) lets
run are spaced out at the tenant's ``catch_up_rate`` per minute
(``tenant_limits``, read every ``limits_every`` seconds): each one's
``available_at`` becomes the tenant's next free catch-up slot. The slots are
kept by this materializer, so with several materializers a tenant's rate is
per materializer.

Mixed versions (a rolling upgrade): a schedule whose definition needs a capability
that some live worker does not advertise (``clockd.core.capabilities``; what the
workers offer is re-read from the coordinator every ``capabilities_every`` seconds)
is not planned: its cursor stays, so no worker can claim it, and once every worker
offers it, its late instants are planned under its misfire policy like any others.
Held schedules stay due, so a shard with more than ``batch`` of them would starve
its others; an upgrade window is expected to be short.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from clockd.coord import Coordinator, Lease
from clockd.core import capabilities
from clockd.core.clock import Clock
from clockd.core.model import OccurrenceState
from clockd.core.planning import DueSchedule, plan_schedule
from clockd.core.spec import compile_spec
from clockd.errors import ClockdError, FencedOut, StoreError
from clockd.modes.base import fault_hold_while, run_ticks
from clockd.modes.clockwatch import ClockWatch
from clockd.obs import metrics
from clockd.runner.notify import Notifier
from clockd.store import CursorAdvance, Fence, NewOccurrence, Store

log = logging.getLogger(__name__)

_LAG_ENQUEUED = metrics.schedule_lag.labels(step="enqueued")


@dataclass(frozen=True, slots=True)
class MaterializerSettings:
    horizon: timedelta = timedelta(minutes=2)
    batch: int = 1000  # schedules per read
    instants_per_schedule: int = 500  # per schedule per tick; the cursor continues next tick
    interval: float = 0.5  # seconds between ticks when idle
    # Seconds between full ticks while caught up (every shard planned to at least half the
    # horizon); the ticks between only probe for cursors below the last full tick's reach
    # (the module docstring, "Full ticks while caught up").
    full_every: float = 2.0
    limits_every: float = 10.0  # seconds between reads of the tenants' catch-up rates
    # direct_dispatch: write the dispatch rows in the materializer's own transaction
    # (Store.materialize(direct=True)) instead of outbox rows for the relay.
    direct: bool = True
    # Fault injection for the failure drills (CLOCKD_FAULT_HOLD_WHILE, read only by
    # clockd.wiring.Faults): hold each batch between the lease check and the commit for as
    # long as this file exists, as a GC pause, a VM migration or a partition would; the
    # drill decides when the pause ends. None in production.
    hold_while: str | None = None
    # Seconds between reads of what the live workers honour (clockd.core.capabilities).
    capabilities_every: float = 2.0
    # Shard batches being written at once, each in its own transaction (PostgreSQL: its
    # own connection from the pool; SQLite's store runs them one after the other).
    # Two, not one: on a busy database server a backend gets at most its fair share of the
    # cores, and the materializer's one backend fell behind at 10,000 occurrences/s while
    # the workers' backends kept up (README, "Two materializer writes in flight").
    writes_in_flight: int = 2


@dataclass(frozen=True, slots=True)
class _ShardPlan:
    """One shard's batch, planned and not yet written."""

    lease: Lease
    schedules: list[DueSchedule]
    now: datetime
    occurrences: list[NewOccurrence]
    cursors: list[CursorAdvance]


class Materializer:
    def __init__(
        self,
        store: Store,
        coord: Coordinator,
        clock: Clock,
        settings: MaterializerSettings | None = None,
        clock_watch: ClockWatch | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.clock_watch = clock_watch
        self.notifier = notifier  # on_missed of instants planned MISSED, once committed
        self.store, self.coord, self.clock = store, coord, clock
        self.settings = settings or MaterializerSettings()
        self._rates: dict[str, int] = {}  # tenant -> catch-up occurrences per minute
        self._rates_read: float | None = None
        self._catch_up_next: dict[str, datetime] = {}  # tenant -> next free catch-up slot
        # What every live worker honours (None: no worker, or not read yet), and the
        # schedules held back meanwhile (logged once each).
        self._offered: frozenset[str] | None = None
        self._offered_read: float | None = None
        self._held: set[str] = set()
        # While caught up: when the next full tick is due, by the monotonic and by the wall
        # clock (a wall clock stepped forward makes instants due at once), and the reach of
        # the last one (every cursor it planned lies beyond); None: every tick is full.
        self._full_after: tuple[float, datetime, datetime] | None = None

    async def run(self, stopping: asyncio.Event) -> None:
        await run_ticks("materializer", self.tick, self.settings.interval, stopping)

    async def tick(self) -> bool:
        """One pass over the owned shards that have something due, the most urgent shard
        first; True when a shard had more due than one batch (more waiting). While caught
        up, a tick within ``full_every`` of the last full one only probes (the module
        docstring, "Full ticks while caught up"). A full tick sets
        ``clockd_materializer_lead_seconds``: how far ahead of now every owned shard is
        planned (about the horizon once caught up; below zero while due instants are not
        yet planned — the alert that the materializer is behind).

        Each shard is read and written on its own (``due_shards``, then ``due_schedules``
        of that shard and one ``materialize`` transaction): a batch then fills one
        transaction, where one merged read over all shards would split it into a small
        commit per shard (measured 2× slower at the top of the hour)."""
        leases = {lease.shard: lease for lease in self.coord.shard_leases() if lease.shard is not None}
        metrics.shards_owned.set(len(leases))
        if self.clock_watch is not None and not self.clock_watch.ok:
            return False  # stepped down: our clock cannot be trusted to say what is due
        if not leases:
            return False
        began = self.clock.monotonic()
        now = self.clock.now()
        if self._full_after is not None:
            full_at, full_wall, reach = self._full_after
            # Caught up: before the next full tick, only a cursor below the last one's reach
            # (new, changed, taken over) calls for one now.
            if began < full_at and now < full_wall and not await self.store.due_shards(sorted(leases), reach):
                return False
            self._full_after = None
        until = now + self.settings.horizon
        due_shards = await self.store.due_shards(sorted(leases), until)
        # How far ahead every owned shard is planned: its earliest unplanned instant.
        ahead = min((first for _, first in due_shards), default=until) - now
        metrics.materializer_lead.set(ahead.total_seconds())
        shards = [shard for shard, _ in due_shards]
        caught_up = ahead * 2 >= self.settings.horizon >= 4 * timedelta(seconds=self.settings.full_every)
        more = await self._plan_and_write(leases, shards, until) if shards else False
        if caught_up and not more:
            # Every shard planned to `until` (the plans went at least that far): the next
            # full tick can wait; a cursor below `until` is new and calls it at once.
            self._full_after = self._next_full(until)
        return more

    async def _plan_and_write(self, leases: dict[int, Lease], shards: list[int], until: datetime) -> bool:
        """The full tick's shards read, planned and written, up to ``writes_in_flight`` at
        once; True when a shard had more due than one batch."""
        await self._read_rates()
        await self._read_offered()
        more = False
        writing: deque[asyncio.Task[None]] = deque()  # earlier shards' writes, in flight
        try:
            for shard in shards:
                lease = leases[shard]
                if not lease.valid(self.clock.monotonic()):
                    continue  # lost meanwhile: its next owner materializes it
                due = await self.store.due_schedules([shard], until, self.settings.batch)
                more = more or len(due) >= self.settings.batch
                if not due:
                    continue
                plan = self._plan_shard(lease, due)
                while len(writing) >= max(1, self.settings.writes_in_flight):
                    await writing.popleft()  # the oldest first; its error ends the tick
                writing.append(asyncio.create_task(self._write_shard(plan)))
            while writing:
                await writing.popleft()
        finally:
            # A read or a write that failed (or a stop) while other writes were in flight:
            # each is one transaction, left to commit or fail on its own rather than cut in
            # the middle (the error that ends the tick is the one already raised).
            if writing:
                await asyncio.gather(*writing, return_exceptions=True)
        return more

    def _next_full(self, until: datetime) -> tuple[float, datetime, datetime]:
        """When the next full tick comes after a caught-up one that planned to ``until``
        and ends now: ``full_every`` from now by either clock (from the end, as the idle
        interval: a full tick under load takes seconds itself)."""
        every = self.settings.full_every
        return self.clock.monotonic() + every, self.clock.now() + timedelta(seconds=every), until

    async def _read_rates(self) -> None:
        mono = self.clock.monotonic()
        if self._rates_read is not None and mono - self._rates_read < self.settings.limits_every:
            return
        self._rates_read = mono
        try:
            limits = await self.store.tenant_limits()
        except StoreError as exc:  # pacing is best effort; materializing is not
            log.warning("cannot read tenant limits: %s", exc.message, extra={"action": "tenant_limits_failed"})
            return
        self._rates = {t.tenant: t.catch_up_rate for t in limits if t.catch_up_rate}

    async def _read_offered(self) -> None:
        mono = self.clock.monotonic()
        if self._offered_read is not None and mono - self._offered_read < self.settings.capabilities_every:
            return
        self._offered_read = mono
        status = await self.coord.status()
        if status.reachable:  # else keep what was last seen
            self._offered = capabilities.offered([m.capabilities for m in status.members if "worker" in m.modes])

    def _waits_for_workers(self, schedule: DueSchedule) -> bool:
        """True when a live worker would not honour the schedule (an older release that
        ignores a feature it uses): it is not planned until every worker does, so that
        worker never claims it. Its instants then follow the misfire policy, recorded."""
        offered = capabilities.WORKER_CAPABILITIES if self._offered is None else self._offered
        missing = schedule.requires - offered
        if not missing:
            if schedule.id in self._held:
                self._held.discard(schedule.id)
                log.info(
                    "schedule %s: every live worker honours it now",
                    schedule.name,
                    extra={"action": "capability_ready", "schedule": schedule.name},
                )
            return False
        if schedule.id not in self._held:
            self._held.add(schedule.id)
            log.warning(
                "schedule %s waits: a live worker does not honour %s (an older release); "
                "it is planned once every worker does",
                schedule.name,
                ", ".join(sorted(missing)),
                extra={"action": "capability_wait", "schedule": schedule.name, "missing": sorted(missing)},
            )
        return True

    def _paced(self, tenant: str, available: datetime, now: datetime) -> datetime:
        """A catch-up occurrence's ``available_at`` under its tenant's catch-up rate."""
        rate = self._rates.get(tenant)
        if not rate:
            return available
        slot = max(self._catch_up_next.get(tenant, now), now, available)
        self._catch_up_next[tenant] = slot + timedelta(minutes=1) / rate
        return slot

    def _plan_shard(self, lease: Lease, schedules: list[DueSchedule]) -> _ShardPlan:
        """The instants of a shard's due schedules up to ``now + horizon`` and their new
        cursors (CPU only: the previous shard's write runs meanwhile)."""
        now = self.clock.now()
        until = now + self.settings.horizon
        occurrences: list[NewOccurrence] = []
        cursors: list[CursorAdvance] = []
        for d in schedules:
            try:
                spec = compile_spec(d.kind, d.expr, d.tz, d.created_at)
            except ClockdError as exc:
                # Validated at creation; a definition that no longer compiles (e.g. a zone
                # removed from a newer tzdata) is reported, not silently dropped.
                log.error(
                    "schedule %s no longer compiles: %s",
                    d.name,
                    exc.message,
                    extra={"action": "schedule_invalid", "schedule": d.name},
                )
                continue
            if self._waits_for_workers(d):
                continue
            plan = plan_schedule(d, spec.next_after, until, now, self.settings.instants_per_schedule)
            for p in plan.occurrences:
                paced = self._paced(d.tenant, p.available_at, now) if p.catch_up else None
                occurrences.append(NewOccurrence.planned(d, p, paced))
            cursors.append(CursorAdvance(d.id, d.version, d.next_run_at, plan.next_run_at))
        return _ShardPlan(lease, schedules, now, occurrences, cursors)

    async def _write_shard(self, batch: _ShardPlan) -> None:
        """``Store.materialize`` of one planned batch: the materializer's transaction
        (fence, cursors, occurrences and queue rows, all or nothing)."""
        lease, occurrences, cursors, now = batch.lease, batch.occurrences, batch.cursors, batch.now
        # The deadline check comes last, right before the write: planning took time (and
        # the wall clock may have jumped meanwhile: the plan would then be wrong).
        if not lease.valid(self.clock.monotonic()):
            return
        if self.clock_watch is not None and not self.clock_watch.ok:
            return
        await fault_hold_while(self.settings.hold_while, "a batch", shard=lease.shard)
        try:
            result = await self.store.materialize(
                Fence(lease.resource, lease.token), occurrences, cursors, now, direct=self.settings.direct
            )
        except FencedOut:
            metrics.fenced_writes_rejected.labels(resource_kind="shard").inc()
            self.coord.lost(lease)
            raise
        missed = sum(1 for o in occurrences if o.state is OccurrenceState.MISSED)
        if missed:
            await self._report_missed(batch.schedules, occurrences)
        _LAG_ENQUEUED.observe_many(result.enqueue_lags)  # direct dispatch: staged here, now
        metrics.occurrences_materialized.labels(state="SCHEDULED").inc(result.inserted - min(missed, result.inserted))
        if missed:
            metrics.occurrences_materialized.labels(state="MISSED").inc(missed)
        if result.inserted:
            log.debug(
                "materialized %d occurrences",
                result.inserted,
                extra={"action": "materialized", "shard": lease.shard, "count": result.inserted},
            )

    async def _report_missed(self, schedules: list[DueSchedule], occurrences: list[NewOccurrence]) -> None:
        """Instants planned MISSED: one warning per schedule, and its ``on_missed``. The
        whole schedule (its notifications) is looked up only for one that asks to be
        notified: ``due_schedules`` read its planning inputs alone."""
        by_id = {s.id: s for s in schedules}
        counts: dict[str, list[NewOccurrence]] = {}
        for o in occurrences:
            if o.state is OccurrenceState.MISSED:
                counts.setdefault(o.schedule_id, []).append(o)
        for schedule_id, missed in counts.items():
            schedule = by_id[schedule_id]
            log.warning(
                "%s: %d run(s) MISSED, the first for %s: %s",
                schedule.name,
                len(missed),
                missed[0].scheduled_for.isoformat(),
                missed[0].reason,
                extra={"action": "run_missed", "schedule": schedule.name, "count": len(missed)},
            )
            if self.notifier is None or not schedule.notify:
                continue
            try:
                whole = await self.store.get_schedule_by_id(schedule_id)
            except StoreError as exc:  # as the notifier's own lookup: this notification is lost
                log.warning(
                    "cannot look up %s to notify its MISSED: %s",
                    schedule.name,
                    exc.message,
                    extra={"action": "notify_failed", "schedule": schedule.name},
                )
                continue
            if whole is None:
                continue  # deleted since: nobody to tell
            for o in missed:
                self.notifier.missed(whole, o.id, o.version, o.scheduled_for, o.reason)
