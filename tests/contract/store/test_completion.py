"""How attempts end: finish (success, retry, dead), release, and the leader's reaper."""

from __future__ import annotations

import pytest

from clockd.core.model import AttemptOutcome, OccurrenceState
from clockd.errors import FencedOut
from clockd.store import Completion, Fence, Reaped, Store

from .support import FENCE, LEASE, MIN, SEC, T0, add_schedule, claim_one, enqueue, queue_rows, running

SUCCESS = (AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED)


# -- finish ----------------------------------------------------------------------------------


async def test_finish_success(store: Store) -> None:
    _, claim = await running(store)
    done = Completion(claim.lease_token, *SUCCESS, exit_code=0, output="tail of stdout\n")
    assert await store.finish([done], T0 + 5 * SEC) == {claim.lease_token}

    occ = await store.get_occurrence(claim.occurrence_id)
    assert occ is not None
    assert occ.state is OccurrenceState.SUCCEEDED
    assert occ.finished_at == T0 + 5 * SEC
    assert occ.exit_code == 0
    assert occ.attempts == 1
    [attempt] = await store.list_attempts(claim.occurrence_id)
    assert attempt.outcome is AttemptOutcome.SUCCEEDED
    assert attempt.finished_at == T0 + 5 * SEC
    assert attempt.exit_code == 0
    assert attempt.output == "tail of stdout\n"
    backlog = await store.backlog(T0)
    assert (backlog.queued, backlog.running) == (0, 0)
    # Finishing twice changes nothing.
    assert await store.finish([done], T0 + 6 * SEC) == set()
    assert await store.claim(["default"], "w", 10, LEASE, T0 + MIN) == []


async def test_finish_retry_redelivers_same_occurrence_as_attempt_two(store: Store) -> None:
    _, claim = await running(store)
    failed = Completion(
        claim.lease_token,
        AttemptOutcome.FAILED,
        OccurrenceState.RETRY_WAIT,
        retry_at=T0 + 40 * SEC,
        exit_code=3,
        output="boom",
        error="exit code 3",
    )
    assert await store.finish([failed], T0 + 10 * SEC) == {claim.lease_token}
    occ = await store.get_occurrence(claim.occurrence_id)
    assert occ is not None
    assert occ.state is OccurrenceState.RETRY_WAIT
    assert occ.finished_at is None
    assert occ.exit_code == 3

    assert await store.claim(["default"], "w", 10, LEASE, T0 + 39 * SEC) == []
    second = await claim_one(store, T0 + 40 * SEC, worker="w2")
    assert second.occurrence_id == claim.occurrence_id
    assert second.attempt == 2
    assert second.lease_token != claim.lease_token
    occ = await store.get_occurrence(claim.occurrence_id)
    assert occ is not None
    assert occ.state is OccurrenceState.RUNNING
    assert occ.started_at == T0  # the first attempt's start

    attempts = await store.list_attempts(claim.occurrence_id)
    assert [(a.number, a.outcome, a.worker_id) for a in attempts] == [
        (1, AttemptOutcome.FAILED, "w1"),
        (2, AttemptOutcome.RUNNING, "w2"),
    ]
    assert attempts[0].error == "exit code 3"
    assert attempts[0].output == "boom"


async def test_finish_dead(store: Store) -> None:
    _, claim = await running(store)
    dead = Completion(
        claim.lease_token, AttemptOutcome.ERROR, OccurrenceState.DEAD, error="executable not found: /bin/nope"
    )
    assert await store.finish([dead], T0 + SEC) == {claim.lease_token}
    occ = await store.get_occurrence(claim.occurrence_id)
    assert occ is not None
    assert occ.state is OccurrenceState.DEAD
    assert occ.finished_at == T0 + SEC
    assert occ.reason is not None and "executable not found" in occ.reason
    assert await store.claim(["default"], "w", 10, LEASE, T0 + MIN) == []
    assert await queue_rows(store) == 0


