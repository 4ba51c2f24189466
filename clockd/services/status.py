"""The cluster's status document (``clockctl status -o json``, the dashboard's health page).

Everything comes from the store's operator reads plus what the caller knows of the
coordination (``clockctl`` asks etcd or the embedded lock; a daemon's api mode asks its
own coordinator). The document is a stable interface: keys are only ever added.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from clockd.config import StoreLocation
from clockd.coord import Member
from clockd.core.instants import iso_utc as iso
from clockd.errors import ClockdError
from clockd.services.reconcile import Report, run_reconcile
from clockd.store import LagStats, Store

log = logging.getLogger(__name__)

RECONCILE_EVERY = timedelta(seconds=30)
RECONCILE_WINDOW = timedelta(hours=1)
LAG_WINDOWS = (("5m", timedelta(minutes=5)), ("60m", timedelta(minutes=60)))
PROBLEMS_SHOWN = 10
# A member's clock reading older than this (by the database's clock) is flagged stale: its
# clock watch measures every 10 s, so it has missed several (its store is unreachable).
CLOCK_STALE_AFTER = 60.0


def member_doc(member: Member) -> dict[str, Any]:
    """One member as ``coordination.members`` shows it (clockctl status, the dashboard):
    ``standby`` only on a node that stands by; ``capabilities`` only on a worker of a
    release that advertises them; ``clock`` only on a node that measured its
    offset (its clock watch runs with the leader, materializer and worker modes)."""
    doc: dict[str, Any] = {"node": member.node_id, "modes": list(member.modes), "shards": list(member.shards)}
    if member.standby:
        doc["standby"] = member.standby
    if member.capabilities:
        doc["capabilities"] = list(member.capabilities)
    if (clock := member.clock) is not None:
        doc["clock"] = {
            "offset_seconds": round(clock.offset, 6),
            "limit_seconds": clock.limit,
            "within_limit": clock.within_limit,
            "measured_at": iso(clock.measured_at),
        }
    return doc


def _age_clock_readings(coordination: dict[str, Any], server_now: datetime) -> None:
    """Add each reading's age (by the database's clock, as it was measured) and ``stale``."""
    for member in coordination.get("members") or []:
        clock = member.get("clock")
        if not isinstance(clock, dict) or not clock.get("measured_at"):
            continue
        measured = datetime.fromisoformat(str(clock["measured_at"]))
        age = max(0.0, (server_now - measured).total_seconds())
        clock["age_seconds"] = round(age, 3)
        clock["stale"] = age > CLOCK_STALE_AFTER


def reconcile_range(now: datetime, horizon: timedelta) -> tuple[datetime, datetime]:
    """The last hour, ending two horizons before now: by then every instant of it has been
    within the materializer's reach for a whole horizon (the leader uses the same range)."""
    end = now - 2 * horizon
    return end - RECONCILE_WINDOW, end


@dataclass
class ReconcileCache:
    """The reconciler's last report, kept for :data:`RECONCILE_EVERY`.

    ``background`` false (``clockctl status``): a stale report is recomputed before the
    document is answered. ``background`` true (the dashboard's health page): a request
    never runs the reconciler — it reads every live schedule's versions — but serves the
    last report with its age (``checked_at``) while one refresh runs in the background;
    only a request that finds no report at all waits, for the run already started
    (``refresh_soon``, which the dashboard calls on every page, so a first health page
    normally finds one done). A failed refresh keeps the previous report and is logged.
    ``max_schedules`` (the api's: the leader's limit) skips the run above that many live
    schedules: on the embedded store the read holds its only database thread (100,000
    took 37 s under load), stalling every page and the scheduler meanwhile."""

    report: Report | None = None
    at: datetime | None = None
    background: bool = False
    # None: always reconcile. Else above this many live schedules the report is not made
    # and ``skipped`` says why (the leader's rule: services.reconcile.RECONCILE_MAX_SCHEDULES).
    max_schedules: int | None = None
    skipped: str | None = None
    _running: asyncio.Task[None] | None = field(default=None, repr=False)

    def _stale(self, now: datetime) -> bool:
        return self.report is None or self.at is None or now - self.at >= RECONCILE_EVERY

    def refresh_soon(self, store: Store, horizon: timedelta, now: datetime | None = None) -> None:
        """Start a refresh in the background if the report is stale at ``now`` (default:
        the wall clock) and none runs."""
        now = datetime.now(UTC) if now is None else now
        if self._stale(now) and (self._running is None or self._running.done()):
            self._running = asyncio.get_running_loop().create_task(
                self._refresh(store, horizon, now), name="clockd-status-reconcile"
            )

    async def _run(self, store: Store, horizon: timedelta, now: datetime) -> None:
        start, end = reconcile_range(now, horizon)
        if self.max_schedules is not None:
            live = await store.live_schedules_count()
            if live > self.max_schedules:
                self.report, self.at = Report(start, end, live, 0, {}), now
                self.skipped = (
                    f"not checked: {live:,} live schedules exceed {self.max_schedules:,} "
                    "(run clockctl reconcile NAME per schedule, or --tenant T per tenant)"
                )
                return
        self.report, self.at = await run_reconcile(store, start, end, keep_accounted=False), now
        self.skipped = None

    async def _refresh(self, store: Store, horizon: timedelta, now: datetime) -> None:
        try:
            await self._run(store, horizon, now)
        except ClockdError as exc:
            log.warning("status: reconciliation failed: %s", exc, extra={"action": "status_reconcile_failed"})

    async def current(self, store: Store, horizon: timedelta, now: datetime) -> tuple[Report, datetime]:
        """The report to show and when it was computed (see the class docstring)."""
        if self._stale(now) and self.background:
            self.refresh_soon(store, horizon, now)
            if self.report is None and self._running is not None:
                await asyncio.shield(self._running)
        # In the foreground when stale; in the background only if the first run failed.
        if self.report is None or self.at is None or (self._stale(now) and not self.background):
            await self._run(store, horizon, now)
        assert self.report is not None and self.at is not None
        return self.report, self.at


