"""The materializer plans in strides (clockd.core.planning.stride_end): a due schedule is
planned past the horizon to the end of its stride, so its cursor moves once per stride
instead of once per instant, while every instant within the horizon is always written.
Over both stores, on a manual clock (the stride itself: tests/unit/test_planning_strides.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.modes.materializer import Materializer, MaterializerSettings

from .pipeline import Pipeline, cron, pipeline

__all__ = ["pipeline"]  # the fixture

SEC = timedelta(seconds=1)
HORIZON = timedelta(minutes=2)


async def _cursor_and_last(p: Pipeline, name: str) -> tuple[datetime, datetime]:
    """The schedule's cursor and the latest instant written for it."""
    schedule = await p.ops.get(name)
    assert schedule.next_run_at is not None
    runs = await p.store.list_occurrences(schedule.id, limit=1000)
    return schedule.next_run_at, max(o.scheduled_for for o in runs)


async def test_a_ten_second_job_moves_its_cursor_once_per_stride_and_keeps_the_horizon(pipeline: Pipeline) -> None:
    """Every 10 s for 6 minutes, ticked every 5 s: planned to the horizon alone, the
    cursor moved every other tick (one instant each, 36 moves); in strides of half the
    horizon it moves once a minute, and at every tick every instant up to now + horizon
    is written and none beyond its stride."""
    await pipeline.ops.add(ScheduleDef(name="ten", kind=ScheduleKind.EVERY, expr="10s", tz="UTC", target=NoopTarget()))
    stride = HORIZON / 2
    cursors: set[datetime] = set()
    for _ in range(72):
        while await pipeline.materializer.tick():
            pass
        now = pipeline.clock.now()
        cursor, last = await _cursor_and_last(pipeline, "ten")
        cursors.add(cursor)
        assert cursor > now + HORIZON, "an instant within the horizon is not written"
        assert last <= now + HORIZON + stride, "written past the schedule's stride"
        pipeline.clock.advance(5 * SEC)
    assert len(cursors) <= 8, f"the cursor moved {len(cursors)} times in 6 minutes"


async def test_stride_zero_plans_to_the_horizon_only(pipeline: Pipeline) -> None:
    pipeline.materializer = Materializer(
        pipeline.store,
        pipeline.coord,
        pipeline.clock,
        MaterializerSettings(horizon=HORIZON, stride=timedelta(0)),
    )
    await pipeline.ops.add(cron("minutely", "* * * * *"))
    await pipeline.materializer.tick()
    cursor, last = await _cursor_and_last(pipeline, "minutely")
    assert last == pipeline.clock.now() + HORIZON and cursor == last + timedelta(minutes=1)
