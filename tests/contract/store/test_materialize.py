"""The materializer's reads and its one transaction: due_shards, due_schedules, materialize, the fence."""

from __future__ import annotations

from datetime import timedelta

import pytest

from clockd.core.model import (
    CommandTarget,
    HttpTarget,
    MisfirePolicy,
    NoopTarget,
    OccurrenceState,
    RetryPolicy,
    ScheduleKind,
    ScheduleState,
)
from clockd.core.notify import Notification, NotifyEvent
from clockd.core.planning import DueSchedule
from clockd.errors import FencedOut
from clockd.store import CursorAdvance, Fence, MaterializeResult, Store

from .support import FENCE, LEASE, MIN, SEC, T0, Backend, add_schedule, materialize_next, planned


def fenced_count(store: Store) -> int:
    count = getattr(store, "fenced_writes_rejected", None)
    assert isinstance(count, int), "every adapter counts the writes its fence rejected"
    return count


async def test_due_schedules_by_shard_and_horizon_earliest_first(store: Store) -> None:
    late = await add_schedule(store, "late", next_run_at=T0 + 2 * MIN, shard=1)
    early = await add_schedule(store, "early", next_run_at=T0, shard=2)
    await add_schedule(store, "far", next_run_at=T0 + 60 * MIN, shard=1)
    await add_schedule(store, "other-shard", next_run_at=T0, shard=3)
    await add_schedule(store, "exhausted", next_run_at=None, shard=1)
    paused = await add_schedule(store, "paused", next_run_at=T0, shard=1)
    await store.change_schedule(paused.id, 1, paused.definition, ScheduleState.PAUSED, T0, T0, "p")
    deleted = await add_schedule(store, "deleted", next_run_at=T0, shard=1)
    await store.change_schedule(deleted.id, 1, deleted.definition, ScheduleState.DELETED, T0, T0, "rm")

    due = await store.due_schedules([1, 2], T0 + 5 * MIN, 100)
    assert [s.id for s in due] == [early.id, late.id]
    assert due[0] == DueSchedule.of(early)
    assert [s.id for s in await store.due_schedules([1, 2], T0 + 5 * MIN, 1)] == [early.id]
    assert [s.id for s in await store.due_schedules([1], T0 + 2 * MIN, 100)] == [late.id]
    assert await store.due_schedules([1], T0 + 2 * MIN - SEC, 100) == []
    assert await store.due_schedules([], T0 + 60 * MIN, 100) == []


async def test_due_schedules_read_exactly_the_planning_inputs_of_the_whole_definition(store: Store) -> None:
    """The narrow read (spec fields by path) gives what decoding the whole definition
    gives: every policy, the capability flags, and the defaults."""
    notify = (Notification(NotifyEvent.MISSED, argv=("page", "ops")),)
    created = [
        await add_schedule(store, "plain"),
        await add_schedule(
            store,
            "policies",
            misfire=MisfirePolicy.CATCH_UP,
            catch_up_limit=3,
            max_lateness=timedelta(seconds=30),
            window=timedelta(minutes=2),
            retry=RetryPolicy(retries=5),
            queue="batch",
            tenant="acme",
        ),
        await add_schedule(store, "skip", misfire=MisfirePolicy.SKIP, catch_up_limit=0, retry=RetryPolicy(retries=0)),
        await add_schedule(store, "stdin", target=CommandTarget(argv=("cat",), stdin="hello")),
        await add_schedule(store, "notify", notify=notify, target=NoopTarget()),
        await add_schedule(store, "http", target=HttpTarget(method="POST", url="http://127.0.0.1:9/hook")),
        await add_schedule(store, "every", kind=ScheduleKind.EVERY, expr="90s", tz="Europe/Paris"),
    ]
    due = {s.id: s for s in await store.due_schedules([0], T0, 100)}
    for schedule in created:
        whole = await store.get_schedule_by_id(schedule.id)
        assert whole is not None
        assert due[schedule.id] == DueSchedule.of(whole), schedule.name
    assert due[created[3].id].requires == {"stdin"}
    assert due[created[4].id].requires == {"notify"} and due[created[4].id].notify
    assert due[created[0].id].requires == frozenset() and not due[created[0].id].notify


async def test_due_schedules_fill_in_defaults_for_keys_an_older_document_lacks(backend: Backend) -> None:
    store = await backend.open_store()
    schedule = await add_schedule(store, "old")
    spec = '{"target":{"type":"command","argv":["echo","hi"]}}'  # what a first release might have written
    value = "?" if backend.kind == "sqlite" else "CAST(? AS jsonb)"
    await backend.execute(f"UPDATE schedules SET spec = {value} WHERE id = ?", spec, schedule.id)
    whole = await store.get_schedule_by_id(schedule.id)
    assert whole is not None and whole.definition.retry == RetryPolicy()
    assert await store.due_schedules([0], T0, 100) == [DueSchedule.of(whole)]


