"""Scheduling policies end to end (DESIGN.md §4): the modes driven by a manual clock on a
real store, SQLite and PostgreSQL, no sleeps.

Each test states a timeline and the exact instants that must end MISSED, SKIPPED_OVERLAP,
CANCELED or SUCCEEDED. Jobs last as long as the test says (``GatedRunner``): a job ends
when the manual clock passes its end. Two workers (each on its own store connection)
claim side by side where a test is about racing.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol, Unpack

import pytest

from clockd.coord.local import LocalCoordinator
from clockd.core.clock import ManualClock
from clockd.core.ids import new_schedule_id, shard_of
from clockd.core.model import (
    AttemptOutcome,
    MisfirePolicy,
    NoopTarget,
    Occurrence,
    OccurrenceState,
    OverlapPolicy,
    RetryPolicy,
    ScheduleDef,
    ScheduleKind,
)
from clockd.errors import QuotaExceeded
from clockd.modes.leader import Leader, LeaderSettings
from clockd.modes.materializer import Materializer, MaterializerSettings
from clockd.modes.relay import Relay
from clockd.modes.worker import Worker, WorkerSettings
from clockd.runner import RunRequest, RunResult
from clockd.services.ops import Ops, ResumeFrom
from clockd.store import NewSchedule, Store
from tests.contract.store.support import Backend, Settings

T0 = datetime(2026, 3, 2, 23, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
HOUR = timedelta(hours=1)
SHARDS = 4
LEASE = timedelta(days=1)  # no heartbeats here: a lease outlives every job of these tests


@dataclass
class GatedRunner:
    """Runs nothing. A job of a schedule in ``durations`` (by name, or by name without its
    trailing digits) lasts that long on the manual clock (``release`` ends it); others end
    at once. ``exit_codes`` scripts failures."""

    clock: ManualClock
    durations: dict[str, timedelta] = field(default_factory=dict)
    exit_codes: dict[tuple[str, int], int] = field(default_factory=dict)  # (schedule, attempt)
    calls: list[RunRequest] = field(default_factory=list)
    spans: dict[str, tuple[datetime, datetime]] = field(default_factory=dict)  # occurrence -> (start, end)
    _gates: dict[str, tuple[datetime, asyncio.Event]] = field(default_factory=dict)

    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        self.calls.append(request)
        start = self.clock.now()
        name = request.schedule_name
        duration = self.durations.get(name, self.durations.get(name.rstrip("0123456789"), timedelta(0)))
        if duration:
            gate = asyncio.Event()
            self._gates[request.occurrence_id] = (start + duration, gate)
            await gate.wait()
        self.spans[request.occurrence_id] = (start, self.clock.now())
        code = self.exit_codes.get((request.schedule_name, request.attempt), 0)
        if code:
            return RunResult(AttemptOutcome.FAILED, exit_code=code, error=f"exit code {code}")
        return RunResult(AttemptOutcome.SUCCEEDED, exit_code=0)

    def release(self, now: datetime) -> None:
        for occ, (end, gate) in list(self._gates.items()):
            if end <= now:
                gate.set()
                del self._gates[occ]


@dataclass
class Node:
    """Every mode on one store; ``workers`` claim through their own store connections."""

    clock: ManualClock
    store: Store
    ops: Ops
    materializer: Materializer
    relay: Relay
    leader: Leader
    workers: list[Worker]
    runner: GatedRunner
    claiming: bool = True
    batch: int = 100
    claims: list[list[str]] = field(default_factory=list)  # occurrence ids of each claim batch

    async def cycle(self) -> None:
        """Jobs that are over end; materializer, relay and leader tick; workers claim
        (side by side) and start what they got; jobs that take no time end."""
        await self._settle()
        while await self.materializer.tick():
            pass
        while await self.relay.tick():
            pass
        await self.leader.tick()
        if self.claiming:
            now = self.clock.now()
            batches = await asyncio.gather(
                *(w.store.claim(("default",), w.settings.worker_id, self.batch, LEASE, now) for w in self.workers)
            )
            for worker, claims in zip(self.workers, batches, strict=True):
                self.claims.append([c.occurrence_id for c in claims])
                for claim in claims:
                    worker._start(claim)
        await self._settle()

    async def _settle(self) -> None:
        self.runner.release(self.clock.now())
        for _ in range(3):  # started tasks reach their gate or finish
            await asyncio.sleep(0)
        for worker in self.workers:
            await worker._flush_all()

    async def advance(self, delta: timedelta, step: timedelta = timedelta(seconds=30)) -> None:
        end = self.clock.now() + delta
        while self.clock.now() < end:
            self.clock.advance(min(step, end - self.clock.now()))
            await self.cycle()

    async def occurrences(self, name: str, tenant: str = "default") -> list[Occurrence]:
        schedule = await self.ops.get(name, tenant)
        found = await self.store.list_occurrences(schedule.id, 10_000)
        return sorted(found, key=lambda o: (o.scheduled_for, o.version))


class MakeNode(Protocol):
    """The ``make_node`` fixture: a new node on the test's store, its clock at ``start``."""

    async def __call__(self, start: datetime = ..., workers: int = ...) -> Node: ...


