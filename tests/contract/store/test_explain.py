"""``clockctl explain`` (clockd.services.explain) over both stores: one answer per way an instant can
go, each produced by really running the pipeline on a manual clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from clockd.core.model import RetryPolicy
from clockd.services.explain import Explanation, Why, explain_at
from clockd.services.ops import ResumeFrom

from .pipeline import MIN, T0, Pipeline, cron, pipeline

__all__ = ["pipeline"]  # the fixture


async def explain(p: Pipeline, name: str, at: str) -> Explanation:
    return await explain_at(p.store, await p.ops.get(name), at, p.clock.now())


async def test_succeeded_says_attempts_exit_code_and_duration(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("job", "* * * * *"))
    await pipeline.advance(3 * MIN)
    found = await explain(pipeline, "job", "2026-03-28T23:02:00Z")
    assert found.why is Why.SUCCEEDED
    facts = dict(found.facts)
    assert (facts["attempts"], facts["exit code"]) == ("1", "0")
    assert "duration" in facts and found.occurrences[0].scheduled_for == T0 + 2 * MIN
    assert "succeeded (1 attempt, exit code 0" in found.summary


async def test_succeeded_after_a_retry_gives_the_start_of_the_attempt_that_succeeded(pipeline: Pipeline) -> None:
    # The occurrence's started_at is its first attempt's: shown as "started" beside the
    # last attempt's duration, a retried run read as starting 20 s before it did.
    pipeline.runner.fail.add("flaky")
    await pipeline.ops.add(cron("flaky", "*/5 * * * *", retry=RetryPolicy(retries=1, backoff=timedelta(seconds=5))))
    await pipeline.advance(5 * MIN, step=timedelta(seconds=20))  # attempt 1 fails at 23:05:00
    pipeline.runner.fail.discard("flaky")
    await pipeline.advance(timedelta(seconds=20), step=timedelta(seconds=20))  # attempt 2, at 23:05:20
    found = await explain(pipeline, "flaky", "2026-03-28T23:05:00Z")
    assert found.why is Why.SUCCEEDED, found
    facts = dict(found.facts)
    assert facts["attempts"] == "2"
    assert (facts["first started"], facts["started"]) == ("2026-03-28T23:05:00Z", "2026-03-28T23:05:20Z")
    assert [a.started_at for a in found.attempts] == [T0 + 5 * MIN, T0 + 5 * MIN + timedelta(seconds=20)]


async def test_dead_says_how_many_attempts_and_the_last_error(pipeline: Pipeline) -> None:
    pipeline.runner.fail.add("flaky")
    await pipeline.ops.add(cron("flaky", "*/5 * * * *", retry=RetryPolicy(retries=1, backoff=timedelta(seconds=5))))
    await pipeline.advance(8 * MIN, step=timedelta(seconds=20))
    found = await explain(pipeline, "flaky", "2026-03-28T23:05:00Z")
    assert found.why is Why.DEAD, found
    assert dict(found.facts)["attempts"] == "2"
    assert "exit status 3" in dict(found.facts)["last error"]
    assert "DEAD after 2 attempts" in found.summary
    assert [a.number for a in found.attempts] == [1, 2]


async def test_missed_gives_the_lateness_reason(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("late", "*/5 * * * *"))
    pipeline.clock.advance(timedelta(minutes=40))  # the scheduler was down
    await pipeline.cycle()
    found = await explain(pipeline, "late", "2026-03-28T23:05:00Z")
    assert found.why is Why.MISSED
    assert "max_lateness" in found.summary and "misfire policy fire_once" in found.summary


async def test_running(pipeline: Pipeline) -> None:
    pipeline.runner.hold.add("slow")
    await pipeline.ops.add(cron("slow", "* * * * *"))
    await pipeline.advance(MIN)
    found = await explain(pipeline, "slow", "2026-03-28T23:01:00Z")
    assert found.why is Why.RUNNING and "attempt 1" in found.summary
    await pipeline.finish_held()


async def test_dst_gap_local_time_is_skipped_by_the_time_contract(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("paris", "30 2 * * *", "Europe/Paris"))
    await pipeline.advance(timedelta(hours=3), step=5 * MIN)
    found = await explain(pipeline, "paris", "2026-03-29T02:30")  # a wall time in Europe/Paris
    assert found.why is Why.DST_GAP
    assert found.at.wall == datetime(2026, 3, 29, 2, 30)  # noqa: DTZ001  a wall time that does not exist: naive
    assert dict(found.facts)["time contract"] == "DST gap: 02:30 does not exist on 2026-03-29, skipped"
    assert found.after == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)


async def test_repeated_hour_runs_once_at_the_first_pass(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("paris", "30 2 * * *", "Europe/Paris"))
    # 2026-10-25 02:30 Paris happens twice: 00:30Z (CEST) and 01:30Z (CET).
    found = await explain(pipeline, "paris", "2026-10-25T01:30:00Z")
    assert found.why is Why.REPEATED_HOUR
    assert "2026-10-25T00:30:00Z" in found.summary


async def test_not_an_instant_shows_the_nearest_ones(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("job", "*/15 * * * *"))
    found = await explain(pipeline, "job", "2026-03-29T10:07:00Z")
    assert found.why is Why.NOT_AN_INSTANT
    assert (found.before, found.after) == (
        datetime(2026, 3, 29, 10, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 10, 15, tzinfo=UTC),
    )


async def test_paused_at_that_time(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("job", "* * * * *"))
    await pipeline.advance(2 * MIN)
    await pipeline.ops.pause("job")
    await pipeline.advance(10 * MIN)
    await pipeline.ops.resume("job")
    await pipeline.advance(2 * MIN)
    # Materialized ahead before the pause, then canceled by it.
    canceled = await explain(pipeline, "job", "2026-03-28T23:03:00Z")
    assert canceled.why is Why.CANCELED and "schedule paused" in canceled.summary
    assert "version 2 (paused)" in canceled.summary
    paused = await explain(pipeline, "job", "2026-03-28T23:08:00Z")
    assert paused.why is Why.PAUSED and paused.version == 2
    assert "paused from 2026-03-28T23:02:00Z until 2026-03-28T23:12:00Z" in paused.summary


async def test_not_yet_due(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("job", "0 * * * *"))
    await pipeline.advance(2 * MIN)
    found = await explain(pipeline, "job", "2026-03-29T05:00:00Z")
    assert found.why is Why.NOT_YET_DUE and "in the future" in found.summary
    planned = await explain(pipeline, "job", "2026-03-29T00:00:00Z")
    assert planned.why is Why.NOT_YET_DUE  # beyond the horizon: not materialized yet


async def test_before_creation_and_missing(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("job", "* * * * *"))
    await pipeline.advance(3 * MIN)
    before = await explain(pipeline, "job", "2026-03-28T22:00:00Z")
    assert before.why is Why.BEFORE_CREATION
    await pipeline.sql("DELETE FROM occurrences WHERE scheduled_for = ?", pipeline.us(T0 + 2 * MIN))
    gone = await explain(pipeline, "job", "2026-03-28T23:02:00Z")
    assert gone.why is Why.MISSING


async def test_a_canceled_instant_planned_again_after_resuming_from_the_pause(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("job", "* * * * *"))
    await pipeline.advance(2 * MIN)
    await pipeline.ops.pause("job")
    await pipeline.advance(3 * MIN)
    await pipeline.ops.resume("job", from_=ResumeFrom.PAUSED_AT)
    await pipeline.advance(2 * MIN)
    found = await explain(pipeline, "job", "2026-03-28T23:03:00Z")
    assert found.why is Why.SUCCEEDED and found.version == 3
    assert "version 1" in dict(found.facts)["superseded"]
