"""An idle worker starts a run at its time, not at its next poll.

Runs are queued ahead of their time (the materializer writes them minutes before). An idle
worker used to claim every ``poll`` seconds, so a run due at 10:00:00.000 started up to a
poll later (0.1 s by default: ~50 ms on average, a few % of the 20,000 drill's p99). It now
asks the store when the next queued row becomes visible and wakes then. A real SQLite
store and the real clock; the poll is made long (30 s) so that only the wake can start it.
While it waits, it reads ahead the definitions of what is staged next.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

from clockd.core.clock import SystemClock
from clockd.modes.worker import READ_AHEAD_MARGIN, Worker, WorkerSettings
from clockd.store import CursorAdvance, QueuePosition, ReadAhead
from clockd.store.sqlite.store import SqliteStore
from tests.contract.store.support import FENCE, MIN, add_schedule, planned
from tests.harness import until
from tests.integration.test_worker_backpressure import Instant

S = TypeVar("S", bound=SqliteStore)


@contextlib.asynccontextmanager
async def opened(store: S) -> AsyncIterator[S]:
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def stage(store: SqliteStore, names: Sequence[str], due: datetime, now: datetime) -> list[str]:
    """One occurrence of a new schedule per name, due at ``due`` and queued at ``now``: its ids."""
    schedules = [await add_schedule(store, name, next_run_at=due, now=now) for name in names]
    news = [planned(s, due) for s in schedules]
    await store.materialize(FENCE, news, [CursorAdvance(s.id, 1, due, due + MIN) for s in schedules], now)
    assert (await store.relay(due + MIN, 1000, now)).moved == len(news)
    return [new.id for new in news]


async def run_worker(store: SqliteStore, clock: SystemClock, poll: float, runs: int) -> None:
    """A worker (no-op runner) until it has recorded ``runs`` runs, then stopped."""
    worker = Worker(store, Instant(), clock, WorkerSettings(poll=poll))
    stopping = asyncio.Event()
    running = asyncio.create_task(worker.run(stopping))
    try:
        await until(lambda: worker.completed == runs, within=10, what=f"{runs} run(s) started and recorded")
    finally:
        stopping.set()
        await running


async def assert_started_on_time(store: SqliteStore, ids: Sequence[str], due: datetime) -> None:
    for occurrence_id in ids:
        occurrence = await store.get_occurrence(occurrence_id)
        assert occurrence is not None and occurrence.started_at is not None
        late = (occurrence.started_at - due).total_seconds()
        assert 0 <= late < 1.0, f"started {late:+.3f} s from its time"


async def test_an_idle_worker_starts_a_queued_run_at_its_time_not_at_its_next_poll(tmp_path: Path) -> None:
    clock = SystemClock()
    async with opened(SqliteStore(tmp_path / "clockd.db")) as store:
        now = clock.now()
        due = now + timedelta(milliseconds=700)
        ids = await stage(store, ["on-time"], due, now)
        await run_worker(store, clock, 30.0, 1)
        await assert_started_on_time(store, ids, due)


async def test_an_idle_worker_reads_a_staged_burst_definitions_ahead_and_still_starts_it_on_time(
    tmp_path: Path,
) -> None:
    """A burst of distinct schedules staged in the queue (a top-of-hour): the idle worker
    reads their definitions into the claim cache before they are due, so their claims
    read none, and the runs still start at their time."""
    clock = SystemClock()
    async with opened(SqliteStore(tmp_path / "clockd.db")) as store:
        now = clock.now()
        due = now + READ_AHEAD_MARGIN + timedelta(milliseconds=1500)
        ids = await stage(store, [f"burst-{i}" for i in range(20)], due, now)
        await run_worker(store, clock, 30.0, 20)
        cache = store.definitions
        assert (cache.read_ahead, cache.hits, cache.misses) == (20, 20, 0)
        await assert_started_on_time(store, ids, due)


class _CountingStore(SqliteStore):
    """A real SQLite store that counts the worker's read-ahead calls."""

    read_aheads = 0

    async def read_ahead_definitions(
        self, queues: Sequence[str], after: QueuePosition | None, now: datetime, limit: int
    ) -> ReadAhead:
        self.read_aheads += 1
        return await super().read_ahead_definitions(queues, after, now, limit)


async def test_an_idle_worker_reads_ahead_about_once_a_second_not_at_every_poll(tmp_path: Path) -> None:
    """Caught up with the queue, an idle worker polling every 0.1 s asks again for rows
    staged since about once a second (one more query per poll would double an idle
    worker's load on the database)."""
    clock = SystemClock()
    async with opened(_CountingStore(tmp_path / "clockd.db")) as store:
        now = clock.now()
        due = now + READ_AHEAD_MARGIN + timedelta(milliseconds=1800)
        await stage(store, [f"burst-{i}" for i in range(5)], due, now)
        await run_worker(store, clock, 0.1, 5)
        assert (store.definitions.read_ahead, store.definitions.misses) == (5, 0)
        assert 1 <= store.read_aheads <= 3, store.read_aheads  # ~18 polls while idle