@pytest.fixture
async def make_node(store_backend: Backend, tmp_path: Path) -> AsyncIterator[MakeNode]:
    coords: list[LocalCoordinator] = []

    async def make(start: datetime = T0, workers: int = 1) -> Node:
        clock = ManualClock(start)
        store = await store_backend.open_store()
        coord = LocalCoordinator(store, tmp_path / "clockd.lock", "n1", shard_count=SHARDS)
        await coord.start(lead=True, materialize=True, modes=("leader", "materializer", "relay", "worker"))
        coords.append(coord)
        runner = GatedRunner(clock)
        crew = [
            Worker(
                await store_backend.open_store(),
                runner,
                clock,
                WorkerSettings(concurrency=10_000, lease_for=LEASE, worker_id=f"w{i}"),
            )
            for i in range(workers)
        ]
        return Node(
            clock=clock,
            store=store,
            ops=Ops(store, clock, shard_count=SHARDS),
            materializer=Materializer(store, coord, clock, MaterializerSettings(horizon=2 * MIN)),
            relay=Relay(store, clock),
            leader=Leader(store, coord, clock, LeaderSettings(sweep_every=0)),
            workers=crew,
            runner=runner,
        )

    yield make
    for coord in coords:
        await coord.stop()


def cron(name: str, expr: str, **kw: Unpack[Settings]) -> ScheduleDef:
    return ScheduleDef(name=name, kind=ScheduleKind.CRON, expr=expr, tz="UTC", target=NoopTarget(), **kw)


def minutes(occurrences: list[Occurrence], state: OccurrenceState, base: datetime = T0) -> list[int]:
    """The instants (minutes after ``base``) of the occurrences in ``state``."""
    return [int((o.scheduled_for - base) / MIN) for o in occurrences if o.state is state]


# -- misfire: a 40-minute outage over */5 -------------------------------------------------------


@pytest.mark.parametrize(
    ("misfire", "limit", "missed", "succeeded"),
    [
        (MisfirePolicy.SKIP, 10, [5, 10, 15, 20, 25, 30, 35, 40], [45, 50]),
        (MisfirePolicy.FIRE_ONCE, 10, [5, 10, 15, 20, 25, 30, 35], [40, 45, 50]),
        (MisfirePolicy.CATCH_UP, 3, [5, 10, 15, 20, 25], [30, 35, 40, 45, 50]),
        (MisfirePolicy.CATCH_UP, 10, [], [5, 10, 15, 20, 25, 30, 35, 40, 45, 50]),
    ],
)
async def test_a_40_minute_outage_over_every_5_minutes(
    make_node: MakeNode, misfire: MisfirePolicy, limit: int, missed: list[int], succeeded: list[int]
) -> None:
    """The whole node is down from 23:03 to 23:43; max_lateness 2m. At 23:03 the 23:05
    instant was already materialized (in the outbox): after the outage the relay queues
    it and the leader's sweep judges it; the materializer plans 23:10-23:40 late. Both
    apply the same policy, so the outcome is one rule: skip runs nothing late, fire_once
    only 23:40, catch_up the latest ``limit``."""
    node = await make_node()
    await node.ops.add(cron("five", "*/5 * * * *", misfire=misfire, max_lateness=2 * MIN, catch_up_limit=limit))
    await node.advance(3 * MIN)
    assert await node.occurrences("five") != []  # 23:05 planned ahead, not yet run
    node.clock.advance(40 * MIN)  # nothing runs: no tick, no claim
    await node.cycle()
    await node.advance(7 * MIN)  # until 23:50
    occ = await node.occurrences("five")
    assert minutes(occ, OccurrenceState.MISSED) == missed
    assert minutes(occ, OccurrenceState.SUCCEEDED) == succeeded
    assert len(occ) == len(missed) + len(succeeded)  # nothing else, nothing twice
    for o in occ:
        if o.state is OccurrenceState.MISSED:
            assert o.reason is not None and f"misfire policy {misfire}" in o.reason and "max_lateness 2m" in o.reason


