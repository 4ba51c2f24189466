"""Occurrences as clockctl and the leader see them: cancel on change, run-now, lookups,
retention, backlog."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC

import pytest

from clockd.core.ids import manual_occurrence_id, new_schedule_id, occurrence_id
from clockd.core.model import AttemptOutcome, OccurrenceState, ScheduleState
from clockd.errors import Conflict, FencedOut, NotFound
from clockd.store import Backlog, Completion, CursorAdvance, Fence, QueueReady, Store

from .support import (
    FENCE,
    LEASE,
    MIN,
    SEC,
    T0,
    add_schedule,
    claim_one,
    definition,
    enqueue,
    materialize_next,
    planned,
)

# -- change_schedule cancels what no worker holds -------------------------------------------


async def test_update_cancels_unclaimed_older_occurrences_but_not_claimed_ones(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    s, running_id = await enqueue(store, s)  # T0: RUNNING
    running = await claim_one(store)
    s, done_id = await enqueue(store, s)  # T0+1m: SUCCEEDED
    done = await claim_one(store, T0 + MIN)
    await store.finish([Completion(done.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED)], T0 + MIN)
    s, retry_id = await enqueue(store, s)  # T0+2m: RETRY_WAIT
    retry_claim = await claim_one(store, T0 + 2 * MIN)
    await store.finish(
        [Completion(retry_claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.RETRY_WAIT, retry_at=T0 + 5 * MIN)],
        T0 + 2 * MIN,
    )
    s, enqueued_id = await enqueue(store, s)  # T0+3m: ENQUEUED
    s, scheduled_id = await materialize_next(store, s)  # T0+4m: SCHEDULED (outbox)

    updated, canceled, _ = await store.change_schedule(
        s.id, 1, definition("a", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0 + 10 * MIN, T0 + 5 * MIN, "updated: expr"
    )
    assert canceled == 3
    assert updated.version == 2

    states = {o.id: o for o in await store.list_occurrences(s.id)}
    assert states[running_id].state is OccurrenceState.RUNNING
    assert states[done_id].state is OccurrenceState.SUCCEEDED
    # */5 does not fire at 00:03 or 00:04: those are dropped, and say so; the retrying one
    # already ran once, so it is canceled, never re-planned.
    dropped = "updated: expr; version 2 does not fire at this instant"
    for oid, reason in ((enqueued_id, dropped), (retry_id, "updated: expr"), (scheduled_id, dropped)):
        assert states[oid].state is OccurrenceState.CANCELED
        assert states[oid].reason == reason
        assert states[oid].finished_at == T0 + 5 * MIN
    backlog = await store.backlog(T0 + 5 * MIN)
    assert (backlog.outbox, backlog.queued, backlog.running) == (0, 0, 1)
    assert await store.claim(["default"], "w", 10, LEASE, T0 + 9 * MIN) == []
    # The claimed one finishes normally under the old version.
    accepted = await store.finish(
        [Completion(running.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED)], T0 + 6 * MIN
    )
    assert accepted == {running.lease_token}


async def test_update_replans_the_materialized_instant_once(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    s, old_id = await materialize_next(store, s)
    updated, canceled, replanned = await store.change_schedule(
        s.id, 1, s.definition, ScheduleState.ACTIVE, T0 + MIN, T0, "u"
    )
    assert canceled == 1
    assert [(r.scheduled_for, r.replaced, r.occurrence_id, r.state) for r in replanned] == [
        (T0, old_id, occurrence_id(s.id, 2, T0), OccurrenceState.SCHEDULED)
    ]
    # The materializer reads the new version and plans from its cursor; planning the
    # re-planned instant again (a stale read, a retried batch) inserts nothing: same id.
    again, new = planned(updated, T0), planned(updated, T0 + MIN)
    result = await store.materialize(FENCE, [again, new], [CursorAdvance(s.id, 2, T0 + MIN, T0 + 2 * MIN)], T0)
    assert result.inserted == 1
    occs = await store.list_occurrences(s.id)
    assert sorted((o.version, o.scheduled_for, o.state) for o in occs) == [
        (1, T0, OccurrenceState.CANCELED),
        (2, T0, OccurrenceState.SCHEDULED),
        (2, T0 + MIN, OccurrenceState.SCHEDULED),
    ]
    assert (await store.backlog(T0)).outbox == 2  # one outbox row each, none for the canceled one


async def test_manual_occurrences_survive_update_but_not_delete(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=None)
    queued = await store.add_manual_occurrence(s, manual_occurrence_id(s.id, T0, "n1"), 3, T0)
    assert (await store.relay(T0, 100, T0)).moved == 1
    waiting = await store.add_manual_occurrence(s, manual_occurrence_id(s.id, T0, "n2"), 3, T0 + SEC)
    s, canceled, _ = await store.change_schedule(s.id, 1, s.definition, ScheduleState.PAUSED, None, T0, "paused")
    assert canceled == 0
    for manual, state in [(queued, OccurrenceState.ENQUEUED), (waiting, OccurrenceState.SCHEDULED)]:
        occ = await store.get_occurrence(manual.id)
        assert occ is not None
        assert occ.state is state
    backlog = await store.backlog(T0)
    assert (backlog.outbox, backlog.queued) == (1, 1)  # both still on their way

    _, canceled, _ = await store.change_schedule(s.id, 2, s.definition, ScheduleState.DELETED, None, T0, "deleted")
    assert canceled == 2
    for manual in (queued, waiting):
        occ = await store.get_occurrence(manual.id)
        assert occ is not None
        assert occ.state is OccurrenceState.CANCELED
        assert occ.reason == "deleted"
    backlog = await store.backlog(T0)
    assert (backlog.outbox, backlog.queued) == (0, 0)


# -- run-now ---------------------------------------------------------------------------------


async def test_manual_occurrence_runs_through_the_queue(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0, queue="ops")
    oid = manual_occurrence_id(s.id, T0 + 30 * SEC, "nonce")
    occ = await store.add_manual_occurrence(s, oid, 1, T0 + 30 * SEC)
    assert occ.id == oid
    assert occ.manual is True
    assert occ.state is OccurrenceState.SCHEDULED
    assert occ.scheduled_for == occ.available_at == T0 + 30 * SEC
    assert occ.schedule_name == "a"
    assert occ.queue == "ops"
    assert await store.get_occurrence(oid) == occ

    assert (await store.relay(T0 + 30 * SEC, 100, T0 + 30 * SEC)).moved == 1
    claim = await claim_one(store, T0 + 30 * SEC, queue="ops")
    assert claim.occurrence_id == oid
    assert claim.max_attempts == 1
    # Its own id: the planned occurrence of the same instant is still materialized.
    s, planned_id = await materialize_next(store, s, at=T0 + 30 * SEC)
    assert planned_id != oid

    with pytest.raises(Conflict):
        await store.add_manual_occurrence(s, oid, 1, T0 + MIN)


# -- lookups ---------------------------------------------------------------------------------


async def test_list_occurrences_newest_first_with_limit(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    b = await add_schedule(store, "b", next_run_at=T0 + 30 * SEC)
    ids_a = []
    for _ in range(3):
        a, oid = await materialize_next(store, a)
        ids_a.append(oid)
    b, id_b = await materialize_next(store, b)
    assert [o.id for o in await store.list_occurrences(a.id)] == ids_a[::-1]
    assert [o.id for o in await store.list_occurrences(a.id, limit=2)] == ids_a[:0:-1]
    everything = await store.list_occurrences()
    assert [o.scheduled_for for o in everything] == [T0 + 2 * MIN, T0 + MIN, T0 + 30 * SEC, T0]
    assert everything[2].id == id_b
    assert everything[2].schedule_name == "b"
    assert await store.list_occurrences(new_schedule_id()) == []
    assert all(o.scheduled_for.tzinfo is UTC for o in everything)


async def test_get_occurrence_by_id_and_prefix(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=None)
    one = "abcdef01-0000-4000-8000-000000000001"
    two = "abcdef02-0000-4000-8000-000000000002"
    await store.add_manual_occurrence(s, one, 1, T0)
    await store.add_manual_occurrence(s, two, 1, T0)

    found = await store.get_occurrence(one)
    assert found is not None and found.id == one
    found = await store.get_occurrence("abcdef02")
    assert found is not None and found.id == two
    found = await store.get_occurrence("ABCDEF01-0000")
    assert found is not None and found.id == one
    with pytest.raises(Conflict):
        await store.get_occurrence("abcdef0")
    assert await store.get_occurrence("abcde") is None  # shorter than 6: never a prefix
    assert await store.get_occurrence("abcdef03") is None
    assert await store.get_occurrence("abc%") is None
    assert await store.get_occurrence("______") is None


async def test_list_attempts_oldest_first(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    _, oid = await enqueue(store, s)
    now = T0
    for _ in range(3):
        claim = await claim_one(store, now)
        retry = Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.RETRY_WAIT, retry_at=now + SEC)
        await store.finish([retry], now)
        now += SEC
    assert [a.number for a in await store.list_attempts(oid)] == [1, 2, 3]
    assert await store.list_attempts("no-such-occurrence") == []


# -- prune -----------------------------------------------------------------------------------


async def test_prune_deletes_old_terminal_occurrences_and_their_attempts(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    s, old_id = await enqueue(store, s)
    claim = await claim_one(store)
    await store.finish([Completion(claim.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED)], T0)
    s, recent_id = await enqueue(store, s)
    claim = await claim_one(store, T0 + MIN)
    await store.finish(
        [Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.DEAD, error="x")], T0 + 2 * MIN
    )
    s, queued_id = await enqueue(store, s)
    missed = planned(s, T0 + 3 * MIN, state=OccurrenceState.MISSED, reason="late")
    await store.materialize(FENCE, [missed], [CursorAdvance(s.id, 1, T0 + 3 * MIN, T0 + 4 * MIN)], T0 + MIN)

    assert await store.prune(FENCE, T0 + MIN, 100, T0 + MIN) == 1
    assert await store.get_occurrence(old_id) is None
    assert await store.list_attempts(old_id) == []
    assert await store.prune(FENCE, T0 + 10 * MIN, 100, T0 + 10 * MIN) == 2  # the dead and the missed
    remaining = [o.id for o in await store.list_occurrences(s.id)]
    assert remaining == [queued_id]
    assert await store.get_occurrence(recent_id) is None


async def test_prune_keeps_an_occurrence_until_it_is_both_due_and_finished_before_the_cutoff(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    ahead = planned(s, T0 + 10 * MIN, state=OccurrenceState.MISSED, reason="ended ahead of its instant")
    await store.materialize(FENCE, [ahead], [CursorAdvance(s.id, 1, T0, T0 + 11 * MIN)], T0)
    assert await store.prune(FENCE, T0 + 5 * MIN, 100, T0 + 5 * MIN) == 0  # finished before, due after
    assert await store.prune(FENCE, T0 + 11 * MIN, 100, T0 + 11 * MIN) == 1


async def test_prune_respects_limit_and_fence(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    occs = [planned(s, T0 - (5 - i) * MIN, state=OccurrenceState.MISSED, reason="late") for i in range(5)]
    await store.materialize(FENCE, occs, [CursorAdvance(s.id, 1, T0, T0 + 5 * MIN)], T0)
    assert await store.prune(Fence("leader", 2), T0 + MIN, 3, T0 + MIN) == 3
    with pytest.raises(FencedOut):
        await store.prune(Fence("leader", 1), T0 + MIN, 3, T0 + MIN)
    assert len(await store.list_occurrences(s.id)) == 2
    assert await store.prune(Fence("leader", 2), T0 + MIN, 3, T0 + MIN) == 2


# -- backlog, tokens, clock ------------------------------------------------------------------


async def test_backlog_counts(store: Store) -> None:
    assert await store.backlog(T0) == Backlog(0, 0, 0, 0, None)
    await add_schedule(store, "due", next_run_at=T0 - MIN)
    await add_schedule(store, "later", next_run_at=T0 + MIN)
    q = await add_schedule(store, "q", next_run_at=T0 - 2 * MIN)
    q, _ = await enqueue(store, q)  # queued, visible at T0-2m; cursor moves to T0-1m (due)
    r = await add_schedule(store, "r", next_run_at=T0 + 5 * MIN)
    r, _ = await enqueue(store, r)  # queued, visible at T0+5m
    await claim_one(store, T0 - MIN)  # q is running
    p = await add_schedule(store, "p", next_run_at=T0 - 30 * SEC)
    p, _ = await enqueue(store, p)  # queued, visible at T0-30s: claimable at T0
    await materialize_next(store, r)  # outbox
    backlog = await store.backlog(T0)
    # r's queue row, visible at T0+5m, is staged for later: not queued (a horizon planned
    # ahead by direct dispatch is not a backlog).
    ready = QueueReady("default", 1, T0 - 30 * SEC)
    assert backlog == Backlog(due_schedules=2, outbox=1, queued=1, running=1, oldest_queued_at=T0 - 30 * SEC,
                              queues=(ready,))  # fmt: skip
    assert await store.backlog(T0 - 40 * SEC) == Backlog(2, 1, 0, 1, None, (QueueReady("default", 0, None),))
    assert [(q.ready, q.staged) for q in await store.queue_stats(T0)] == [(1, 1)]


async def test_next_token_counts_per_resource(store: Store) -> None:
    assert [await store.next_token("leader") for _ in range(3)] == [1, 2, 3]
    assert await store.next_token("shard:7") == 1
    assert await store.next_token("leader") == 4


async def test_server_time_is_aware_utc(store: Store) -> None:
    now = await store.server_time()
    offset = now.utcoffset()
    assert offset is not None
    assert offset.total_seconds() == 0


async def test_run_now_of_an_unknown_schedule_is_not_found(store: Store) -> None:
    s = await add_schedule(store, "a")
    ghost = replace(s, id=new_schedule_id())
    with pytest.raises(NotFound):
        await store.add_manual_occurrence(ghost, manual_occurrence_id(ghost.id, T0, "n"), 1, T0)