async def test_due_shards_names_the_shards_with_work_most_urgent_first(store: Store) -> None:
    await add_schedule(store, "late", next_run_at=T0 + 2 * MIN, shard=1)
    await add_schedule(store, "early", next_run_at=T0, shard=5)
    await add_schedule(store, "tie", next_run_at=T0, shard=2)
    await add_schedule(store, "far", next_run_at=T0 + 60 * MIN, shard=3)
    await add_schedule(store, "exhausted", next_run_at=None, shard=4)
    paused = await add_schedule(store, "paused", next_run_at=T0, shard=6)
    await store.change_schedule(paused.id, 1, paused.definition, ScheduleState.PAUSED, T0, T0, "p")
    deleted = await add_schedule(store, "deleted", next_run_at=T0, shard=7)
    await store.change_schedule(deleted.id, 1, deleted.definition, ScheduleState.DELETED, T0, T0, "rm")

    everything = list(range(10))
    assert await store.due_shards(everything, T0 + 5 * MIN) == [(2, T0), (5, T0), (1, T0 + 2 * MIN)]
    # only the shards asked about
    assert await store.due_shards([1, 3, 5], T0 + 5 * MIN) == [(5, T0), (1, T0 + 2 * MIN)]
    assert await store.due_shards(everything, T0 + 2 * MIN - SEC) == [(2, T0), (5, T0)]
    assert await store.due_shards(everything, T0 - SEC) == []
    assert await store.due_shards([], T0 + 60 * MIN) == []