async def gather(
    store: Store,
    horizon: timedelta,
    location: StoreLocation,
    coordination: dict[str, Any],
    cache: ReconcileCache | None = None,
) -> dict[str, Any]:
    """The status document (``-o json``: a stable interface). ``coordination`` is the
    caller's view of the leader and members; ``cache`` keeps the reconciler's report
    (:class:`ReconcileCache`: a watch or a page refresh does not rerun it each time); a
    background cache adds ``unaccounted.checked_at`` and ``age_seconds`` (when it ran) and
    ``unaccounted.skipped`` (why it did not, with ``count`` null)."""
    cache = cache or ReconcileCache()
    before = datetime.now(UTC)
    server = await store.server_time()
    now = datetime.now(UTC)
    offset = ((before + (now - before) / 2) - server).total_seconds()
    _age_clock_readings(coordination, server)
    backlog = await store.backlog(now)
    queues = await store.queue_stats(now)
    lags = {label: await store.start_lag(now - span, now) for label, span in LAG_WINDOWS}
    dead = await store.dead_count()
    report, checked = await cache.current(store, horizon, now)
    return {
        "now": iso(now),
        "store": {"kind": location.kind, "location": location.display, "clock_offset_seconds": round(offset, 6)},
        "coordination": coordination,
        "lag": {label: _lag_doc(stats) for label, stats in lags.items()},
        "backlog": {
            "due_schedules": backlog.due_schedules,
            "outbox": backlog.outbox,
            "queued": backlog.queued,
            "running": backlog.running,
            "oldest_queued_age_seconds": _age(now, backlog.oldest_queued_at),
        },
        "queues": [
            {
                "queue": q.queue,
                "ready": q.ready,
                "running": q.running,
                "staged": q.staged,
                "oldest_age_seconds": _age(now, q.oldest_ready_at),
            }
            for q in queues
        ],
        "dlq": dead,
        "unaccounted": {
            "count": None if cache.skipped else report.unaccounted,
            "from": iso(report.start),
            "to": iso(report.end),
            # A background report (the dashboard's) may be older than this document: say so.
            **({"checked_at": iso(checked), "age_seconds": _age(now, checked)} if cache.background else {}),
            **({"skipped": cache.skipped} if cache.skipped else {}),
            "problems": [
                {"schedule": e.schedule, "instant": iso(e.instant), "problem": str(e.status), "detail": e.detail}
                for e in report.problems[:PROBLEMS_SHOWN]
            ],
        },
    }


def _lag_doc(stats: LagStats) -> dict[str, Any]:
    return {"count": stats.count, "p50": stats.p50, "p95": stats.p95, "p99": stats.p99}


def _age(now: datetime, since: datetime | None) -> float | None:
    return None if since is None else round(max(0.0, (now - since).total_seconds()), 3)


def shard_ranges(shards: list[int]) -> str:
    """``0-15,32`` rather than 17 numbers."""
    if not shards:
        return "-"
    runs: list[str] = []
    first = prev = shards[0]
    for s in [*shards[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        runs.append(str(first) if first == prev else f"{first}-{prev}")
        if s is not None:
            first = prev = s
    return f"{len(shards)}: {','.join(runs)}"