async def test_catch_up_runs_are_paced_at_the_tenants_catch_up_rate(make_node: MakeNode) -> None:
    node = await make_node()
    await node.ops.set_tenant("default", catch_up_rate=2)  # one late run every 30 s
    await node.ops.add(cron("five", "*/5 * * * *", misfire=MisfirePolicy.CATCH_UP, max_lateness=2 * MIN))
    node.clock.advance(43 * MIN)
    await node.advance(5 * MIN, step=timedelta(seconds=10))
    late = [(c.scheduled_for, node.runner.spans[c.occurrence_id][0]) for c in node.runner.calls]
    catch_up = sorted(start for due, start in late if due <= T0 + 40 * MIN)  # 23:05 … 23:40
    assert len(catch_up) == 8
    assert catch_up[0] == T0 + 43 * MIN + timedelta(seconds=10)  # the first cycle after the outage
    assert {b - a for a, b in itertools.pairwise(catch_up)} == {timedelta(seconds=30)}
    on_time = [start for due, start in late if due == T0 + 45 * MIN]
    assert on_time == [T0 + 45 * MIN]  # on-time runs are not held back by the catch-up


# -- overlap: a 2-hour job on an hourly schedule, two workers racing ---------------------------------


@pytest.mark.parametrize(
    ("overlap", "succeeded", "skipped", "running", "waiting"),
    [
        (OverlapPolicy.ALLOW, [0, 60, 120], [], [180, 240], []),
        (OverlapPolicy.SKIP, [0, 120], [60, 180], [240], []),
        (OverlapPolicy.QUEUE_ONE, [0, 60], [180], [120], [240]),
    ],
)
async def test_a_two_hour_job_on_an_hourly_schedule(
    make_node: MakeNode,
    overlap: OverlapPolicy,
    succeeded: list[int],
    skipped: list[int],
    running: list[int],
    waiting: list[int],
) -> None:
    """00:00 to 04:00, a job that takes 2 h every hour, two workers claiming side by side
    each minute. skip: a run due while one runs is SKIPPED_OVERLAP; queue_one: one waits
    and starts when the running one ends, the next due meanwhile is skipped."""
    start = T0 + HOUR - 5 * MIN  # 23:55; the first run is at midnight
    node = await make_node(start, workers=2)
    node.runner.durations["hourly"] = 2 * HOUR
    await node.ops.add(cron("hourly", "0 * * * *", overlap=overlap))
    midnight = T0 + HOUR
    max_running = 0
    while node.clock.now() < midnight + 4 * HOUR:
        await node.advance(MIN, step=MIN)
        now_running = [o for o in await node.occurrences("hourly") if o.state is OccurrenceState.RUNNING]
        max_running = max(max_running, len(now_running))
    occ = await node.occurrences("hourly")
    assert minutes(occ, OccurrenceState.SUCCEEDED, midnight) == succeeded
    assert minutes(occ, OccurrenceState.SKIPPED_OVERLAP, midnight) == skipped
    assert minutes(occ, OccurrenceState.RUNNING, midnight) == running
    waiters = [o for o in occ if o.state is OccurrenceState.ENQUEUED]
    assert minutes(waiters, OccurrenceState.ENQUEUED, midnight) == waiting
    assert max_running == (2 if overlap is OverlapPolicy.ALLOW else 1)
    if overlap is not OverlapPolicy.ALLOW:
        # Atomic: no two runs of the schedule ever overlapped, whichever worker ran them.
        spans = sorted(node.runner.spans.values())
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))
        for o in occ:
            if o.state is OccurrenceState.SKIPPED_OVERLAP:
                assert o.reason is not None
                assert "still running" in o.reason or "already waiting" in o.reason
    # Each run started exactly once, by one of the two workers.
    started = [c.occurrence_id for c in node.runner.calls]
    assert len(started) == len(set(started))


