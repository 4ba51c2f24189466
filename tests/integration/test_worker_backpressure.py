"""A worker never holds more leases than it can record: when the store is slow to
record completions, the worker stops claiming instead of letting its unrecorded
completions (and the leases they keep alive) grow with the queue.

A real SQLite store; only ``finish`` is held shut by a gate, as a database that is
slow to write would hold it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clockd.core.clock import ManualClock
from clockd.core.model import AttemptOutcome, NoopTarget, OccurrenceState
from clockd.errors import StoreUnavailable
from clockd.modes.clockwatch import ClockWatch
from clockd.modes.worker import Worker, WorkerSettings
from clockd.obs import metrics
from clockd.runner import Runner, RunRequest, RunResult
from clockd.runner.dispatch import DispatchRunner
from clockd.runner.http import HttpRunner
from clockd.runner.process import ProcessRunner
from clockd.store import Completion, CursorAdvance
from clockd.store.sqlite.store import SqliteStore
from tests.contract.store.support import FENCE, MIN, T0, Changes, add_schedule, planned
from tests.harness import until

US = timedelta(microseconds=1)


class SlowToRecord(SqliteStore):
    """The real store, whose ``finish`` waits until the test opens the gate."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = asyncio.Event()

    async def finish(self, completions: Sequence[Completion], now: datetime) -> set[str]:
        await self.gate.wait()
        return await super().finish(completions, now)


def _sample(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


class Instant:
    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        return RunResult(outcome=AttemptOutcome.SUCCEEDED, exit_code=0)


@pytest.mark.parametrize("noop", [False, True], ids=["scripted-runner", "daemon-runner-noop"])
async def test_a_worker_stops_claiming_while_its_completions_wait_to_be_recorded(tmp_path: Path, noop: bool) -> None:
    """Also with the daemon's runner and no-op targets, which it settles without a task
    (``DispatchRunner.settled``): the leases are held the same way, every attempt and
    start lag is counted."""
    clock = ManualClock(T0)
    store = SlowToRecord(tmp_path / "clockd.db")
    await store.open()
    try:
        changes: Changes = {"target": NoopTarget()} if noop else {}
        schedule = await add_schedule(store, "flood", next_run_at=T0, **changes)
        occurrences = [planned(schedule, T0 + i * US) for i in range(50)]
        await store.materialize(FENCE, occurrences, [CursorAdvance(schedule.id, 1, T0, T0 + MIN)], T0 - MIN)
        assert (await store.relay(T0 + MIN, 50, T0)).moved == 50
        clock.advance(MIN)
        succeeded = _sample("clockd_attempts_total", outcome="succeeded")
        lags = _sample("clockd_schedule_lag_seconds_count", step="started")
        runner: Runner = DispatchRunner(ProcessRunner(), HttpRunner()) if noop else Instant()
        worker = Worker(store, runner, clock, WorkerSettings(concurrency=4, flush_batch=2, poll=0.01))
        stopping = asyncio.Event()
        running = asyncio.create_task(worker.run(stopping))
        try:
            # Jobs end at once and their completions wait at the gate: the worker may hold
            # concurrency (4) + flush_batch (2) leases, then it waits.
            await until(
                lambda: not worker._slot_free.is_set() and len(worker.pending) == 6,
                within=10, what="the worker to stop claiming",
            )  # fmt: skip
            backlog = await store.backlog(clock.now())
            assert (backlog.running, backlog.queued) == (6, 44)
            assert worker.running == {}  # every job has ended; only its record waits
            store.gate.set()
            await until(lambda: worker.completed == 50, within=30, what="every job recorded")
        finally:
            store.gate.set()
            stopping.set()
            await running
        assert (await store.backlog(clock.now())).running == 0
        found = await store.list_occurrences(schedule.id, limit=100)
        assert len(found) == 50 and {o.state for o in found} == {OccurrenceState.SUCCEEDED}
        assert _sample("clockd_attempts_total", outcome="succeeded") == succeeded + 50
        assert _sample("clockd_schedule_lag_seconds_count", step="started") == lags + 50
    finally:
        await store.close()


class CountingWatch(ClockWatch):
    """The real clock watch, counting how often the worker consults it."""

    reads = 0

    @property
    def ok(self) -> bool:
        self.reads += 1
        return super().ok


async def test_a_worker_whose_clock_is_off_claims_nothing_early(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "clockd.db")
    await store.open()
    try:
        real = datetime.now(UTC)
        schedule = await add_schedule(store, "later", next_run_at=real)
        due = real + timedelta(minutes=30)
        await store.materialize(FENCE, [planned(schedule, due)], [CursorAdvance(schedule.id, 1, real, due + MIN)], real)
        assert (await store.relay(due + MIN, 10, real)).moved == 1
        clock = ManualClock(real + timedelta(hours=1))  # an hour fast: the job looks due
        watch = CountingWatch(store, clock, timedelta(seconds=2))
        await watch.measure()
        worker = Worker(store, Instant(), clock, WorkerSettings(poll=0.01), clock_watch=watch)
        stopping = asyncio.Event()
        running = asyncio.create_task(worker.run(stopping))
        try:
            await until(
                lambda: watch.reads >= 20 or worker.completed, within=10, what="20 claim rounds or a claimed job"
            )
            assert worker.completed == 0 and worker.running == {}
            assert (await store.backlog(due)).queued == 1  # still queued, claimable at its due time
        finally:
            stopping.set()
            await running
    finally:
        await store.close()


class FailsToRecord(SqliteStore):
    """The real store, whose ``finish`` fails (a database gone) once the test says so."""

    failing = False

    async def finish(self, completions: Sequence[Completion], now: datetime) -> set[str]:
        if self.failing:
            raise StoreUnavailable("the database is gone")
        return await super().finish(completions, now)


async def test_a_stop_ends_within_the_record_grace_while_the_store_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stop must end inside the unit's TimeoutStopSec: the shutdown flush retries a
    failing store for ``record_grace``, then leaves the completions to their leases."""
    clock = ManualClock(T0)
    store = FailsToRecord(tmp_path / "clockd.db")
    await store.open()
    try:
        schedule = await add_schedule(store, "doomed", next_run_at=T0)
        occurrences = [planned(schedule, T0 + i * US) for i in range(3)]
        await store.materialize(FENCE, occurrences, [CursorAdvance(schedule.id, 1, T0, T0 + MIN)], T0 - MIN)
        assert (await store.relay(T0 + MIN, 3, T0)).moved == 3
        clock.advance(MIN)
        store.failing = True
        settings = WorkerSettings(concurrency=4, poll=0.01, heartbeat=3600, record_grace=0.5)
        worker = Worker(store, Instant(), clock, settings)
        stopping = asyncio.Event()
        running = asyncio.create_task(worker.run(stopping))
        await until(lambda: len(worker.pending) == 3, within=10, what="three jobs ended")
        stopping.set()
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(running, timeout=10)
        assert asyncio.get_running_loop().time() - started < 5
        assert [r for r in caplog.records if getattr(r, "action", "") == "unrecorded_at_shutdown"]
        store.failing = False
        assert (await store.backlog(clock.now())).running == 3  # leased: the reaper retries them
    finally:
        await store.close()
