"""Scheduling policies where the data is (DESIGN.md §4), on every store: tenant-fair claims
and tenant caps, overlap enforced inside the claim (two claimers racing), the leader's
misfire sweep, the dead-letter queue, idempotent create and schedule quotas, and what an
update does to claimed and unclaimed work."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter

import pytest

from clockd.core.ids import new_schedule_id
from clockd.core.model import (
    AttemptOutcome,
    MisfirePolicy,
    OccurrenceState,
    OverlapPolicy,
    Schedule,
    ScheduleState,
    TenantLimits,
)
from clockd.errors import Conflict, NotFound, QuotaExceeded
from clockd.store import Claim, Completion, CursorAdvance, Fence, NewSchedule, Store

from .support import (
    FENCE,
    LEASE,
    MIN,
    QUEUE,
    SEC,
    T0,
    US,
    Backend,
    add_schedule,
    definition,
    planned,
    queued,
)

LEADER = Fence("leader", 1)
SUCCESS = (AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED)


async def state_of(store: Store, occurrence_id: str) -> OccurrenceState:
    occ = await store.get_occurrence(occurrence_id)
    assert occ is not None
    return occ.state


def names(claims: list[Claim]) -> Counter[str]:
    return Counter(c.schedule_name for c in claims)


def done(claim: Claim) -> Completion:
    return Completion(claim.lease_token, *SUCCESS)


# -- tenant fairness and caps ------------------------------------------------------------------


async def test_a_burst_of_one_tenant_does_not_hide_another_tenants_row(store: Store) -> None:
    """10,000 rows of one tenant due first; one row of another tenant due after all of
    them: it is in the first claim batch, not behind the burst."""
    await queued(store, "flood", 10_000, tenant="acme")
    await queued(store, "single", 1, at=T0 + SEC, tenant="beta")
    claims = await store.claim([QUEUE], "w", 100, LEASE, T0 + MIN)
    assert len(claims) == 100
    assert names(claims) == {"flood": 99, "single": 1}
    # Round-robin inside the batch: each tenant's first row comes first.
    assert {claims[0].schedule_name, claims[1].schedule_name} == {"flood", "single"}


async def test_one_busy_tenant_still_gets_full_batches(store: Store) -> None:
    await queued(store, "flood", 300, tenant="acme")
    claims = await store.claim([QUEUE], "w", 100, LEASE, T0 + MIN)
    assert len(claims) == 100
    assert [c.scheduled_for for c in claims] == [T0 + i * US for i in range(100)]


async def test_max_running_caps_a_tenant_and_the_rest_wait(store: Store) -> None:
    await store.set_tenant_limits(TenantLimits("acme", max_running=3), T0)
    await queued(store, "capped", 10, tenant="acme")
    await queued(store, "free", 5, tenant="beta")
    claims = await store.claim([QUEUE], "w", 100, LEASE, T0 + MIN)
    assert names(claims) == {"capped": 3, "free": 5}
    assert await store.claim([QUEUE], "w", 100, LEASE, T0 + MIN) == []
    usage = {u.limits.tenant: u for u in await store.tenant_usage()}
    assert (usage["acme"].running, usage["acme"].limits.max_running) == (3, 3)
    # One ends: one more may start.
    first = next(c for c in claims if c.schedule_name == "capped")
    assert await store.finish([done(first)], T0 + MIN) == {first.lease_token}
    again = await store.claim([QUEUE], "w", 100, LEASE, T0 + MIN)
    assert names(again) == {"capped": 1}


async def test_a_tenant_cap_holds_against_concurrent_claimers(store: Store, backend: Backend) -> None:
    await store.set_tenant_limits(TenantLimits("acme", max_running=5), T0)
    await queued(store, "capped", 200, tenant="acme")
    others = [await backend.open_store() for _ in range(3)]
    batches = await asyncio.gather(
        *(s.claim([QUEUE], f"w{i}-{j}", 7, LEASE, T0 + MIN) for i, s in enumerate([store, *others]) for j in range(3))
    )
    assert sum(len(b) for b in batches) == 5
    assert (await store.backlog(T0 + MIN)).running == 5


async def test_max_triggers_per_minute_waits_for_the_next_minute(store: Store) -> None:
    await store.set_tenant_limits(TenantLimits("acme", max_triggers_per_minute=4), T0)
    await queued(store, "chatty", 10, tenant="acme")
    first = await store.claim([QUEUE], "w", 100, LEASE, T0 + SEC)
    assert len(first) == 4
    assert await store.finish([done(c) for c in first], T0 + 2 * SEC) == {c.lease_token for c in first}
    assert await store.claim([QUEUE], "w", 100, LEASE, T0 + 30 * SEC) == []  # same minute
    assert len(await store.claim([QUEUE], "w", 100, LEASE, T0 + MIN)) == 4  # the next one


async def test_tenant_limits_are_listed_with_usage_and_none_removes_a_limit(store: Store) -> None:
    await add_schedule(store, "a1", tenant="acme")
    await add_schedule(store, "b1", tenant="beta")
    await store.set_tenant_limits(TenantLimits("acme", max_schedules=10, catch_up_rate=6), T0)
    await store.set_tenant_limits(TenantLimits("gamma", max_running=1), T0)
    usage = await store.tenant_usage()
    assert [(u.limits.tenant, u.schedules, u.limits.max_schedules) for u in usage] == [
        ("acme", 1, 10),
        ("beta", 1, None),
        ("gamma", 0, None),
    ]
    await store.set_tenant_limits(TenantLimits("acme", catch_up_rate=6), T0)
    assert TenantLimits("acme", catch_up_rate=6) in await store.tenant_limits()


# -- schedule quota and idempotent create ------------------------------------------------------


async def test_a_create_over_the_schedule_quota_is_refused_naming_the_limit(store: Store) -> None:
    await store.set_tenant_limits(TenantLimits("acme", max_schedules=2), T0)
    await add_schedule(store, "one", tenant="acme")
    await add_schedule(store, "two", tenant="acme")
    with pytest.raises(QuotaExceeded, match="tenant acme is at its limit of 2 active schedules"):
        await add_schedule(store, "three", tenant="acme")
    await add_schedule(store, "elsewhere", tenant="beta")  # other tenants are not affected
    # apply: all or nothing.
    creates = [NewSchedule(new_schedule_id(), definition(n, tenant="acme"), 0, T0) for n in ("x", "y")]
    with pytest.raises(QuotaExceeded):
        await store.apply_schedules(creates, [], T0)
    assert sorted(s.name for s in await store.list_schedules("acme")) == ["one", "two"]


async def test_a_taken_name_is_a_conflict_even_when_the_tenant_is_full(store: Store) -> None:
    # It was refused for the quota, which sent the user to raise a limit instead of
    # telling them the schedule already exists.
    await store.set_tenant_limits(TenantLimits("acme", max_schedules=2), T0)
    await add_schedule(store, "one", tenant="acme")
    await add_schedule(store, "two", tenant="acme")
    with pytest.raises(Conflict, match="schedule 'two' already exists in tenant 'acme'"):
        await add_schedule(store, "two", tenant="acme")
    creates = [NewSchedule(new_schedule_id(), definition(n, tenant="acme"), 0, T0) for n in ("one", "x")]
    with pytest.raises(Conflict, match="schedule 'one' already exists"):
        await store.apply_schedules(creates, [], T0)
    assert sorted(s.name for s in await store.list_schedules("acme")) == ["one", "two"]


async def test_concurrent_creates_cannot_both_take_the_last_place(store: Store, backend: Backend) -> None:
    await store.set_tenant_limits(TenantLimits("acme", max_schedules=3), T0)
    stores = [store, *[await backend.open_store() for _ in range(3)]]
    results = await asyncio.gather(
        *(add_schedule(stores[i % 4], f"s{i}", tenant="acme") for i in range(8)), return_exceptions=True
    )
    assert sum(isinstance(r, Schedule) for r in results) == 3
    assert all(isinstance(r, (Schedule, QuotaExceeded)) for r in results), results
    assert len(await store.list_schedules("acme")) == 3


async def test_an_idempotency_key_names_one_live_schedule_per_tenant(store: Store) -> None:
    first = await store.create_schedule(new_schedule_id(), definition("a"), 0, T0, T0, idempotency_key="k")
    assert await store.get_schedule_by_idempotency_key("default", "k") == first
    with pytest.raises(Conflict, match="idempotency key 'k'"):
        await store.create_schedule(new_schedule_id(), definition("b"), 0, T0, T0, idempotency_key="k")
    assert [s.name for s in await store.list_schedules()] == ["a"]  # nothing half-written
    # Another tenant may use the same key; deleting the schedule frees it.
    await store.create_schedule(new_schedule_id(), definition("a", tenant="t2"), 0, T0, T0, idempotency_key="k")
    await store.change_schedule(first.id, 1, first.definition, ScheduleState.DELETED, None, T0, "deleted")
    assert await store.get_schedule_by_idempotency_key("default", "k") is None
    await store.create_schedule(new_schedule_id(), definition("c"), 0, T0, T0, idempotency_key="k")


# -- overlap ------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlap", [OverlapPolicy.SKIP, OverlapPolicy.QUEUE_ONE])
async def test_two_claimers_racing_never_both_start_one_schedule(
    store: Store, backend: Backend, overlap: OverlapPolicy
) -> None:
    other = await backend.open_store()
    for round_ in range(10):
        _, ids = await queued(store, f"hourly{round_}", 2, step=MIN, overlap=overlap)
        now = T0 + 5 * MIN
        batches = await asyncio.gather(
            store.claim([QUEUE], "w1", 1, LEASE, now), other.claim([QUEUE], "w2", 1, LEASE, now)
        )
        started = [c for batch in batches for c in batch]
        assert len(started) == 1, (round_, started)
        # Whatever the second claimer saw, the next claim settles the other occurrence.
        assert await store.claim([QUEUE], "w1", 10, LEASE, now) == []
        states = {oid: await state_of(store, oid) for oid in ids}
        running_id = started[0].occurrence_id
        assert states[running_id] is OccurrenceState.RUNNING
        [loser] = [oid for oid in ids if oid != running_id]
        expected = OccurrenceState.SKIPPED_OVERLAP if overlap is OverlapPolicy.SKIP else OccurrenceState.ENQUEUED
        assert states[loser] is expected
        occ = await store.get_occurrence(loser)
        assert occ is not None and occ.reason is not None and running_id in occ.reason
        assert await store.finish([done(started[0])], now + SEC) == {started[0].lease_token}


async def test_queue_one_lets_one_wait_skips_the_rest_and_runs_the_waiter_next(store: Store) -> None:
    _, ids = await queued(store, "slow", 4, step=MIN, overlap=OverlapPolicy.QUEUE_ONE)
    now = T0 + 10 * MIN
    [first] = await store.claim([QUEUE], "w", 10, LEASE, now)
    assert first.occurrence_id == ids[0]
    states = [await state_of(store, oid) for oid in ids]
    assert states == [
        OccurrenceState.RUNNING,
        OccurrenceState.ENQUEUED,  # waiting (parked)
        OccurrenceState.SKIPPED_OVERLAP,
        OccurrenceState.SKIPPED_OVERLAP,
    ]
    skipped = await store.get_occurrence(ids[2])
    assert skipped is not None and skipped.reason is not None
    assert ids[0] in skipped.reason and ids[1] in skipped.reason and "queue_one" in skipped.reason
    assert await store.claim([QUEUE], "w", 10, LEASE, now + MIN) == []  # the waiter waits
    assert (await store.backlog(now)).queued == 0  # the waiter is held by the slot, not queued
    assert await store.finish([done(first)], now + 2 * MIN) == {first.lease_token}
    [second] = await store.claim([QUEUE], "w", 10, LEASE, now + 2 * MIN)
    assert second.occurrence_id == ids[1] and second.attempt == 1


async def test_overlap_skip_a_retrying_holder_keeps_its_slot(store: Store) -> None:
    schedule, [held] = await queued(store, "job", 1, overlap=OverlapPolicy.SKIP)
    [claim] = await store.claim([QUEUE], "w", 10, LEASE, T0 + SEC)
    retry = Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.RETRY_WAIT, retry_at=T0 + MIN)
    assert await store.finish([retry], T0 + 2 * SEC) == {claim.lease_token}
    later = planned(schedule, T0 + 30 * SEC)
    cursor = CursorAdvance(schedule.id, 1, T0 + US, T0 + MIN)
    await store.materialize(FENCE, [later], [cursor], T0)
    await store.relay(T0 + MIN, 10, T0)
    assert await store.claim([QUEUE], "w", 10, LEASE, T0 + 40 * SEC) == []  # skipped: the holder retries
    assert await state_of(store, later.id) is OccurrenceState.SKIPPED_OVERLAP
    [again] = await store.claim([QUEUE], "w", 10, LEASE, T0 + MIN)
    assert (again.occurrence_id, again.attempt) == (held, 2)


async def test_the_claim_judges_a_run_by_the_policy_its_row_carries(store: Store) -> None:
    """Schema 0018: the policy of the version that planned the run, written on its row, is
    the one the claim applies (not the schedule's spec, which it no longer reads)."""
    schedule = await add_schedule(store, "job", next_run_at=T0, overlap=OverlapPolicy.SKIP)
    rows = [planned(schedule, T0 + i * SEC, overlap=OverlapPolicy.ALLOW) for i in range(2)]
    await store.materialize(FENCE, rows, [CursorAdvance(schedule.id, 1, T0, T0 + MIN)], T0 - MIN)
    assert (await store.relay(T0 + MIN, 10, T0 - MIN)).moved == 2
    assert len(await store.claim([QUEUE], "w", 10, LEASE, T0 + 5 * SEC)) == 2


async def test_a_row_written_before_0018_is_judged_by_its_schedules_policy(store: Store) -> None:
    """A row without a policy (an older release planned it, or wrote it during an
    upgrade) falls back to the schedule's spec, as every claim did before."""
    schedule = await add_schedule(store, "job", next_run_at=T0, overlap=OverlapPolicy.SKIP)
    rows = [planned(schedule, T0 + i * SEC, overlap=None) for i in range(2)]
    await store.materialize(FENCE, rows, [CursorAdvance(schedule.id, 1, T0, T0 + MIN)], T0 - MIN)
    assert (await store.relay(T0 + MIN, 10, T0 - MIN)).moved == 2
    [first] = await store.claim([QUEUE], "w", 10, LEASE, T0 + 5 * SEC)
    assert first.occurrence_id == rows[0].id
    assert await state_of(store, rows[1].id) is OccurrenceState.SKIPPED_OVERLAP


async def test_allow_runs_occurrences_of_one_schedule_side_by_side(store: Store) -> None:
    await queued(store, "parallel", 3, step=MIN)
    assert len(await store.claim([QUEUE], "w", 10, LEASE, T0 + 5 * MIN)) == 3


async def test_the_leader_frees_a_slot_whose_holder_was_canceled(store: Store) -> None:
    schedule, [_, waiting] = await queued(store, "job", 2, step=MIN, overlap=OverlapPolicy.QUEUE_ONE)
    [claim] = await store.claim([QUEUE], "w", 10, LEASE, T0 + 2 * MIN)
    retry = Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.RETRY_WAIT, retry_at=T0 + 5 * MIN)
    await store.finish([retry], T0 + 3 * MIN)
    # An update cancels the retrying holder and the waiter (older version, unclaimed); the
    # new definition does not fire at the waiter's instant, so nothing is re-planned.
    every_ten = dataclasses.replace(schedule.definition, expr="*/10 * * * *")
    updated, canceled, _ = await store.change_schedule(
        schedule.id, 1, every_ten, ScheduleState.ACTIVE, T0 + 10 * MIN, T0 + 4 * MIN, "updated"
    )
    assert canceled == 2
    assert await store.release_stale_slots(LEADER, 100, T0 + 4 * MIN) == 1
    assert await store.release_stale_slots(LEADER, 100, T0 + 4 * MIN) == 0
    fresh = planned(updated, T0 + 10 * MIN)
    await store.materialize(FENCE, [fresh], [CursorAdvance(updated.id, 2, T0 + 10 * MIN, T0 + 11 * MIN)], T0)
    await store.relay(T0 + 11 * MIN, 10, T0 + 10 * MIN)
    [started] = await store.claim([QUEUE], "w", 10, LEASE, T0 + 10 * MIN)
    assert started.occurrence_id == fresh.id and started.version == 2
    assert await state_of(store, waiting) is OccurrenceState.CANCELED