# -- versioned update --------------------------------------------------------------------------------


async def test_update_while_one_runs_and_two_are_queued(make_node: MakeNode) -> None:
    """23:01 starts (a 10-minute job); 23:02 and 23:03 wait in the queue (no worker
    claims). The update to version 2 cancels them and what was planned ahead, re-planning
    the instants */2 still has; 23:01 finishes under version 1; later runs are version 2;
    no instant runs twice."""
    node = await make_node()
    node.runner.durations["minutely"] = 10 * MIN
    await node.ops.add(cron("minutely", "* * * * *"))
    await node.advance(MIN)  # 23:01: the first run starts
    node.claiming = False
    await node.advance(2 * MIN)  # 23:03: 23:02 and 23:03 queued, 23:04 and 23:05 planned ahead
    before = await node.occurrences("minutely")
    # Due and waiting: direct_dispatch queues what is planned ahead too (ENQUEUED, visible
    # at its instant), so "queued" here means ENQUEUED and due.
    queued = [o for o in before if o.state is OccurrenceState.ENQUEUED and o.scheduled_for <= node.clock.now()]
    assert minutes(queued, OccurrenceState.ENQUEUED) == [2, 3]
    change = await node.ops.update("minutely", cron("minutely", "*/2 * * * *"))
    assert change.schedule.version == 2
    assert [o.scheduled_for for o in change.running] == [T0 + MIN]
    assert change.canceled >= 2  # the two queued, and whatever the horizon planned ahead
    node.runner.durations.pop("minutely")  # version 2's runs are quick; 23:01 still takes 10 minutes
    node.claiming = True
    await node.advance(12 * MIN)
    occ = await node.occurrences("minutely")
    first = next(o for o in occ if o.scheduled_for == T0 + MIN)
    assert (first.state, first.version) == (OccurrenceState.SUCCEEDED, 1)
    assert all(o.state is OccurrenceState.CANCELED for o in occ if o.version == 1 and o is not first)
    for o in queued:
        assert next(x for x in occ if x.id == o.id).state is OccurrenceState.CANCELED
    v2 = [o for o in occ if o.version == 2]
    assert v2 and all(o.scheduled_for.minute % 2 == 0 for o in v2)
    # The queued 23:02 and the planned-ahead 23:04 were re-planned under version 2 (issue
    # 15 item 1: an edit keeps the next runs); 23:03 and 23:05 stay canceled (*/2 skips them).
    assert min(o.scheduled_for for o in v2) == T0 + 2 * MIN
    assert {o.scheduled_for for o in v2} >= {T0 + 2 * MIN, T0 + 4 * MIN}
    live = [o for o in occ if o.state is not OccurrenceState.CANCELED]
    assert len({o.scheduled_for for o in live}) == len(live)  # no instant runs twice
    assert all(o.state is OccurrenceState.SUCCEEDED for o in v2 if o.scheduled_for <= node.clock.now() - MIN)


# -- dead letters ------------------------------------------------------------------------------------


async def test_a_permanent_exit_code_goes_dead_and_replay_keeps_the_id(make_node: MakeNode) -> None:
    node = await make_node()
    node.runner.exit_codes[("fragile", 1)] = 64
    retry = RetryPolicy(retries=5, permanent_exit_codes=(2, 64))
    await node.ops.add(cron("fragile", "0 0 * * *", retry=retry))
    await node.advance(HOUR + MIN)  # 00:00 runs and exits 64
    [dead] = await node.ops.dead_letters("fragile")
    assert dead.state is OccurrenceState.DEAD and dead.attempts == 1 and dead.exit_code == 64
    assert dead.last_error is not None and "exit code 64" in dead.last_error
    replayed = await node.ops.replay(dead.id[:8])
    assert (replayed.id, replayed.state) == (dead.id, OccurrenceState.ENQUEUED)
    await node.advance(MIN)
    occ = await node.ops.occurrence(dead.id)
    assert (occ.state, occ.attempts) == (OccurrenceState.SUCCEEDED, 2)
    attempts = await node.store.list_attempts(dead.id)
    assert [(a.number, a.outcome, a.exit_code) for a in attempts] == [
        (1, AttemptOutcome.FAILED, 64),
        (2, AttemptOutcome.SUCCEEDED, 0),
    ]
    assert [c.occurrence_id for c in node.runner.calls] == [dead.id, dead.id]
    assert await node.ops.dead_letters("fragile") == []