async def test_finish_batch_accepts_only_held_tokens(store: Store) -> None:
    for name in ["a", "b"]:
        await enqueue(store, await add_schedule(store, name, next_run_at=T0))
    a, b = await store.claim(["default"], "w", 2, LEASE, T0)
    accepted = await store.finish(
        [
            Completion(a.lease_token, *SUCCESS),
            Completion(b.lease_token, AttemptOutcome.FAILED, OccurrenceState.RETRY_WAIT, retry_at=T0 + MIN),
            Completion("stale-or-forged", *SUCCESS),
        ],
        T0 + SEC,
    )
    assert accepted == {a.lease_token, b.lease_token}


async def test_stale_token_after_reap_and_reclaim_changes_nothing(store: Store) -> None:
    _, first = await running(store)
    reaped = await store.reap_expired(FENCE, 100, T0 + LEASE + SEC)
    assert reaped == [Reaped(first.occurrence_id, 1, OccurrenceState.RETRY_WAIT)]
    second = await claim_one(store, T0 + LEASE + 2 * SEC, worker="w2")
    assert second.attempt == 2

    # The zombie worker finishes late: rejected, and the newer attempt's record stands.
    late = Completion(first.lease_token, *SUCCESS, exit_code=0, output="zombie")
    assert await store.finish([late], T0 + LEASE + 3 * SEC) == set()
    assert await store.extend_leases([first.lease_token], LEASE, T0 + LEASE + 3 * SEC) == set()
    assert await store.release([first.lease_token], T0 + LEASE + 3 * SEC) == 0
    occ = await store.get_occurrence(first.occurrence_id)
    assert occ is not None
    assert occ.state is OccurrenceState.RUNNING
    assert occ.attempts == 2
    attempts = await store.list_attempts(first.occurrence_id)
    assert [(a.number, a.outcome) for a in attempts] == [(1, AttemptOutcome.LOST), (2, AttemptOutcome.RUNNING)]
    assert all(a.output != "zombie" for a in attempts)

    assert await store.finish([Completion(second.lease_token, *SUCCESS)], T0 + LEASE + 4 * SEC) == {second.lease_token}


# -- release ---------------------------------------------------------------------------------


async def test_release_makes_the_row_claimable_at_once(store: Store) -> None:
    _, claim = await running(store)
    assert await store.release([claim.lease_token, "unknown"], T0 + SEC) == 1
    occ = await store.get_occurrence(claim.occurrence_id)
    assert occ is not None
    assert occ.state is OccurrenceState.ENQUEUED
    assert occ.attempts == 0
    assert await store.list_attempts(claim.occurrence_id) == []
    backlog = await store.backlog(T0)
    assert (backlog.queued, backlog.running) == (1, 0)

    again = await claim_one(store, T0 + SEC, worker="w2")
    assert again.occurrence_id == claim.occurrence_id
    assert again.attempt == 1
    assert await store.release([], T0) == 0


async def test_release_of_a_retry_restores_retry_wait(store: Store) -> None:
    _, claim = await running(store)
    retry = Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.RETRY_WAIT, retry_at=T0 + SEC)
    await store.finish([retry], T0 + SEC)
    second = await claim_one(store, T0 + 2 * SEC)
    assert await store.release([second.lease_token], T0 + 3 * SEC) == 1
    occ = await store.get_occurrence(claim.occurrence_id)
    assert occ is not None
    assert occ.state is OccurrenceState.RETRY_WAIT
    assert occ.attempts == 1
    assert [a.number for a in await store.list_attempts(claim.occurrence_id)] == [1]
    third = await claim_one(store, T0 + 3 * SEC)
    assert third.attempt == 2


# -- reap_expired ----------------------------------------------------------------------------


async def test_reap_waits_for_the_lease_to_expire(store: Store) -> None:
    await running(store)
    assert await store.reap_expired(FENCE, 100, T0 + LEASE) == []


async def test_reap_records_lost_attempt_and_redelivers(store: Store) -> None:
    _, claim = await running(store)
    now = T0 + LEASE + SEC
    assert await store.reap_expired(FENCE, 100, now) == [Reaped(claim.occurrence_id, 1, OccurrenceState.RETRY_WAIT)]
    [attempt] = await store.list_attempts(claim.occurrence_id)
    assert attempt.outcome is AttemptOutcome.LOST
    assert attempt.finished_at == now
    assert attempt.error is not None and "lease expired" in attempt.error
    occ = await store.get_occurrence(claim.occurrence_id)
    assert occ is not None
    assert occ.state is OccurrenceState.RETRY_WAIT

    second = await claim_one(store, now)  # visible again at once
    assert second.occurrence_id == claim.occurrence_id
    assert second.attempt == 2