# -- misfire sweep ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "limit", "missed"),
    [
        (MisfirePolicy.SKIP, 10, [0, 1, 2, 3]),
        (MisfirePolicy.FIRE_ONCE, 10, [0, 1, 2]),
        (MisfirePolicy.CATCH_UP, 2, [0, 1]),
        (MisfirePolicy.CATCH_UP, 10, []),
    ],
)
async def test_the_sweep_applies_the_misfire_policy_to_late_queued_rows(
    store: Store, policy: MisfirePolicy, limit: int, missed: list[int]
) -> None:
    _, ids = await queued(store, "late", 4, step=MIN, misfire=policy, max_lateness=MIN, catch_up_limit=limit)
    now = T0 + 10 * MIN
    assert await store.sweep_misfires(LEADER, 100, now) == len(missed)
    for i, oid in enumerate(ids):
        occ = await store.get_occurrence(oid)
        assert occ is not None
        if i in missed:
            assert occ.state is OccurrenceState.MISSED, i
            assert occ.finished_at == now
            assert occ.reason is not None
            assert f"misfire policy {policy}" in occ.reason and "no worker reached it" in occ.reason
        else:
            assert occ.state is OccurrenceState.ENQUEUED, i
    assert len(await store.claim([QUEUE], "w", 10, LEASE, now)) == 4 - len(missed)
    assert await store.sweep_misfires(LEADER, 100, now) == 0


