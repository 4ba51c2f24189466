"""The reconciler (clockd.services.reconcile) over both stores: the whole pipeline runs on a manual
clock, then rows are broken on purpose and the reconciler must say exactly what is wrong."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from clockd.core.model import CommandTarget, OccurrenceState, RetryPolicy, ScheduleKind
from clockd.modes.sampler import Sampler, SamplerSettings
from clockd.obs.metrics import REGISTRY
from clockd.services.ops import ResumeFrom
from clockd.services.reconcile import Report, Status, run_reconcile

from .pipeline import MIN, T0, Pipeline, cron, pipeline

__all__ = ["pipeline"]  # the fixture


async def reconcile(p: Pipeline, start: datetime, end: datetime, name: str | None = None) -> Report:
    schedule_id = (await p.ops.get(name)).id if name else None
    return await run_reconcile(p.store, start, end, schedule_id)


def statuses(report: Report) -> list[tuple[str, Status]]:
    return [(e.instant.strftime("%H:%M"), e.status) for e in report.entries]


async def test_a_healthy_run_is_all_accounted_for_and_the_future_is_not_yet_due(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("minutely", "* * * * *"))
    await pipeline.advance(10 * MIN)
    report = await reconcile(pipeline, T0, T0 + 20 * MIN)
    assert report.ok, report.problems
    assert report.counts[Status.SUCCEEDED] == 10
    # Materialized ahead (horizon 2m) and waiting in the queue, then beyond the cursor.
    assert report.counts[Status.QUEUED] == 2
    assert report.counts[Status.NOT_YET_DUE] == 8
    assert report.expected == 20 and report.schedules == 1


async def test_a_deleted_occurrence_row_is_reported_missing(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("minutely", "* * * * *"))
    await pipeline.advance(10 * MIN)
    victim = T0 + 5 * MIN
    await pipeline.sql("DELETE FROM occurrences WHERE scheduled_for = ?", pipeline.us(victim))
    report = await reconcile(pipeline, T0, T0 + 10 * MIN, "minutely")
    assert not report.ok
    assert [(e.instant, e.status, e.schedule) for e in report.problems] == [(victim, Status.MISSING, "minutely")]
    assert report.counts[Status.SUCCEEDED] == 9


async def test_a_doubled_row_of_another_version_is_reported(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("minutely", "* * * * *"))
    await pipeline.advance(5 * MIN)
    twin = T0 + 3 * MIN
    await pipeline.sql(
        "INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for, "
        "available_at, state, attempts, max_attempts, manual) "
        "SELECT 'twin-' || id, schedule_id, schedule_version + 1, tenant, queue, scheduled_for, "
        "available_at, 'SUCCEEDED', 1, max_attempts, manual FROM occurrences WHERE scheduled_for = ?",
        pipeline.us(twin),
    )
    report = await reconcile(pipeline, T0, T0 + 5 * MIN)
    [problem] = report.problems
    assert (problem.instant, problem.status) == (twin, Status.DOUBLED)
    assert sorted(o.version for o in problem.occurrences) == [1, 2]
    assert "version 2" in problem.detail


async def test_an_occurrence_at_an_instant_nobody_expects_is_reported(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("minutely", "* * * * *"))
    await pipeline.advance(3 * MIN)
    odd = T0 + MIN + timedelta(seconds=30)
    await pipeline.sql(
        "INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for, "
        "available_at, state, attempts, max_attempts, manual) "
        "SELECT 'odd-' || id, schedule_id, schedule_version, tenant, queue, ?, ?, 'SUCCEEDED', 1, "
        "max_attempts, manual FROM occurrences WHERE scheduled_for = ?",
        pipeline.us(odd),
        pipeline.us(odd),
        pipeline.us(T0 + MIN),
    )
    report = await reconcile(pipeline, T0, T0 + 3 * MIN)
    assert [(e.instant, e.status) for e in report.problems] == [(odd, Status.UNEXPECTED)]
    assert "not an instant" in report.problems[0].detail


async def test_dst_gap_instants_are_not_expected(pipeline: Pipeline) -> None:
    # 01:30 CET, 02:30 (does not exist on 2026-03-29: skipped), 03:30 CEST.
    await pipeline.ops.add(cron("paris", "30 1,2,3 * * *", "Europe/Paris"))
    await pipeline.advance(timedelta(hours=3), step=2 * MIN)
    start, end = datetime(2026, 3, 29, 0, 0, tzinfo=UTC), datetime(2026, 3, 29, 2, 0, tzinfo=UTC)
    report = await reconcile(pipeline, start, end)
    assert report.ok, report.problems
    assert [e.instant.isoformat() for e in report.entries] == [
        "2026-03-29T00:30:00+00:00",
        "2026-03-29T01:30:00+00:00",
    ]
    assert report.expected == 2 and report.counts == {Status.SUCCEEDED: 2}


async def test_an_update_mid_range_is_accounted_for_with_its_canceled_instants(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("job", "* * * * *"))
    await pipeline.advance(5 * MIN)
    # The materializer ran ahead (horizon 2m): the next instants of version 1 are planned.
    change = await pipeline.ops.update("job", cron("job", "*/3 * * * *"))
    assert change.canceled >= 1
    await pipeline.advance(15 * MIN)
    report = await reconcile(pipeline, T0, T0 + 20 * MIN)
    assert report.ok, report.problems
    canceled = [e for e in report.entries if e.status is Status.CANCELED]
    assert canceled and all(e.occurrences[0].version == 1 for e in canceled)
    assert all((e.reason or "").startswith("schedule updated") for e in canceled)
    # Version 1 had planned 00:06 and 00:07 ahead: */3 fires at 00:06, which version 2
    # re-planned and ran; 00:07 stays canceled, saying why. No instant ran twice.
    assert [(e.instant.minute, e.reason) for e in canceled] == [
        (7, "schedule updated to version 2; version 2 does not fire at this instant")
    ]
    ran = [e for e in report.entries if e.status is Status.SUCCEEDED]
    assert [e.instant.minute for e in ran if e.occurrences[0].version == 1] == [1, 2, 3, 4, 5]
    v2 = [e.instant.minute for e in ran if e.occurrences[0].version == 2]
    assert v2 == [6, 9, 12, 15, 18]
    [replanned] = [e for e in ran if e.instant.minute == 6]
    assert "supersedes canceled" in replanned.detail


async def test_a_paused_period_expects_nothing(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("job", "* * * * *"))
    await pipeline.advance(3 * MIN)
    await pipeline.ops.pause("job")
    await pipeline.advance(10 * MIN)
    await pipeline.ops.resume("job")
    await pipeline.advance(3 * MIN)
    report = await reconcile(pipeline, T0, T0 + 16 * MIN)
    assert report.ok, report.problems
    ran = sorted(e.instant.minute for e in report.entries if e.status is Status.SUCCEEDED)
    assert ran == [1, 2, 3, 14, 15, 16]
    assert {e.status for e in report.entries if 4 <= e.instant.minute <= 13} <= {Status.CANCELED}
    assert report.counts.get(Status.CANCELED, 0) >= 1


async def test_missed_and_dead_occurrences_are_accounted_for_with_their_reasons(pipeline: Pipeline) -> None:
    pipeline.runner.fail.add("flaky")
    await pipeline.ops.add(cron("flaky", "* * * * *", retry=RetryPolicy(retries=0)))
    await pipeline.ops.add(cron("late", "*/5 * * * *"))
    await pipeline.advance(2 * MIN)
    pipeline.clock.advance(timedelta(minutes=40))  # the scheduler was down
    await pipeline.cycle()
    report = await reconcile(pipeline, T0, pipeline.clock.now())
    assert report.ok, report.problems
    dead = [e for e in report.entries if e.status is Status.DEAD]
    assert dead and all(e.schedule == "flaky" for e in dead)
    missed = [e for e in report.entries if e.status is Status.MISSED]
    assert missed and all("max_lateness" in (e.reason or "") for e in missed)
    assert {e.occurrences[0].state for e in missed} == {OccurrenceState.MISSED}


async def test_resuming_from_the_pause_replans_canceled_instants_without_doubling_them(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("job", "* * * * *"))
    await pipeline.advance(3 * MIN)
    await pipeline.ops.pause("job")  # instants planned ahead (horizon 2m) are canceled
    await pipeline.advance(5 * MIN)
    await pipeline.ops.resume("job", from_=ResumeFrom.PAUSED_AT)  # the pause goes through misfire
    await pipeline.advance(3 * MIN)
    report = await reconcile(pipeline, T0, T0 + 11 * MIN)
    assert report.ok, report.problems
    superseded = [e for e in report.entries if e.detail.startswith("supersedes canceled")]
    assert superseded and all(e.occurrences[0].version == 3 for e in superseded)
    assert sorted(e.instant.minute for e in report.entries if e.status is Status.SUCCEEDED) == list(range(1, 12))


async def test_pause_resume_update_of_an_every_job_is_not_doubled(pipeline: Pipeline) -> None:
    """Issue 15 item 3: two CANCELED rows of one instant (each canceled before it ran, by the
    pause and by the update) are history, not a double fire."""
    every = dataclasses.replace(cron("tick", "* * * * *"), kind=ScheduleKind.EVERY, expr="1m")
    await pipeline.ops.add(every)
    await pipeline.advance(3 * MIN)
    await pipeline.ops.pause("tick")  # the instants planned ahead are CANCELED (version 1)
    await pipeline.ops.resume("tick")  # version 3 plans them again
    await pipeline.cycle()
    await pipeline.ops.update("tick", dataclasses.replace(every, target=CommandTarget(("/bin/true",))))
    await pipeline.advance(3 * MIN)
    report = await reconcile(pipeline, T0, pipeline.clock.now())
    assert report.ok, report.problems
    assert report.counts.get(Status.DOUBLED, 0) == 0
    twice = [e for e in report.entries if e.detail.startswith("supersedes canceled")]
    assert twice, "the instant with two canceled rows is accounted for, naming the superseded one"
    # The leader's hourly check agrees, and its gauge reads 0 (also once the schedule is gone).
    await pipeline.ops.remove("tick")
    pipeline.clock.advance(10 * MIN)
    sampler = Sampler(pipeline.store, pipeline.clock, SamplerSettings(reconcile_window=timedelta(hours=1)))
    assert await sampler.reconcile(pipeline.clock.now()) == 0
    assert REGISTRY.get_sample_value("clockd_occurrences_unaccounted") == 0


async def test_two_runs_of_one_instant_are_still_doubled(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("minutely", "* * * * *"))
    await pipeline.advance(3 * MIN)
    twin = T0 + 2 * MIN
    await pipeline.sql(
        "INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for, "
        "available_at, state, attempts, max_attempts, manual) "
        "SELECT 'twin-' || id, schedule_id, schedule_version + 1, tenant, queue, scheduled_for, "
        "available_at, 'CANCELED', 1, max_attempts, manual FROM occurrences WHERE scheduled_for = ?",
        pipeline.us(twin),
    )  # canceled, but after an attempt: it ran (a dropped dead letter), so two runs
    report = await reconcile(pipeline, T0, T0 + 3 * MIN)
    [problem] = report.problems
    assert (problem.instant, problem.status) == (twin, Status.DOUBLED)
