"""The materializer plans in strides (clockd.core.planning.stride_end): a due schedule is
planned past the horizon to the end of its stride, so its cursor moves once per stride
instead of once per instant, while every instant within the horizon is always written.
Over both stores, on a manual clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.core.planning import stride_end
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


@given(
    st.text(min_size=1, max_size=40),
    st.integers(min_value=0, max_value=10**12),
    st.integers(min_value=1, max_value=3600),
)
def test_a_stride_ends_after_the_reach_within_one_stride_and_the_next_one_stride_later(
    schedule_id: str, offset_ms: int, stride_s: int
) -> None:
    reach = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(milliseconds=offset_ms)
    stride = timedelta(seconds=stride_s)
    end = stride_end(schedule_id, reach, stride)
    assert reach < end <= reach + stride
    assert stride_end(schedule_id, reach, stride) == end  # the same on every node, every call
    # Any later reach up to that end (the cursor passed it) gives the very next stride.
    assert stride_end(schedule_id, end, stride) == end + stride
    assert stride_end(schedule_id, end - timedelta(microseconds=1), stride) == end


def test_the_strides_of_many_schedules_end_spread_over_the_stride() -> None:
    """Schedules planned together (all of them, at a start) must not come due together
    again: their stride ends fall evenly over the stride, not in a burst."""
    reach = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    stride = timedelta(seconds=10)
    ends = [stride_end(f"schedule-{i}", reach, stride) for i in range(10_000)]
    per_second = [0] * 10
    for end in ends:
        per_second[min(9, int((end - reach) / SEC))] += 1
    assert max(per_second) < 1_200 and min(per_second) > 800, per_second