async def test_materialize_inserts_advances_and_writes_outbox(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    b = await add_schedule(store, "b", next_run_at=T0)
    occs = [planned(a, T0), planned(b, T0, available_at=T0 + 3 * SEC)]
    cursors = [CursorAdvance(a.id, 1, T0, T0 + MIN), CursorAdvance(b.id, 1, T0, None)]
    result = await store.materialize(FENCE, occs, cursors, T0 - MIN)
    assert result == MaterializeResult(inserted=2, advanced=2, stale=0)

    a2 = await store.get_schedule_by_id(a.id)
    b2 = await store.get_schedule_by_id(b.id)
    assert a2 is not None and b2 is not None
    assert a2.next_run_at == T0 + MIN
    assert a2.version == 1  # moving the cursor is not a new version
    assert b2.next_run_at is None
    assert (await store.backlog(T0)).outbox == 2

    occ = await store.get_occurrence(occs[1].id)
    assert occ is not None
    assert occ.state is OccurrenceState.SCHEDULED
    assert occ.schedule_id == b.id
    assert occ.schedule_name == "b"
    assert occ.version == 1
    assert occ.scheduled_for == T0
    assert occ.available_at == T0 + 3 * SEC
    assert occ.attempts == 0
    assert occ.queue == "default"
    assert occ.manual is False
    assert occ.enqueued_at is None and occ.started_at is None and occ.finished_at is None


async def test_materialize_same_batch_twice_is_a_no_op(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    occs = [planned(a, T0)]
    cursors = [CursorAdvance(a.id, 1, T0, T0 + MIN)]
    assert await store.materialize(FENCE, occs, cursors, T0) == MaterializeResult(1, 1, 0)
    assert await store.materialize(FENCE, occs, cursors, T0) == MaterializeResult(0, 0, 1)
    fresh = await store.get_schedule_by_id(a.id)
    assert fresh is not None
    assert fresh.next_run_at == T0 + MIN
    assert (await store.backlog(T0)).outbox == 1
    assert len(await store.list_occurrences(a.id)) == 1


async def test_stale_cursor_inserts_nothing(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    wrong_cursor = CursorAdvance(a.id, 1, T0 - MIN, T0 + MIN)
    result = await store.materialize(FENCE, [planned(a, T0)], [wrong_cursor], T0)
    assert result == MaterializeResult(inserted=0, advanced=0, stale=1)
    assert await store.list_occurrences(a.id) == []
    fresh = await store.get_schedule_by_id(a.id)
    assert fresh is not None
    assert fresh.next_run_at == T0


async def test_changed_version_or_paused_schedule_is_stale(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    updated, _, _ = await store.change_schedule(a.id, 1, a.definition, ScheduleState.ACTIVE, T0, T0, "u")
    stale = await store.materialize(FENCE, [planned(a, T0)], [CursorAdvance(a.id, 1, T0, T0 + MIN)], T0)
    assert stale == MaterializeResult(0, 0, 1)

    await store.change_schedule(a.id, 2, a.definition, ScheduleState.PAUSED, T0, T0, "p")
    paused = await store.materialize(FENCE, [planned(updated, T0)], [CursorAdvance(a.id, 2, T0, T0 + MIN)], T0)
    assert paused == MaterializeResult(0, 0, 1)
    assert await store.list_occurrences(a.id) == []


async def test_only_occurrences_of_moved_cursors_are_inserted(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    b = await add_schedule(store, "b", next_run_at=T0)
    result = await store.materialize(
        FENCE, [planned(a, T0), planned(b, T0)], [CursorAdvance(a.id, 1, T0, T0 + MIN)], T0
    )
    assert result == MaterializeResult(inserted=1, advanced=1, stale=0)
    assert len(await store.list_occurrences(a.id)) == 1
    assert await store.list_occurrences(b.id) == []


async def test_existing_occurrence_id_is_skipped_but_cursor_moves(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    a, oid = await materialize_next(store, a)  # cursor T0 -> T0+1m
    # A replay of the same instant under a newer cursor: the id exists, nothing doubles.
    again = await store.materialize(FENCE, [planned(a, T0)], [CursorAdvance(a.id, 1, T0 + MIN, T0 + 2 * MIN)], T0)
    assert again == MaterializeResult(inserted=0, advanced=1, stale=0)
    assert [o.id for o in await store.list_occurrences(a.id)] == [oid]
    assert (await store.backlog(T0)).outbox == 1


async def test_missed_occurrences_are_recorded_without_outbox(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    missed = planned(a, T0, state=OccurrenceState.MISSED, reason="missed: 20m late, max_lateness 10m")
    ran = planned(a, T0 + MIN)
    result = await store.materialize(FENCE, [missed, ran], [CursorAdvance(a.id, 1, T0, T0 + 2 * MIN)], T0 + 20 * MIN)
    assert result == MaterializeResult(inserted=2, advanced=1, stale=0)
    occ = await store.get_occurrence(missed.id)
    assert occ is not None
    assert occ.state is OccurrenceState.MISSED
    assert occ.reason == "missed: 20m late, max_lateness 10m"
    assert occ.finished_at == T0 + 20 * MIN
    assert (await store.backlog(T0)).outbox == 1
    assert (await store.relay(T0 + 60 * MIN, 100, T0 + 20 * MIN)).moved == 1


async def test_lower_fence_token_commits_nothing(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    b = await add_schedule(store, "b", next_run_at=T0)
    await store.materialize(Fence("shard:0", 5), [planned(a, T0)], [CursorAdvance(a.id, 1, T0, T0 + MIN)], T0)
    before = fenced_count(store)

    with pytest.raises(FencedOut):
        await store.materialize(Fence("shard:0", 4), [planned(b, T0)], [CursorAdvance(b.id, 1, T0, T0 + MIN)], T0)
    assert fenced_count(store) == before + 1
    assert await store.list_occurrences(b.id) == []
    fresh = await store.get_schedule_by_id(b.id)
    assert fresh is not None
    assert fresh.next_run_at == T0
    assert (await store.backlog(T0)).outbox == 1

    # The same token passes again; a higher one passes and shuts out the old one.
    ok = await store.materialize(Fence("shard:0", 5), [planned(b, T0)], [CursorAdvance(b.id, 1, T0, T0 + MIN)], T0)
    assert ok.inserted == 1
    await store.materialize(Fence("shard:0", 6), [], [], T0)
    with pytest.raises(FencedOut):
        await store.materialize(Fence("shard:0", 5), [], [], T0)
    assert fenced_count(store) == before + 2


async def test_fences_are_per_resource(store: Store) -> None:
    await store.materialize(Fence("shard:0", 10), [], [], T0)
    # A low token on another shard is fine: fences do not interfere.
    await store.materialize(Fence("shard:1", 1), [], [], T0)
    with pytest.raises(FencedOut):
        await store.materialize(Fence("shard:0", 9), [], [], T0)


async def test_a_second_store_on_the_same_database_sees_the_fence(store: Store, backend: Backend) -> None:
    zombie = await backend.open_store()
    a = await add_schedule(store, "a", next_run_at=T0)
    await store.materialize(Fence("shard:0", 2), [], [], T0)
    with pytest.raises(FencedOut):
        await zombie.materialize(Fence("shard:0", 1), [planned(a, T0)], [CursorAdvance(a.id, 1, T0, T0 + MIN)], T0)
    assert await store.list_occurrences(a.id) == []


async def test_only_scheduled_or_terminal_occurrences_can_be_planned(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    with pytest.raises(ValueError):
        await store.materialize(
            FENCE, [planned(a, T0, state=OccurrenceState.RUNNING)], [CursorAdvance(a.id, 1, T0, T0 + MIN)], T0
        )
    fresh = await store.get_schedule_by_id(a.id)
    assert fresh is not None and fresh.next_run_at == T0


async def test_direct_materialize_queues_what_the_relay_would(store: Store) -> None:
    """``direct=True`` (direct_dispatch): the same transaction writes the queue rows. The
    occurrences end as the relay would leave them, nothing is left for the relay, a row is
    claimable from its available_at (not before), and MISSED ones are not queued."""
    a = await add_schedule(store, "a", next_run_at=T0)
    b = await add_schedule(store, "b", next_run_at=T0)
    c = await add_schedule(store, "c", next_run_at=T0)
    occs = [
        planned(a, T0),
        planned(b, T0, available_at=T0 + 3 * SEC),
        planned(c, T0, state=OccurrenceState.MISSED, reason="late"),
    ]
    cursors = [CursorAdvance(s.id, 1, T0, T0 + MIN) for s in (a, b, c)]
    result = await store.materialize(FENCE, occs, cursors, T0 - MIN, direct=True)
    assert result == MaterializeResult(inserted=3, advanced=3, stale=0, enqueue_lags=(0.0, 0.0))  # staged ahead
    backlog = await store.backlog(T0 - MIN)
    assert backlog.outbox == 0
    assert (await store.relay(T0 + MIN, 100, T0)).moved == 0  # nothing left to move
    for occ_id in (occs[0].id, occs[1].id):
        occ = await store.get_occurrence(occ_id)
        assert occ is not None and occ.state is OccurrenceState.ENQUEUED and occ.enqueued_at == T0 - MIN
    missed = await store.get_occurrence(occs[2].id)
    assert missed is not None and missed.state is OccurrenceState.MISSED

    assert await store.claim(["default"], "w1", 10, LEASE, T0 - SEC) == []  # not visible yet
    first = await store.claim(["default"], "w1", 10, LEASE, T0)
    assert [c.occurrence_id for c in first] == [occs[0].id]
    second = await store.claim(["default"], "w1", 10, LEASE, T0 + 3 * SEC)
    assert [c.occurrence_id for c in second] == [occs[1].id]

    # Idempotent like the two-step path: the same batch again inserts and queues nothing.
    again = await store.materialize(FENCE, occs, [CursorAdvance(a.id, 1, T0 + MIN, T0 + 2 * MIN)], T0, direct=True)
    assert again.inserted == 0
    assert await store.claim(["default"], "w1", 10, LEASE, T0 + MIN) == []


async def test_direct_materialize_says_how_late_it_staged_each_queued_row(store: Store) -> None:
    """The ``enqueued`` lag (clockd_schedule_lag_seconds) of each row a direct batch
    queued: now - available_at, 0 when staged ahead; none for a MISSED row, a row already
    there, or a schedule whose cursor moved meanwhile. (The leader's sampler read these
    from the rows due in its last 10 s, so a materializer behind by more never showed.)"""
    a = await add_schedule(store, "a", next_run_at=T0)
    b = await add_schedule(store, "b", next_run_at=T0)
    c = await add_schedule(store, "c", next_run_at=T0)
    d = await add_schedule(store, "d", next_run_at=T0 + MIN)  # its cursor is not at T0: stale
    occs = [
        planned(a, T0),
        planned(a, T0 + 30 * SEC),
        planned(a, T0 + 2 * MIN),  # ahead of now
        planned(b, T0, available_at=T0 + 10 * SEC),
        planned(c, T0, state=OccurrenceState.MISSED, reason="late"),
        planned(d, T0),
    ]
    cursors = [CursorAdvance(s.id, 1, T0, T0 + 3 * MIN) for s in (a, b, c, d)]
    now = T0 + 90 * SEC  # a materializer 90 s behind
    result = await store.materialize(FENCE, occs, cursors, now, direct=True)
    assert (result.inserted, result.stale) == (5, 1)
    assert sorted(result.enqueue_lags) == pytest.approx([0.0, 60.0, 80.0, 90.0])
    again = await store.materialize(
        FENCE, occs[:1], [CursorAdvance(a.id, 1, T0 + 3 * MIN, T0 + 4 * MIN)], now, direct=True
    )
    assert (again.inserted, again.enqueue_lags) == (0, ())


async def test_the_relay_says_how_late_it_staged_each_row(store: Store) -> None:
    s = await add_schedule(store, "five", next_run_at=T0)
    rows = [planned(s, T0 + i * SEC) for i in range(5)]
    await store.materialize(FENCE, rows, [CursorAdvance(s.id, 1, T0, T0 + MIN)], T0 - MIN)
    relayed = await store.relay(T0 + MIN, 100, T0 + timedelta(milliseconds=2500))  # due T0 … T0+4s
    assert relayed.moved == 5
    assert sorted(relayed.enqueue_lags) == pytest.approx([0.0, 0.0, 0.5, 1.5, 2.5])
    assert await store.relay(T0 + MIN, 100, T0 + 3 * SEC) == (0, ())