async def test_fire_once_misses_the_latest_late_row_when_a_newer_one_is_due(store: Store) -> None:
    await queued(store, "five", 3, step=MIN, max_lateness=MIN)
    now = T0 + 10 * MIN
    schedule = await store.get_schedule("default", "five")
    assert schedule is not None
    on_time = planned(schedule, now - 30 * SEC)
    await store.materialize(FENCE, [on_time], [CursorAdvance(schedule.id, 1, schedule.next_run_at, now)], T0)
    await store.relay(now, 10, now - 30 * SEC)
    assert await store.sweep_misfires(LEADER, 100, now) == 3
    [claim] = await store.claim([QUEUE], "w", 10, LEASE, now)
    assert claim.occurrence_id == on_time.id


async def test_the_sweep_leaves_rows_within_max_lateness_and_run_now(store: Store) -> None:
    schedule, [oid] = await queued(store, "fresh", 1, max_lateness=10 * MIN, misfire=MisfirePolicy.SKIP)
    manual = await store.add_manual_occurrence(schedule, "manual-1", 1, T0)
    await store.relay(T0 + MIN, 10, T0)
    assert await store.sweep_misfires(LEADER, 100, T0 + 5 * MIN) == 0
    assert await store.sweep_misfires(LEADER, 100, T0 + 11 * MIN) == 1
    assert await state_of(store, oid) is OccurrenceState.MISSED
    assert await state_of(store, manual.id) is OccurrenceState.ENQUEUED


