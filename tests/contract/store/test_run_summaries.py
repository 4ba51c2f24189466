"""``clockctl list``'s NEXT RUN, LAST RUN and RESULT (issue 15 items 2 and 12), over both stores:
the next run is the earliest planned occurrence still waiting, not the materializer's cursor
(which runs a horizon ahead), and the last run is the latest one that started."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from clockd.core.model import OccurrenceState, ScheduleKind
from clockd.services.ops import next_run

from .pipeline import MIN, T0, Pipeline, cron, pipeline

__all__ = ["pipeline"]  # the fixture


async def test_next_run_is_the_earliest_waiting_occurrence_not_the_cursor(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("minutely", "* * * * *"))
    await pipeline.ops.add(dataclasses.replace(cron("fast", "10s"), kind=ScheduleKind.EVERY))
    await pipeline.advance(3 * MIN)  # three minutes ran; the materializer planned two ahead
    now = pipeline.clock.now()
    schedules = await pipeline.ops.list_schedules()
    summaries = await pipeline.ops.summaries(schedules)
    by_name = {s.name: s for s in schedules}
    minutely = by_name["minutely"]
    assert minutely.next_run_at is not None and minutely.next_run_at > now + MIN  # the cursor is ahead
    assert next_run(minutely, summaries[minutely.id]) == T0 + 4 * MIN  # what runs next
    fast = by_name["fast"]
    fast_next = next_run(fast, summaries[fast.id])
    assert fast_next is not None
    assert now < fast_next <= now + timedelta(seconds=10)
    last = summaries[minutely.id]
    assert last.last_scheduled_for == T0 + 3 * MIN and last.last_state is OccurrenceState.SUCCEEDED
    assert last.last_started_at is not None


async def test_a_schedule_that_never_ran_has_no_last_run_and_a_paused_one_no_next(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("yearly", "0 0 1 1 *"))
    await pipeline.ops.add(cron("held", "* * * * *"))
    await pipeline.cycle()
    await pipeline.ops.pause("held")
    schedules = {s.name: s for s in await pipeline.ops.list_schedules()}
    summaries = await pipeline.ops.summaries(list(schedules.values()))
    yearly = summaries[schedules["yearly"].id]
    assert yearly.last_started_at is None and yearly.last_state is None
    assert next_run(schedules["yearly"], yearly) == schedules["yearly"].next_run_at  # nothing planned yet
    assert next_run(schedules["held"], summaries[schedules["held"].id]) is None