# -- tenants -----------------------------------------------------------------------------------------


async def test_a_create_over_the_tenant_quota_is_refused(make_node: MakeNode) -> None:
    node = await make_node()
    await node.ops.set_tenant("acme", max_schedules=2)
    await node.ops.add(cron("a", "* * * * *", tenant="acme"))
    await node.ops.add(cron("b", "* * * * *", tenant="acme"))
    with pytest.raises(QuotaExceeded, match="tenant acme is at its limit of 2 active schedules"):
        await node.ops.add(cron("c", "* * * * *", tenant="acme"))
    await node.ops.add(cron("c", "* * * * *"))  # the default tenant has no limit
    await node.ops.set_tenant("acme", max_schedules=None)
    await node.ops.add(cron("c", "* * * * *", tenant="acme"))


async def test_a_10000_trigger_burst_does_not_delay_another_tenant(make_node: MakeNode) -> None:
    """10,000 schedules of tenant acme and one of tenant beta fire at midnight. The first
    claim batch (100) already holds beta's run: it starts at midnight, not after 10,000
    others. acme's running cap (50) holds, the rest of its burst waits in the queue."""
    start = T0 + HOUR - 2 * MIN
    node = await make_node(start)
    node.claiming = False
    await node.ops.set_tenant("acme", max_running=50)
    node.runner.durations.update({"burst": 10 * MIN})
    midnight = T0 + HOUR
    creates = []
    for i in range(10_000):
        sid = new_schedule_id()
        d = cron(f"burst{i}", "0 * * * *", tenant="acme")
        creates.append(NewSchedule(sid, d, shard_of(sid, SHARDS), midnight))
    await node.store.apply_schedules(creates, [], start)
    await node.ops.add(cron("single", "0 * * * *", tenant="beta"))
    node.clock.advance(2 * MIN)  # midnight: everything is due at once
    await node.cycle()
    assert (await node.store.backlog(midnight)).queued == 10_001
    node.claiming = True
    await node.cycle()
    first_batch = set(node.claims[0])
    [beta] = await node.occurrences("single", "beta")
    assert beta.id in first_batch
    assert beta.state is OccurrenceState.SUCCEEDED
    assert beta.started_at is not None and beta.started_at - beta.scheduled_for <= timedelta(seconds=2)
    backlog = await node.store.backlog(midnight)
    assert backlog.running == 50  # acme's cap; the other 9,950 wait
    assert backlog.queued == 9_950


# -- pause and resume ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("from_", "missed", "succeeded"),
    [
        (ResumeFrom.NOW, [], [45, 50]),
        (ResumeFrom.PAUSED_AT, [5, 10, 15, 20, 25, 30], [35, 40, 45, 50]),
    ],
)
async def test_resume_from_now_or_from_the_pause(
    make_node: MakeNode, from_: ResumeFrom, missed: list[int], succeeded: list[int]
) -> None:
    """*/5, paused at 23:02, resumed at 23:42 (fire_once, max_lateness 10m). From now:
    the paused period leaves no trace and never bursts. From the pause: the paused
    period is planned through the misfire policy — too late ones MISSED with the
    reason, the ones still within max_lateness run."""
    node = await make_node()
    await node.ops.add(cron("five", "*/5 * * * *"))
    await node.advance(2 * MIN)
    await node.ops.pause("five")
    await node.advance(40 * MIN, step=5 * MIN)
    assert [o for o in await node.occurrences("five") if o.version > 1] == []
    await node.ops.resume("five", from_=from_)
    await node.advance(8 * MIN)  # until 23:50
    occ = [o for o in await node.occurrences("five") if o.state is not OccurrenceState.CANCELED]
    assert minutes(occ, OccurrenceState.MISSED) == missed
    assert minutes(occ, OccurrenceState.SUCCEEDED) == succeeded
    assert len(occ) == len(missed) + len(succeeded)
