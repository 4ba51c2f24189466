"""The four modes in one process on a real SQLite store, driven by a manual clock (no sleeps).

Each mode's ``tick`` is called directly, so the test decides exactly when time moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Unpack

import pytest

from clockd.coord.local import LocalCoordinator
from clockd.core.clock import ManualClock
from clockd.core.model import (
    AttemptOutcome,
    MisfirePolicy,
    NoopTarget,
    OccurrenceState,
    RetryPolicy,
    ScheduleDef,
    ScheduleKind,
)
from clockd.modes.leader import Leader
from clockd.modes.materializer import Materializer, MaterializerSettings
from clockd.modes.relay import Relay
from clockd.modes.worker import Worker, WorkerSettings
from clockd.runner import RunRequest, RunResult
from clockd.services.ops import Ops
from clockd.store.sqlite.store import SqliteStore
from tests.contract.store.support import Settings

T0 = datetime(2026, 3, 28, 23, 0, tzinfo=UTC)  # the night Europe/Paris springs forward


@dataclass
class ScriptedRunner:
    """Runs nothing; returns the scripted outcome for each (schedule, attempt)."""

    fail_attempts: set[int] = field(default_factory=set)
    calls: list[RunRequest] = field(default_factory=list)

    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        self.calls.append(request)
        if request.attempt in self.fail_attempts:
            return RunResult(outcome=AttemptOutcome.FAILED, exit_code=1, output="boom\n")
        return RunResult(outcome=AttemptOutcome.SUCCEEDED, exit_code=0, output="ok\n")


@dataclass
class Node:
    clock: ManualClock
    store: SqliteStore
    ops: Ops
    materializer: Materializer
    relay: Relay
    worker: Worker
    leader: Leader
    runner: ScriptedRunner

    async def cycle(self) -> None:
        """One pass of every mode, then let the worker's jobs finish and be recorded."""
        while await self.materializer.tick():
            pass
        await self.relay.tick()
        await self.leader.tick()
        claims = await self.store.claim(("default",), "w1", 100, timedelta(seconds=30), self.clock.now())
        for claim in claims:
            self.worker._start(claim)
        tasks = [e.task for e in self.worker.running.values() if e.task]
        if tasks:
            await asyncio.gather(*tasks)
        await self.worker._flush_all()

    async def advance(self, delta: timedelta, step: timedelta = timedelta(seconds=30)) -> None:
        end = self.clock.now() + delta
        while self.clock.now() < end:
            self.clock.advance(min(step, end - self.clock.now()))
            await self.cycle()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    clock = ManualClock(T0)
    store = SqliteStore(tmp_path / "clockd.db")
    await store.open()
    coord = LocalCoordinator(store, tmp_path / "clockd.db.lock", "n1", shard_count=4)
    await coord.start(lead=True, materialize=True, modes=("leader", "materializer", "relay", "worker"))
    runner = ScriptedRunner()
    node = Node(
        clock=clock,
        store=store,
        ops=Ops(store, clock, shard_count=4),
        materializer=Materializer(store, coord, clock, MaterializerSettings(horizon=timedelta(minutes=2))),
        relay=Relay(store, clock),
        worker=Worker(store, runner, clock, WorkerSettings(concurrency=100)),
        leader=Leader(store, coord, clock),
        runner=runner,
    )
    yield node
    await coord.stop()
    await store.close()


def cron(name: str, expr: str, tz: str = "UTC", **kw: Unpack[Settings]) -> ScheduleDef:
    return ScheduleDef(name=name, kind=ScheduleKind.CRON, expr=expr, tz=tz, target=NoopTarget(), **kw)


async def test_dst_gap_job_is_skipped_and_runs_next_day(node: Node) -> None:
    await node.ops.add(cron("paris", "30 2 * * *", "Europe/Paris"))
    await node.advance(timedelta(hours=28), step=timedelta(minutes=10))
    occ = await node.store.list_occurrences(None, 10)
    assert [o.scheduled_for.isoformat() for o in occ] == ["2026-03-30T00:30:00+00:00"]
    assert occ[0].state is OccurrenceState.SUCCEEDED


