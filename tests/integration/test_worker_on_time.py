"""An idle worker starts a run at its time, not at its next poll.

Runs are queued ahead of their time (the materializer writes them minutes before). An idle
worker used to claim every ``poll`` seconds, so a run due at 10:00:00.000 started up to a
poll later (0.1 s by default: ~50 ms on average, a few % of the 20,000 drill's p99). It now
asks the store when the next queued row becomes visible and wakes then. A real SQLite
store and the real clock; the poll is made long (30 s) so that only the wake can start it.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from clockd.core.clock import SystemClock
from clockd.modes.worker import Worker, WorkerSettings
from clockd.store import CursorAdvance
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