async def test_a_missed_holder_hands_its_slot_to_the_waiter(store: Store) -> None:
    _, [held, waiting] = await queued(
        store, "job", 2, step=MIN, overlap=OverlapPolicy.QUEUE_ONE, misfire=MisfirePolicy.SKIP, max_lateness=MIN
    )
    [claim] = await store.claim([QUEUE], "w", 10, LEASE, T0 + MIN)
    retry = Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.RETRY_WAIT, retry_at=T0 + 2 * MIN)
    await store.finish([retry], T0 + MIN + SEC)
    # The holder's retry is never picked up in time: the sweep misses it, the waiter runs.
    assert await store.sweep_misfires(LEADER, 100, T0 + 4 * MIN) == 1
    assert await state_of(store, held) is OccurrenceState.MISSED
    [started] = await store.claim([QUEUE], "w", 10, LEASE, T0 + 4 * MIN)
    assert started.occurrence_id == waiting


# -- dead letters ------------------------------------------------------------------------------------


async def dead(store: Store) -> Claim:
    await queued(store, "fragile", 1)
    [claim] = await store.claim([QUEUE], "w", 10, LEASE, T0 + SEC)
    failed = Completion(
        claim.lease_token,
        AttemptOutcome.FAILED,
        OccurrenceState.DEAD,
        exit_code=64,
        error="exit code 64; permanent failure: not retried",
    )
    assert await store.finish([failed], T0 + 2 * SEC) == {claim.lease_token}
    return claim