async def test_every_instant_runs_exactly_once(node: Node) -> None:
    await node.ops.add(cron("often", "*/5 * * * *"))
    await node.advance(timedelta(hours=1))
    occ = await node.store.list_occurrences(None, 100)
    instants = sorted(o.scheduled_for for o in occ)
    assert len(instants) == len(set(instants)) == 12
    assert all(o.state is OccurrenceState.SUCCEEDED and o.attempts == 1 for o in occ)
    assert len(node.runner.calls) == 12


async def test_failed_attempt_is_retried_with_backoff_and_same_id(node: Node) -> None:
    node.runner.fail_attempts = {1}
    await node.ops.add(cron("retry", "0 * * * *", retry=RetryPolicy(retries=2, backoff=timedelta(seconds=20))))
    await node.advance(timedelta(minutes=62), step=timedelta(seconds=10))
    occ = await node.store.list_occurrences(None, 10)
    assert len(occ) == 1 and occ[0].state is OccurrenceState.SUCCEEDED and occ[0].attempts == 2
    attempts = await node.store.list_attempts(occ[0].id)
    assert [a.outcome for a in attempts] == [AttemptOutcome.FAILED, AttemptOutcome.SUCCEEDED]
    assert {c.occurrence_id for c in node.runner.calls} == {occ[0].id}


async def test_outage_with_fire_once_runs_only_the_latest_missed_instant(node: Node) -> None:
    await node.ops.add(cron("five", "*/5 * * * *", misfire=MisfirePolicy.FIRE_ONCE))
    node.clock.advance(timedelta(minutes=40))  # the scheduler was down
    await node.cycle()
    occ = sorted(await node.store.list_occurrences(None, 100), key=lambda o: o.scheduled_for)
    states = [o.state for o in occ]
    assert states.count(OccurrenceState.SUCCEEDED) >= 1
    late = [o for o in occ if o.scheduled_for < node.clock.now() - timedelta(minutes=10)]
    assert [o.state for o in late[:-1]] == [OccurrenceState.MISSED] * (len(late) - 1)
    assert all(o.reason and "max_lateness" in o.reason for o in late[:-1])


async def test_pause_cancels_pending_and_resume_starts_from_now(node: Node) -> None:
    await node.ops.add(cron("minutely", "* * * * *"))
    await node.advance(timedelta(minutes=3))
    change = await node.ops.pause("minutely")
    assert change.canceled >= 1  # the horizon had planned ahead
    await node.advance(timedelta(minutes=30), step=timedelta(minutes=5))
    resumed_at = node.clock.now()
    await node.ops.resume("minutely")
    await node.advance(timedelta(minutes=3))
    occ = await node.store.list_occurrences(None, 200)
    ran = [o for o in occ if o.state is OccurrenceState.SUCCEEDED]
    paused_window = [o for o in ran if T0 + timedelta(minutes=4) < o.scheduled_for <= resumed_at]
    assert paused_window == []
    assert any(o.scheduled_for > resumed_at for o in ran)


async def test_clock_skew_makes_leader_and_materializer_step_down(node: Node) -> None:
    from clockd.modes.clockwatch import ClockWatch

    # The manual clock says 2026-03-28; the store's clock (SQLite: this host's) says otherwise.
    watch = ClockWatch(node.store, node.clock, timedelta(seconds=2))
    offset = await watch.measure()
    assert abs(offset) > 2 and watch.ok is False
    node.materializer.clock_watch = watch
    await node.ops.add(cron("skewed", "* * * * *"))
    node.clock.advance(timedelta(minutes=5))
    assert await node.materializer.tick() is False
    assert await node.store.list_occurrences(None, 10, None) == []


async def test_periodic_reconcile_is_skipped_above_the_schedule_limit(node: Node) -> None:
    from clockd.modes.sampler import Sampler, SamplerSettings

    await node.ops.add(cron("a", "* * * * *"))
    await node.ops.add(cron("b", "* * * * *"))
    small = Sampler(node.store, node.clock, SamplerSettings(reconcile_max_schedules=1))
    assert await small.reconcile(node.clock.now()) == -1
    roomy = Sampler(node.store, node.clock, SamplerSettings(reconcile_max_schedules=10))
    assert await roomy.reconcile(node.clock.now()) >= 0
