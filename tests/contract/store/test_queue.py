"""The relay and the worker's side of the queue: relay, claim, extend_leases."""

from __future__ import annotations

import asyncio

from clockd.core.model import AttemptOutcome, CommandTarget, NoopTarget, OccurrenceState, RetryPolicy
from clockd.store import Completion, CursorAdvance, Store

from .support import (
    FENCE,
    LEASE,
    MIN,
    SEC,
    T0,
    Backend,
    add_schedule,
    claim_one,
    enqueue,
    materialize_next,
    planned,
    queue_rows,
    running,
)

# -- relay -----------------------------------------------------------------------------------


async def test_relay_moves_only_rows_available_by_until(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    b = await add_schedule(store, "b", next_run_at=T0 + MIN)
    await materialize_next(store, a)
    await materialize_next(store, b)
    assert (await store.relay(T0 + 30 * SEC, 100, T0 - 10 * SEC)).moved == 1
    backlog = await store.backlog(T0)
    assert (backlog.outbox, backlog.queued) == (1, 1)
    assert (await store.relay(T0 + MIN, 100, T0 + 50 * SEC)).moved == 1
    assert (await store.backlog(T0)).outbox == 0


async def test_relay_marks_enqueued_and_is_idempotent(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    _, oid = await materialize_next(store, a)
    assert (await store.relay(T0, 100, T0 - 5 * SEC)).moved == 1
    occ = await store.get_occurrence(oid)
    assert occ is not None
    assert occ.state is OccurrenceState.ENQUEUED
    assert occ.enqueued_at == T0 - 5 * SEC
    assert (await store.relay(T0, 100, T0)).moved == 0
    backlog = await store.backlog(T0)
    assert (backlog.outbox, backlog.queued, backlog.running) == (0, 1, 0)
    assert backlog.oldest_queued_at == T0


async def test_relay_respects_limit_oldest_first(store: Store) -> None:
    schedules = [await add_schedule(store, f"s{i}", next_run_at=T0 + i * SEC) for i in range(5)]
    ids = []
    for s in reversed(schedules):
        ids.append((await materialize_next(store, s))[1])
    assert (await store.relay(T0 + MIN, 2, T0)).moved == 2
    enqueued = {o.id for o in await store.list_occurrences() if o.state is OccurrenceState.ENQUEUED}
    assert enqueued == set(ids[-2:])  # T0 and T0+1s
    assert (await store.relay(T0 + MIN, 10, T0)).moved == 3


async def test_relay_staged_ahead_is_invisible_until_available_at(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    await materialize_next(store, a, available_at=T0 + 7 * SEC)
    assert (await store.relay(T0 + MIN, 100, T0 - MIN)).moved == 1
    assert await store.claim(["default"], "w", 10, LEASE, T0 + 6 * SEC) == []
    claims = await store.claim(["default"], "w", 10, LEASE, T0 + 7 * SEC)
    assert len(claims) == 1


# -- claim -----------------------------------------------------------------------------------


async def test_claim_hands_out_everything_a_worker_needs(store: Store) -> None:
    retry = RetryPolicy(retries=4, backoff=3 * SEC, backoff_max=2 * MIN, permanent_exit_codes=(64,))
    s = await add_schedule(store, "report", retry=retry, timeout=5 * MIN)
    s, oid = await enqueue(store, s, max_attempts=5)
    claim = await claim_one(store, T0 + SEC, worker="w-7")
    assert claim.occurrence_id == oid
    assert claim.attempt == 1
    assert claim.lease_token
    assert claim.schedule_id == s.id
    assert claim.schedule_name == "report"
    assert claim.version == 1
    assert claim.scheduled_for == T0
    assert claim.target == s.definition.target
    assert claim.timeout == 5 * MIN
    assert claim.max_attempts == 5
    assert claim.retry_backoff == 3 * SEC
    assert claim.retry_backoff_max == 2 * MIN
    assert claim.permanent_exit_codes == (64,)
    assert claim.lease_until == T0 + SEC + LEASE

    occ = await store.get_occurrence(oid)
    assert occ is not None
    assert occ.state is OccurrenceState.RUNNING
    assert occ.attempts == 1
    assert occ.started_at == T0 + SEC
    [attempt] = await store.list_attempts(oid)
    assert attempt.number == 1
    assert attempt.lease_token == claim.lease_token
    assert attempt.worker_id == "w-7"
    assert attempt.started_at == T0 + SEC
    assert attempt.outcome is AttemptOutcome.RUNNING
    assert attempt.finished_at is None
    backlog = await store.backlog(T0)
    assert (backlog.queued, backlog.running) == (0, 1)


async def test_claims_of_alike_and_different_definitions_each_get_their_own(store: Store) -> None:
    # The claim reads a definition's target and retry policy as JSON texts and decodes each
    # text once (clockd.store.codec.claim_parts): schedules alike share what was decoded,
    # and none gets another's target, retry or timeout.
    fast = RetryPolicy(retries=1, backoff=2 * SEC, backoff_max=4 * SEC, permanent_exit_codes=(3, 4))
    alike = [await add_schedule(store, f"alike-{i}", target=CommandTarget(argv=("echo", "same"))) for i in range(2)]
    other = await add_schedule(store, "other", target=CommandTarget(argv=("echo", "other"), env=(("A", "1"),)),
                               retry=fast, timeout=7 * SEC)  # fmt: skip
    plain = await add_schedule(store, "plain", target=NoopTarget())
    for s in (*alike, other, plain):
        await enqueue(store, s)
    claims = {c.schedule_name: c for c in await store.claim(["default"], "w1", 10, LEASE, T0 + SEC)}
    assert sorted(claims) == ["alike-0", "alike-1", "other", "plain"]
    assert claims["alike-0"].target == claims["alike-1"].target == CommandTarget(argv=("echo", "same"))
    assert claims["other"].target == CommandTarget(argv=("echo", "other"), env=(("A", "1"),))
    assert (claims["other"].retry_backoff, claims["other"].retry_backoff_max) == (2 * SEC, 4 * SEC)
    assert claims["other"].permanent_exit_codes == (3, 4) and claims["other"].timeout == 7 * SEC
    assert claims["plain"].target == NoopTarget() and claims["plain"].timeout is None
    default = RetryPolicy()
    assert (claims["plain"].retry_backoff, claims["plain"].permanent_exit_codes) == (default.backoff, ())


async def test_claim_respects_visible_at_queue_and_limit(store: Store) -> None:
    for i in range(3):
        s = await add_schedule(store, f"d{i}", next_run_at=T0 + i * SEC)
        await enqueue(store, s)
    gpu = await add_schedule(store, "gpu", queue="gpu", next_run_at=T0)
    _, gpu_id = await enqueue(store, gpu)

    assert await store.claim(["default"], "w", 10, LEASE, T0 - SEC) == []
    assert await store.claim(["nothing-here"], "w", 10, LEASE, T0 + MIN) == []
    assert await store.claim([], "w", 10, LEASE, T0 + MIN) == []
    first = await store.claim(["default"], "w", 2, LEASE, T0 + MIN)
    assert [c.schedule_name for c in first] == ["d0", "d1"]  # oldest visible_at first
    only_gpu = await store.claim(["gpu"], "w", 10, LEASE, T0 + MIN)
    assert [c.occurrence_id for c in only_gpu] == [gpu_id]
    rest = await store.claim(["default", "gpu"], "w", 10, LEASE, T0 + MIN)
    assert [c.schedule_name for c in rest] == ["d2"]


async def test_claim_across_queues_is_oldest_first(store: Store) -> None:
    for name, queue, offset in [("a", "q1", 3), ("b", "q2", 1), ("c", "q1", 2), ("d", "q2", 4)]:
        s = await add_schedule(store, name, queue=queue, next_run_at=T0 + offset * SEC)
        await enqueue(store, s)
    claims = await store.claim(["q1", "q2"], "w", 3, LEASE, T0 + MIN)
    assert [c.schedule_name for c in claims] == ["b", "c", "a"]


async def test_next_visible_is_when_the_asked_queues_next_unleased_row_becomes_claimable(store: Store) -> None:
    """What an idle worker sleeps until (instead of a whole poll): only rows not yet
    visible at ``now``, only unleased ones, only the asked queues."""
    for name, queue, offset in [("a", "q1", 30), ("b", "q2", 10), ("c", "q1", 20), ("d", "q3", 5)]:
        s = await add_schedule(store, name, queue=queue, next_run_at=T0 + offset * SEC)
        await enqueue(store, s)
    assert await store.next_visible(["q1", "q2"], T0) == T0 + 10 * SEC
    assert await store.next_visible(["q1", "q1"], T0) == T0 + 20 * SEC
    assert await store.next_visible(["q1", "q2"], T0 + 10 * SEC) == T0 + 20 * SEC  # b: visible already
    assert await store.next_visible(["q1"], T0 + 30 * SEC) is None
    assert await store.next_visible(["nothing-here"], T0) is None
    assert await store.next_visible([], T0) is None
    [c] = await store.claim(["q1"], "w", 1, LEASE, T0 + 25 * SEC)
    assert c.schedule_name == "c"
    assert await store.next_visible(["q1"], T0) == T0 + 30 * SEC  # c is leased


async def test_two_claims_in_a_row_never_share_a_row(store: Store) -> None:
    for i in range(5):
        await enqueue(store, await add_schedule(store, f"s{i}", next_run_at=T0))
    first = await store.claim(["default"], "w1", 3, LEASE, T0)
    second = await store.claim(["default"], "w2", 3, LEASE, T0)
    third = await store.claim(["default"], "w3", 3, LEASE, T0)
    assert (len(first), len(second), len(third)) == (3, 2, 0)
    ids = [c.occurrence_id for c in first + second]
    assert len(set(ids)) == 5
    tokens = [c.lease_token for c in first + second]
    assert len(set(tokens)) == 5


async def test_concurrent_claimers_on_separate_stores_never_share_a_row(store: Store, backend: Backend) -> None:
    for i in range(40):
        await enqueue(store, await add_schedule(store, f"s{i}", next_run_at=T0))
    others = [await backend.open_store() for _ in range(3)]
    batches = await asyncio.gather(
        *(s.claim(["default"], f"w{n}", 7, LEASE, T0) for n in range(4) for s in [store, *others])
    )
    ids = [c.occurrence_id for batch in batches for c in batch]
    assert len(ids) == 40
    assert len(set(ids)) == 40


async def test_canceled_occurrences_are_never_handed_out(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    s, oid = await enqueue(store, s)
    _, canceled, _ = await store.change_schedule(s.id, 1, s.definition, s.state, T0 + MIN, T0, "updated")
    assert canceled == 1
    assert await store.claim(["default"], "w", 10, LEASE, T0 + MIN) == []
    occ = await store.get_occurrence(oid)
    assert occ is not None
    assert occ.state is OccurrenceState.CANCELED


async def test_materialized_not_relayed_is_not_claimable(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    await store.materialize(FENCE, [planned(s, T0)], [CursorAdvance(s.id, 1, T0, T0 + MIN)], T0)
    assert await store.claim(["default"], "w", 10, LEASE, T0 + MIN) == []


# -- extend_leases ---------------------------------------------------------------------------


async def test_extend_leases_returns_only_held_tokens(store: Store) -> None:
    await enqueue(store, await add_schedule(store, "a", next_run_at=T0))
    await enqueue(store, await add_schedule(store, "b", next_run_at=T0))
    a, b = await store.claim(["default"], "w", 2, LEASE, T0)
    await store.release([b.lease_token], T0)
    held = await store.extend_leases([a.lease_token, b.lease_token, "not-a-token"], LEASE, T0 + 20 * SEC)
    assert held == {a.lease_token}
    assert await store.extend_leases([], LEASE, T0) == set()


async def test_extended_lease_is_not_reaped_at_the_old_expiry(store: Store) -> None:
    await enqueue(store, await add_schedule(store, "a", next_run_at=T0))
    claim = await claim_one(store)
    await store.extend_leases([claim.lease_token], LEASE, T0 + 20 * SEC)
    assert await store.reap_expired(FENCE, 100, T0 + LEASE + SEC) == []
    reaped = await store.reap_expired(FENCE, 100, T0 + 20 * SEC + LEASE + SEC)
    assert [r.occurrence_id for r in reaped] == [claim.occurrence_id]


# -- the queue's upkeep (the leader's vacuum) -----------------------------------------------


async def test_vacuum_queue_keeps_every_queued_and_leased_row(store: Store) -> None:
    """The leader vacuums the queue every queue_vacuum_every while workers claim and
    finish: nothing queued or leased may go, and the claims go on as before."""
    _, first = await running(store, "first")
    waiting = await add_schedule(store, "waiting")
    await enqueue(store, waiting)
    assert await store.vacuum_queue() is True
    assert await store.extend_leases([first.lease_token], LEASE, T0 + SEC) == {first.lease_token}
    second = await claim_one(store, T0 + SEC, worker="w2")
    assert second.schedule_id == waiting.id
    assert await store.vacuum_queue() is True
    done = [Completion(c.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED) for c in (first, second)]
    assert await store.finish(done, T0 + 2 * SEC) == {first.lease_token, second.lease_token}
    assert await queue_rows(store) == 0