async def test_dead_occurrences_keep_their_last_error_in_the_dlq(store: Store) -> None:
    claim = await dead(store)
    [listed] = await store.list_dead()
    assert listed.id == claim.occurrence_id and listed.state is OccurrenceState.DEAD
    assert listed.last_error == "exit code 64; permanent failure: not retried"
    assert listed.exit_code == 64
    assert [o.id for o in await store.list_dead(claim.schedule_id)] == [claim.occurrence_id]
    assert await store.list_dead(None, "other-tenant") == []


async def test_the_dlq_pages_by_the_last_dead_letter_of_the_page_before(store: Store) -> None:
    schedule, ids = await queued(store, "fragile", 5)
    claims = await store.claim([QUEUE], "w", 10, LEASE, T0 + SEC)
    assert len(claims) == 5

    def dead_letter(claim: Claim) -> Completion:
        return Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.DEAD, exit_code=64, error="x")

    # Three died in one instant (their order: id, newest first), two a second later.
    await store.finish([dead_letter(c) for c in claims[:3]], T0 + 2 * SEC)
    await store.finish([dead_letter(c) for c in claims[3:]], T0 + 3 * SEC)
    whole = [o.id for o in await store.list_dead()]
    assert sorted(whole) == sorted(ids)
    assert whole[:2] == sorted((c.occurrence_id for c in claims[3:]), reverse=True)

    for schedule_id in (None, schedule.id):
        pages: list[list[str]] = []
        before = None
        while True:
            got = await store.list_dead(schedule_id, None, 2, before)
            if not got:
                break
            pages.append([o.id for o in got])
            last = got[-1]
            assert last.finished_at is not None
            before = (last.finished_at, last.id)
        assert [len(p) for p in pages] == [2, 2, 1]
        assert [i for p in pages for i in p] == whole


