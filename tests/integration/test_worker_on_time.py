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
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from clockd.core.clock import SystemClock
from clockd.modes.worker import READ_AHEAD_MARGIN, Worker, WorkerSettings
from clockd.store import CursorAdvance, QueuePosition, ReadAhead
from clockd.store.sqlite.store import SqliteStore
from tests.contract.store.support import FENCE, MIN, add_schedule, planned
from tests.harness import until
from tests.integration.test_worker_backpressure import Instant


async def test_an_idle_worker_starts_a_queued_run_at_its_time_not_at_its_next_poll(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "clockd.db")
    await store.open()
    clock = SystemClock()
    try:
        now = clock.now()
        due = now + timedelta(milliseconds=700)
        schedule = await add_schedule(store, "on-time", next_run_at=due, now=now)
        new = planned(schedule, due)
        await store.materialize(FENCE, [new], [CursorAdvance(schedule.id, 1, due, due + MIN)], now)
        assert (await store.relay(due + MIN, 10, now)).moved == 1
        worker = Worker(store, Instant(), clock, WorkerSettings(poll=30.0))
        stopping = asyncio.Event()
        running = asyncio.create_task(worker.run(stopping))
        try:
            await until(lambda: worker.completed == 1, within=10, what="the run started and recorded")
        finally:
            stopping.set()
            await running
        occurrence = await store.get_occurrence(new.id)
        assert occurrence is not None and occurrence.started_at is not None
        late = (occurrence.started_at - due).total_seconds()
        assert 0 <= late < 1.0, f"started {late:+.3f} s from its time"
    finally:
        await store.close()


async def test_an_idle_worker_reads_a_staged_burst_definitions_ahead_and_still_starts_it_on_time(
    tmp_path: Path,
) -> None:
    """A burst of distinct schedules staged in the queue (a top-of-hour): the idle worker
    reads their definitions into the claim cache before they are due, so their claims
    read none, and the runs still start at their time."""
    store = SqliteStore(tmp_path / "clockd.db")
    await store.open()
    clock = SystemClock()
    try:
        now = clock.now()
        due = now + READ_AHEAD_MARGIN + timedelta(milliseconds=1500)
        burst = [await add_schedule(store, f"burst-{i}", next_run_at=due, now=now) for i in range(20)]
        news = [planned(s, due) for s in burst]
        cursors = [CursorAdvance(s.id, 1, due, due + MIN) for s in burst]
        await store.materialize(FENCE, news, cursors, now)
        assert (await store.relay(due + MIN, 100, now)).moved == 20
        worker = Worker(store, Instant(), clock, WorkerSettings(poll=30.0))
        stopping = asyncio.Event()
        running = asyncio.create_task(worker.run(stopping))
        try:
            await until(lambda: worker.completed == 20, within=10, what="the burst started and recorded")
        finally:
            stopping.set()
            await running
        cache = store.definitions
        assert (cache.read_ahead, cache.hits, cache.misses) == (20, 20, 0)
        for new in news:
            occurrence = await store.get_occurrence(new.id)
            assert occurrence is not None and occurrence.started_at is not None
            late = (occurrence.started_at - due).total_seconds()
            assert 0 <= late < 1.0, f"started {late:+.3f} s from its time"
    finally:
        await store.close()


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
    store = _CountingStore(tmp_path / "clockd.db")
    await store.open()
    clock = SystemClock()
    try:
        now = clock.now()
        due = now + READ_AHEAD_MARGIN + timedelta(milliseconds=1800)
        burst = [await add_schedule(store, f"burst-{i}", next_run_at=due, now=now) for i in range(5)]
        await store.materialize(
            FENCE, [planned(s, due) for s in burst], [CursorAdvance(s.id, 1, due, due + MIN) for s in burst], now
        )
        assert (await store.relay(due + MIN, 100, now)).moved == 5
        worker = Worker(store, Instant(), clock, WorkerSettings(poll=0.1))
        stopping = asyncio.Event()
        running = asyncio.create_task(worker.run(stopping))
        try:
            await until(lambda: worker.completed == 5, within=10, what="the burst started and recorded")
        finally:
            stopping.set()
            await running
        assert (store.definitions.read_ahead, store.definitions.misses) == (5, 0)
        assert 1 <= store.read_aheads <= 3, store.read_aheads  # ~18 polls while idle
    finally:
        await store.close()
