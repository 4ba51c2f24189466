"""While every shard is planned well ahead, the materializer plans in full every
``full_every`` seconds (2 s) and the ticks between only probe: nothing is written for
schedules already planned, while a schedule created (or a shard taken over, or a wall
clock stepped forward) in between is planned at the next tick, as before."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from clockd.core.model import ScheduleKind
from clockd.modes.materializer import Materializer, MaterializerSettings
from clockd.store import Store

from .pipeline import T0, Pipeline, pipeline
from .support import StoreProxy, add_schedule

__all__ = ["pipeline"]  # the fixture, imported for pytest

SEC = timedelta(seconds=1)
HALF = SEC / 2
HORIZON = timedelta(minutes=2)


class Writes(StoreProxy):
    """The store under test, counting ``materialize`` calls (the materializer's writes)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.count = 0

    async def materialize(self, fence: Any, occurrences: Any, cursors: Any, now: datetime, **kw: Any) -> Any:
        self.count += 1
        return await self.store.materialize(fence, occurrences, cursors, now, **kw)


async def last_planned(p: Pipeline, schedule_id: str) -> datetime:
    return max(o.scheduled_for for o in await p.store.list_occurrences(schedule_id, limit=500))


async def caught_up(p: Pipeline) -> tuple[Materializer, Writes, str]:
    every = await add_schedule(p.store, "every", next_run_at=T0, shard=0, kind=ScheduleKind.EVERY, expr="1s")
    writes = Writes(p.store)
    materializer = Materializer(cast(Store, writes), p.coord, p.clock, MaterializerSettings(horizon=HORIZON))
    await materializer.tick()  # planned to the horizon: not caught up before it
    await materializer.tick()  # caught up: the next full tick waits 2 s
    assert await last_planned(p, every.id) == T0 + HORIZON
    return materializer, writes, every.id


async def test_between_full_ticks_nothing_is_written_for_schedules_already_planned(pipeline: Pipeline) -> None:
    p = pipeline
    materializer, writes, every = await caught_up(p)
    before = writes.count

    for _ in range(3):  # 1.5 s: one instant a second entered the horizon meanwhile
        p.clock.advance(HALF)
        assert await materializer.tick() is False
    assert writes.count == before
    assert await last_planned(p, every) == T0 + HORIZON

    p.clock.advance(HALF)  # 2 s after the last full tick
    await materializer.tick()
    assert writes.count == before + 1
    assert await last_planned(p, every) == T0 + 2 * SEC + HORIZON


async def test_a_schedule_created_between_full_ticks_is_planned_at_the_next_tick(pipeline: Pipeline) -> None:
    p = pipeline
    materializer, writes, _ = await caught_up(p)
    before = writes.count

    p.clock.advance(HALF)
    new = await add_schedule(p.store, "new", next_run_at=T0 + SEC, shard=1, kind=ScheduleKind.EVERY, expr="10s",
                             now=T0)  # fmt: skip
    await materializer.tick()  # a full tick, 1.5 s before the next was due
    assert writes.count > before
    occurrences = await p.store.list_occurrences(new.id, limit=50)
    assert min(o.scheduled_for for o in occurrences) == T0 + SEC


async def test_a_wall_clock_stepped_forward_gets_a_full_tick_at_once(pipeline: Pipeline) -> None:
    p = pipeline
    materializer, _, every = await caught_up(p)

    p.clock.set_wall(T0 + 10 * SEC)  # the monotonic clock has not moved
    await materializer.tick()
    assert await last_planned(p, every) == T0 + 10 * SEC + HORIZON