async def test_replay_keeps_the_id_and_adds_an_attempt(store: Store) -> None:
    claim = await dead(store)
    replayed = await store.replay_dead(claim.occurrence_id, "replayed", T0 + MIN)
    assert (replayed.id, replayed.state, replayed.attempts) == (claim.occurrence_id, OccurrenceState.ENQUEUED, 1)
    assert await store.list_dead() == []
    [again] = await store.claim([QUEUE], "w", 10, LEASE, T0 + MIN)
    assert (again.occurrence_id, again.attempt, again.max_attempts) == (claim.occurrence_id, 2, 2)
    assert await store.finish([done(again)], T0 + MIN + SEC) == {again.lease_token}
    assert await state_of(store, claim.occurrence_id) is OccurrenceState.SUCCEEDED
    assert [a.number for a in await store.list_attempts(claim.occurrence_id)] == [1, 2]
    with pytest.raises(Conflict, match="not in the dead-letter queue"):
        await store.replay_dead(claim.occurrence_id, "again", T0 + 2 * MIN)


async def test_drop_cancels_a_dead_occurrence_and_keeps_its_history(store: Store) -> None:
    claim = await dead(store)
    dropped = await store.drop_dead(claim.occurrence_id, "dropped from the dead-letter queue", T0 + MIN)
    assert dropped.state is OccurrenceState.CANCELED and dropped.reason == "dropped from the dead-letter queue"
    assert await store.list_dead() == []
    assert len(await store.list_attempts(claim.occurrence_id)) == 1
    with pytest.raises(NotFound):
        await store.drop_dead("no-such-occurrence", "x", T0)


# -- versions: claimed work finishes, unclaimed work is canceled ------------------------------------


async def test_an_update_cancels_queued_work_and_claimed_work_of_the_old_version_finishes(store: Store) -> None:
    schedule, ids = await queued(store, "report", 3, step=MIN)
    [running] = await store.claim([QUEUE], "w", 1, LEASE, T0 + SEC)
    updated, canceled, _ = await store.change_schedule(
        schedule.id, 1, definition("report", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0 + 5 * MIN, T0 + 2 * SEC,
        "updated",
    )  # fmt: skip
    assert (updated.version, canceled) == (2, 2)
    assert [o.id for o in await store.running_occurrences(schedule.id)] == [running.occurrence_id]
    assert await store.claim([QUEUE], "w", 10, LEASE, T0 + 10 * MIN) == []  # canceled: never handed out
    assert await store.finish([done(running)], T0 + 3 * SEC) == {running.lease_token}
    occ = await store.get_occurrence(running.occurrence_id)
    assert occ is not None and (occ.state, occ.version) == (OccurrenceState.SUCCEEDED, 1)
    assert [await state_of(store, oid) for oid in ids[1:]] == [OccurrenceState.CANCELED] * 2