async def test_reap_after_max_attempts_is_dead(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    _, oid = await enqueue(store, s, max_attempts=2)
    now = T0
    for attempt in (1, 2):
        claim = await claim_one(store, now)
        assert claim.attempt == attempt
        now += LEASE + SEC
        [reaped] = await store.reap_expired(FENCE, 100, now)
        expected = OccurrenceState.RETRY_WAIT if attempt == 1 else OccurrenceState.DEAD
        assert reaped == Reaped(oid, attempt, expected)
    occ = await store.get_occurrence(oid)
    assert occ is not None
    assert occ.state is OccurrenceState.DEAD
    assert occ.finished_at == now
    assert occ.reason is not None and "lease expired" in occ.reason
    assert await store.claim(["default"], "w", 10, LEASE, now + MIN) == []
    assert await queue_rows(store) == 0


async def test_reap_respects_limit_oldest_lease_first(store: Store) -> None:
    claims = []
    for i in range(3):
        await enqueue(store, await add_schedule(store, f"s{i}", next_run_at=T0))
        claims.append(await claim_one(store, T0 + i * SEC))
    first = await store.reap_expired(FENCE, 2, T0 + MIN)
    assert [r.occurrence_id for r in first] == [c.occurrence_id for c in claims[:2]]
    assert [r.occurrence_id for r in await store.reap_expired(FENCE, 2, T0 + MIN)] == [claims[2].occurrence_id]


async def test_reap_is_fenced(store: Store) -> None:
    _, claim = await running(store)
    await store.reap_expired(Fence("leader", 3), 100, T0)
    with pytest.raises(FencedOut):
        await store.reap_expired(Fence("leader", 2), 100, T0 + LEASE + SEC)
    occ = await store.get_occurrence(claim.occurrence_id)
    assert occ is not None
    assert occ.state is OccurrenceState.RUNNING
    assert await store.extend_leases([claim.lease_token], LEASE, T0 + LEASE + SEC) == {claim.lease_token}


async def test_a_completion_must_end_or_retry_the_attempt(store: Store) -> None:
    _, claim = await running(store)
    with pytest.raises(ValueError):
        await store.finish([Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.ENQUEUED)], T0)
    with pytest.raises(ValueError):
        await store.finish([Completion(claim.lease_token, AttemptOutcome.RUNNING, OccurrenceState.SUCCEEDED)], T0)
    assert await store.extend_leases([claim.lease_token], LEASE, T0) == {claim.lease_token}


@pytest.mark.parametrize(
    ("outcome", "exit_code", "error", "reason"),
    [
        (AttemptOutcome.FAILED, 3, None, "attempt 1 failed (exit code 3)"),
        (AttemptOutcome.TIMED_OUT, None, None, "attempt 1 timed_out"),
        (AttemptOutcome.FAILED, 3, "exit code 3; permanent failure", "exit code 3; permanent failure"),
    ],
)
async def test_a_dead_occurrence_says_why(
    store: Store, outcome: AttemptOutcome, exit_code: int | None, error: str | None, reason: str
) -> None:
    """The DLQ shows the reason: the worker's error, or which attempt ended how."""
    _, claim = await running(store)
    done = Completion(claim.lease_token, outcome, OccurrenceState.DEAD, exit_code=exit_code, error=error)
    assert await store.finish([done], T0 + SEC) == {claim.lease_token}
    occurrence = await store.get_occurrence(claim.occurrence_id)
    assert occurrence is not None
    assert (occurrence.state, occurrence.reason) == (OccurrenceState.DEAD, reason)
    (attempt,) = await store.list_attempts(claim.occurrence_id)
    assert (attempt.outcome, attempt.exit_code, attempt.error) == (outcome, exit_code, error)
