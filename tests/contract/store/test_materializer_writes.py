"""The materializer writes two shards' batches at once (``writes_in_flight``), each its
own transaction: the next shard's batch is not held back until the previous one commits,
and a write that fails ends the tick without cutting the other one in flight."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta
from typing import Any, cast

import pytest

from clockd.core.model import ScheduleKind
from clockd.errors import StoreUnavailable
from clockd.modes.materializer import Materializer, MaterializerSettings
from clockd.store import Store

from .pipeline import T0, Pipeline, pipeline
from .support import StoreProxy, add_schedule

__all__ = ["pipeline"]  # the fixture, imported for pytest

SEC = timedelta(seconds=1)
# How long a write waits for the next shard's write to start: only a materializer that
# writes one batch at a time ever waits it out.
OVERLAP_WAIT = 5.0
# What one tick plans of each schedule: its cursor's instant, then the 10 s grid of its
# anchor (created at T0 - 1 min) up to the horizon, T0 + 120 s.
PLANNED = 13


class OverlapWatch(StoreProxy):
    """The store under test, its ``materialize`` counting the writes in flight. Each write
    waits (up to OVERLAP_WAIT) until a second one is in flight before it goes on; the write
    whose schedule is ``fail_for``'s then fails as a lost database would."""

    def __init__(self, store: Store, fail_for: str | None = None) -> None:
        super().__init__(store)
        self.fail_for = fail_for
        self.in_flight = 0
        self.most = 0
        self.two = asyncio.Event()

    async def materialize(self, fence: Any, occurrences: Any, cursors: Any, now: datetime, **kw: Any) -> Any:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        if self.in_flight >= 2:
            self.two.set()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(OVERLAP_WAIT):
                    await self.two.wait()
            if self.fail_for is not None and any(c.schedule_id == self.fail_for for c in cursors):
                raise StoreUnavailable("the database went away mid-write")
            return await self.store.materialize(fence, occurrences, cursors, now, **kw)
        finally:
            self.in_flight -= 1


async def planned(p: Pipeline, schedule_id: str) -> int:
    return len(await p.store.list_occurrences(schedule_id, limit=100))


async def two_shards(p: Pipeline) -> tuple[str, str]:
    """Two schedules on shards 0 and 1, each firing every 10 s from T0 + 1 s / 2 s: the
    tick writes shard 0's batch first (its instant is the more urgent), then shard 1's."""
    first = await add_schedule(p.store, "first", next_run_at=T0 + SEC, shard=0, kind=ScheduleKind.EVERY, expr="10s")
    second = await add_schedule(
        p.store, "second", next_run_at=T0 + 2 * SEC, shard=1, kind=ScheduleKind.EVERY, expr="10s"
    )
    return first.id, second.id


async def test_the_next_shards_batch_is_written_while_the_previous_one_is(pipeline: Pipeline) -> None:
    p = pipeline
    first, second = await two_shards(p)
    watch = OverlapWatch(p.store)
    settings = MaterializerSettings(horizon=timedelta(minutes=2))
    materializer = Materializer(cast(Store, watch), p.coord, p.clock, settings)

    async with asyncio.timeout(OVERLAP_WAIT / 2):  # two writes in turn would wait OVERLAP_WAIT
        await materializer.tick()

    assert watch.most == 2
    assert await planned(p, first) == PLANNED
    assert await planned(p, second) == PLANNED


async def test_a_failed_write_ends_the_tick_and_the_other_in_flight_still_commits(pipeline: Pipeline) -> None:
    p = pipeline
    first, second = await two_shards(p)
    watch = OverlapWatch(p.store, fail_for=first)
    settings = MaterializerSettings(horizon=timedelta(minutes=2))
    materializer = Materializer(cast(Store, watch), p.coord, p.clock, settings)

    with pytest.raises(StoreUnavailable):
        await materializer.tick()

    assert watch.most == 2
    assert await planned(p, first) == 0  # its transaction never ran: the cursor stayed
    assert await planned(p, second) == PLANNED  # written beside it, committed whole

    watch.fail_for = None
    await materializer.tick()  # the next tick plans what the failed write left
    assert await planned(p, first) == PLANNED
    assert await planned(p, second) == PLANNED
