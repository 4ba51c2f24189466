"""Issue 15 item 1: an update (or apply) must not drop the next runs.

The change transaction cancels the old version's unclaimed occurrences and plans, under
the new version, the instants it still fires at (deterministic ids, window, misfire
policy, outbox rows: the materializer's own insert path); the other instants stay
CANCELED saying why. Over both stores: the store calls alone, then the whole pipeline
on a manual clock (the issue's scenario), then the reconciler."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from clockd.core.ids import occurrence_id
from clockd.core.model import (
    AttemptOutcome,
    CommandTarget,
    MisfirePolicy,
    OccurrenceState,
    ScheduleState,
)
from clockd.core.planning import available_at
from clockd.services.reconcile import Status, run_reconcile
from clockd.store import Completion, CursorAdvance, ScheduleChange, Store

from .pipeline import T0 as NIGHT
from .pipeline import Pipeline, cron, pipeline
from .support import FENCE, LEASE, MIN, SEC, T0, add_schedule, claim_one, definition, enqueue, planned, queue_rows

__all__ = ["pipeline"]  # the fixture

S = OccurrenceState


async def test_an_update_replans_pending_instants_under_the_new_version(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    s, queued_id = await enqueue(store, s)  # T0: ENQUEUED (in the dispatch queue)
    s, running_id = await enqueue(store, s)  # T0+1m: claimed below
    s, planned_id = await enqueue(store, s)  # T0+2m: ENQUEUED
    assert s.next_run_at == T0 + 3 * MIN
    # Claim T0 and T0+1m, give T0 back as a retry (it ran once), keep T0+1m running.
    claims = await store.claim(["default"], "w", 2, LEASE, T0 + MIN)
    retry, held = sorted(claims, key=lambda c: c.scheduled_for)
    failed = Completion(retry.lease_token, AttemptOutcome.FAILED, S.RETRY_WAIT, retry_at=T0 + 5 * MIN)
    await store.finish([failed], T0 + MIN)
    new_def = definition("a", target=CommandTarget(("echo", "v2")))

    changed = await store.change_schedule(
        s.id, 1, new_def, ScheduleState.ACTIVE, T0 + 3 * MIN, T0 + MIN + 11 * SEC, "schedule updated to version 2"
    )

    assert changed.canceled == 2  # the retrying one and the queued one; the running one finishes
    new_id = occurrence_id(s.id, 2, T0 + 2 * MIN)
    assert [(r.scheduled_for, r.replaced, r.occurrence_id, r.state, r.version) for r in changed.replanned] == [
        (T0 + 2 * MIN, planned_id, new_id, S.SCHEDULED, 2)
    ]
    occs = {o.id: o for o in await store.list_occurrences(s.id)}
    assert occs[held.occurrence_id].state is S.RUNNING and held.occurrence_id == running_id
    assert (occs[queued_id].state, occs[queued_id].reason) == (S.CANCELED, "schedule updated to version 2")
    assert (occs[planned_id].state, occs[planned_id].reason) == (
        S.CANCELED,
        "schedule updated to version 2; re-planned under version 2",
    )
    fresh = occs[new_id]
    assert (fresh.version, fresh.scheduled_for, fresh.state, fresh.attempts) == (2, T0 + 2 * MIN, S.SCHEDULED, 0)
    # It goes the whole way: outbox → queue → a worker, which runs the new definition.
    assert (await store.backlog(T0 + 2 * MIN)).outbox == 1
    assert (await store.relay(T0 + 10 * MIN, 10, T0 + 2 * MIN)).moved == 1
    claim = await claim_one(store, T0 + 2 * MIN)
    assert (claim.occurrence_id, claim.version, claim.target) == (new_id, 2, new_def.target)


async def test_instants_the_new_definition_does_not_fire_at_stay_canceled_with_that_reason(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0 + MIN)
    occurrences = [planned(s, T0 + i * MIN) for i in (1, 2, 3)]
    await store.materialize(FENCE, occurrences, [CursorAdvance(s.id, 1, T0 + MIN, T0 + 4 * MIN)], T0)
    every_two = definition("a", expr="*/2 * * * *")

    changed = await store.change_schedule(s.id, 1, every_two, ScheduleState.ACTIVE, T0 + 4 * MIN, T0, "upd")

    kept = [(r.scheduled_for, r.occurrence_id) for r in changed.replanned if r.kept]
    dropped = [(r.scheduled_for, r.replaced) for r in changed.replanned if not r.kept]
    assert kept == [(T0 + 2 * MIN, occurrence_id(s.id, 2, T0 + 2 * MIN))]
    assert dropped == [(T0 + MIN, occurrences[0].id), (T0 + 3 * MIN, occurrences[2].id)]
    for _, oid in dropped:
        occ = await store.get_occurrence(oid)
        assert occ is not None
        assert (occ.state, occ.reason) == (S.CANCELED, "upd; version 2 does not fire at this instant")
    assert (await store.backlog(T0)).outbox == 1


async def test_pause_and_delete_replan_nothing(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    s, _ = await enqueue(store, s)
    paused = await store.change_schedule(s.id, 1, s.definition, ScheduleState.PAUSED, T0 + MIN, T0, "paused")
    assert (paused.canceled, paused.replanned) == (1, ())
    resumed = await store.change_schedule(s.id, 2, s.definition, ScheduleState.ACTIVE, T0 + MIN, T0, "resumed")
    assert (resumed.canceled, resumed.replanned) == (0, ())
    other = await add_schedule(store, "b", next_run_at=T0)
    other, _ = await enqueue(store, other)
    deleted = await store.change_schedule(other.id, 1, other.definition, ScheduleState.DELETED, None, T0, "rm")
    assert (deleted.canceled, deleted.replanned) == (1, ())
    assert await queue_rows(store) == 0 and (await store.backlog(T0)).outbox == 0


async def test_a_replanned_instant_gets_the_new_window_and_misfire_policy(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    occurrences = [planned(s, T0), planned(s, T0 + 20 * MIN)]
    await store.materialize(FENCE, occurrences, [CursorAdvance(s.id, 1, T0, T0 + 21 * MIN)], T0)
    windowed = definition("a", window=timedelta(minutes=2), misfire=MisfirePolicy.SKIP, max_lateness=5 * MIN)
    now = T0 + 15 * MIN  # T0 is 15 minutes late: past the new max_lateness of 5 minutes

    changed = await store.change_schedule(s.id, 1, windowed, ScheduleState.ACTIVE, T0 + 21 * MIN, now, "upd")

    late, upcoming = changed.replanned
    assert (late.scheduled_for, late.state) == (T0, S.MISSED)
    missed = await store.get_occurrence(late.occurrence_id or "")
    assert missed is not None and missed.state is S.MISSED
    assert missed.reason is not None and "max_lateness 5m" in missed.reason
    fresh = await store.get_occurrence(upcoming.occurrence_id or "")
    assert fresh is not None and fresh.state is S.SCHEDULED
    assert fresh.available_at == available_at(fresh.id, T0 + 20 * MIN, timedelta(minutes=2))
    assert (await store.backlog(now)).outbox == 1  # only the SCHEDULED one is on its way


async def test_apply_replans_like_change_schedule(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    s, old_id = await enqueue(store, s)
    change = ScheduleChange(s.id, 1, definition("a", queue="ops"), ScheduleState.ACTIVE, T0 + MIN, "by apply")

    result = await store.apply_schedules([], [change], T0)

    [r] = result.replanned
    assert (r.schedule_id, r.replaced, r.occurrence_id) == (s.id, old_id, occurrence_id(s.id, 2, T0))
    assert result.canceled == 1
    await store.relay(T0 + MIN, 10, T0)
    claim = await claim_one(store, T0, queue="ops")  # the new definition's queue
    assert claim.occurrence_id == r.occurrence_id


async def test_the_materializer_never_plans_a_replanned_instant_twice(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    s, _ = await enqueue(store, s)
    changed = await store.change_schedule(s.id, 1, s.definition, ScheduleState.ACTIVE, T0 + MIN, T0, "u")
    v2 = changed.schedule
    # A materializer that read the schedule at version 2 with a cursor at T0 (a stale read)
    # plans T0 again: the deterministic id is taken, nothing is inserted, no second outbox row.
    result = await store.materialize(FENCE, [planned(v2, T0)], [CursorAdvance(s.id, 2, T0 + MIN, T0 + MIN)], T0)
    assert result.inserted == 0
    assert sorted((o.version, o.scheduled_for, o.state) for o in await store.list_occurrences(s.id)) == [
        (1, T0, S.CANCELED),
        (2, T0, S.SCHEDULED),
    ]
    assert (await store.backlog(T0)).outbox == 1
    assert (await store.relay(T0 + MIN, 10, T0)).moved == 1
    assert len(await store.claim(["default"], "w", 10, LEASE, T0)) == 1


# -- the scenario, the whole pipeline on a manual clock ----------------------------


async def test_editing_a_daily_and_a_minutely_job_just_before_their_instant_drops_no_run(pipeline: Pipeline) -> None:
    """`02 23 * * *` and `* * * * *`, both edited at 23:00:11: the 23:01 and 23:02 runs
    happen, under the new command; before the fix 23:02 (daily) waited a day and the
    minutely job lost two instants."""
    v1 = CommandTarget(("echo", "v1"))
    v2 = CommandTarget(("echo", "v2"))
    await pipeline.ops.add(dataclasses.replace(cron("daily", "02 23 * * *"), target=v1))
    await pipeline.ops.add(dataclasses.replace(cron("minutely", "* * * * *"), target=v1))
    await pipeline.cycle()  # 23:00: the materializer plans 23:01 and 23:02 (horizon 2m)
    pipeline.clock.advance(timedelta(seconds=11))
    daily = await pipeline.ops.get("daily")
    minutely = await pipeline.ops.get("minutely")
    d = await pipeline.ops.update("daily", dataclasses.replace(daily.definition, target=v2))
    m = await pipeline.ops.update("minutely", dataclasses.replace(minutely.definition, target=v2))
    assert [(r.scheduled_for, r.version) for r in d.kept] == [(NIGHT + 2 * MIN, 2)]
    assert [r.scheduled_for for r in m.kept] == [NIGHT + MIN, NIGHT + 2 * MIN]
    assert not d.dropped and not m.dropped

    await pipeline.advance(3 * MIN)

    ran = [(c.schedule_name, c.scheduled_for, c.target) for c in pipeline.runner.calls]
    assert ("daily", NIGHT + 2 * MIN, v2) in ran
    assert [(t, target) for name, t, target in ran if name == "minutely"] == [
        (NIGHT + MIN, v2),
        (NIGHT + 2 * MIN, v2),
        (NIGHT + 3 * MIN, v2),
    ]
    assert all(target == v2 for _, _, target in ran)
    report = await run_reconcile(pipeline.store, NIGHT, pipeline.clock.now())
    assert report.ok, report.problems
    [entry] = [e for e in report.entries if e.schedule == "daily" and e.instant == NIGHT + 2 * MIN]
    assert entry.status is Status.SUCCEEDED and entry.detail.startswith("supersedes canceled")


async def test_the_reconciler_flags_a_replan_that_is_missing(pipeline: Pipeline) -> None:
    await pipeline.ops.add(cron("minutely", "* * * * *"))
    await pipeline.cycle()
    schedule = await pipeline.ops.get("minutely")
    change = await pipeline.ops.update("minutely", dataclasses.replace(schedule.definition, queue="default2"))
    lost = change.kept[0]
    # What the old code did: the re-planned occurrence never written.
    await pipeline.sql("DELETE FROM outbox WHERE occurrence_id = ?", lost.occurrence_id)
    await pipeline.sql("DELETE FROM occurrences WHERE id = ?", lost.occurrence_id)
    report = await run_reconcile(pipeline.store, NIGHT, NIGHT + 5 * MIN)
    [problem] = report.problems
    assert (problem.instant, problem.status, problem.expected_version) == (lost.scheduled_for, Status.MISSING, 2)
    assert "did not re-plan it" in problem.detail


async def test_moving_a_daily_job_earlier_keeps_today_and_tomorrow(pipeline: Pipeline) -> None:
    """`02 23 * * *` moved to `01 23 * * *` at 23:00:11 (23:02 already planned): the new
    version starts at its first instant after now, 23:01 today; before, its cursor went
    past the old one (tomorrow 23:02) and the next run was the day after tomorrow."""
    await pipeline.ops.add(cron("daily", "02 23 * * *"))
    await pipeline.cycle()
    pipeline.clock.advance(timedelta(seconds=11))
    change = await pipeline.ops.update("daily", cron("daily", "01 23 * * *"))
    assert change.schedule.next_run_at == NIGHT + MIN
    assert [r.scheduled_for for r in change.dropped] == [NIGHT + 2 * MIN]
    await pipeline.advance(timedelta(days=1, minutes=2), step=timedelta(minutes=30))
    ran = sorted(c.scheduled_for for c in pipeline.runner.calls)
    assert ran == [NIGHT + MIN, NIGHT + timedelta(days=1) + MIN]
    report = await run_reconcile(pipeline.store, NIGHT, pipeline.clock.now())
    assert report.ok, report.problems


async def test_the_new_cursor_passes_an_instant_an_older_version_already_started(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    s, _ = await enqueue(store, s)
    s, ahead = await enqueue(store, s)  # T0+1m
    # A worker whose clock runs ahead claimed T0+1m; the caller's clock says T0 + 30s and
    # computes the new cursor T0+1m: the store moves it past what already started.
    claims = await store.claim(["default"], "w", 10, LEASE, T0 + MIN)
    assert ahead in {c.occurrence_id for c in claims}
    changed = await store.change_schedule(s.id, 1, s.definition, ScheduleState.ACTIVE, T0 + MIN, T0 + 30 * SEC, "u")
    assert changed.schedule.next_run_at == T0 + 2 * MIN
    stored = await store.get_schedule_by_id(s.id)
    assert stored is not None and stored.next_run_at == T0 + 2 * MIN
    assert changed.replanned == ()  # both started: nothing to re-plan
