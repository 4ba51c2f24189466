"""When the attempt row is written (the port's ``attempts`` contract), in both stores: the
claim writes none (the running attempt's record is its lease), ``release`` leaves none,
the attempt's one row is written when it ends — unless it is the first, succeeded and
printed nothing: then its occurrence row is its record (schema 0013); a ``running`` row
an older clockd wrote is completed in place. PostgreSQL since schema 0005, SQLite since
0008."""

from __future__ import annotations

from clockd.core.model import AttemptOutcome, OccurrenceState
from clockd.store import Completion, Store

from .support import FENCE, LEASE, MIN, SEC, T0, Backend, claim_one, running


async def attempt_rows(backend: Backend, table: str = "attempts") -> list[tuple[object, ...]]:
    return await backend.execute(f"SELECT occurrence_id, attempt, outcome FROM {table} ORDER BY 1, 2")


async def test_the_claim_writes_no_attempt_row_and_release_leaves_none(store: Store, backend: Backend) -> None:
    _, claim = await running(store)
    assert await attempt_rows(backend) == []
    (shown,) = await store.list_attempts(claim.occurrence_id)
    assert (shown.number, shown.outcome, shown.lease_token, shown.worker_id, shown.started_at) == (
        1, AttemptOutcome.RUNNING, claim.lease_token, "w1", T0)  # fmt: skip

    assert await store.release([claim.lease_token], T0 + SEC) == 1
    assert await attempt_rows(backend) == []
    assert await store.list_attempts(claim.occurrence_id) == []


async def test_an_attempt_row_is_written_once_when_the_attempt_ends(store: Store, backend: Backend) -> None:
    """The finish writes the one row, with the lease's worker and the attempt's own start
    (the second attempt's, not the occurrence's first start)."""
    _, first = await running(store)
    retry = Completion(first.lease_token, AttemptOutcome.FAILED, OccurrenceState.RETRY_WAIT, retry_at=T0 + MIN)
    assert await store.finish([retry], T0 + SEC) == {first.lease_token}
    second = await claim_one(store, T0 + MIN, worker="w2")
    assert await attempt_rows(backend) == [(first.occurrence_id, 1, "failed")]
    listed = await store.list_attempts(second.occurrence_id)
    assert [(a.number, a.outcome, a.worker_id, a.started_at) for a in listed] == [
        (1, AttemptOutcome.FAILED, "w1", T0), (2, AttemptOutcome.RUNNING, "w2", T0 + MIN)]  # fmt: skip

    done = Completion(second.lease_token, AttemptOutcome.FAILED, OccurrenceState.DEAD, exit_code=3, output="boom")
    assert await store.finish([done], T0 + 2 * MIN) == {second.lease_token}
    assert await attempt_rows(backend) == [(first.occurrence_id, 1, "failed"), (first.occurrence_id, 2, "failed")]
    ended = (await store.list_attempts(second.occurrence_id))[1]
    assert (ended.outcome, ended.worker_id, ended.started_at, ended.finished_at, ended.exit_code, ended.output) == (
        AttemptOutcome.FAILED, "w2", T0 + MIN, T0 + 2 * MIN, 3, "boom")  # fmt: skip


async def test_a_first_attempt_that_succeeds_silently_is_kept_on_its_occurrence(store: Store, backend: Backend) -> None:
    """No attempts row (one insert fewer per run), yet shown as before: the same worker,
    start, end and exit code, by list_attempts and by the attempt_history view."""
    _, claim = await running(store)
    done = Completion(claim.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED, exit_code=0)
    assert await store.finish([done], T0 + 2 * SEC) == {claim.lease_token}
    assert await attempt_rows(backend) == []
    (shown,) = await store.list_attempts(claim.occurrence_id)
    assert (shown.number, shown.outcome, shown.worker_id, shown.started_at, shown.finished_at, shown.exit_code,
            shown.signal, shown.output, shown.error) == (
        1, AttemptOutcome.SUCCEEDED, "w1", T0, T0 + 2 * SEC, 0, None, "", None)  # fmt: skip
    assert await attempt_rows(backend, "attempt_history") == [(claim.occurrence_id, 1, "succeeded")]


async def test_an_attempt_that_prints_fails_or_follows_another_still_gets_its_row(
    store: Store, backend: Backend
) -> None:
    """Output stays out of the occurrence row (a long one would push its update off the
    page), and only a first attempt can be told from the row alone."""
    _, printed = await running(store, "printed")
    _, failed = await running(store, "failed")
    ends = [
        Completion(printed.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED, exit_code=0, output="hi"),
        Completion(failed.lease_token, AttemptOutcome.FAILED, OccurrenceState.RETRY_WAIT, retry_at=T0 + MIN),
    ]  # fmt: skip
    assert await store.finish(ends, T0 + SEC) == {printed.lease_token, failed.lease_token}
    again = await claim_one(store, T0 + MIN, worker="w2")
    done = Completion(again.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED, exit_code=0)
    assert await store.finish([done], T0 + 2 * MIN) == {again.lease_token}
    assert sorted(await attempt_rows(backend)) == sorted(
        [(printed.occurrence_id, 1, "succeeded"), (failed.occurrence_id, 1, "failed"),
         (failed.occurrence_id, 2, "succeeded")])  # fmt: skip
    assert (await store.list_attempts(printed.occurrence_id))[0].output == "hi"
    assert [(a.number, a.worker_id) for a in await store.list_attempts(failed.occurrence_id)] == [(1, "w1"), (2, "w2")]
    assert sorted(await attempt_rows(backend, "attempt_history")) == sorted(await attempt_rows(backend))


async def test_a_lost_attempt_gets_its_row_from_the_reaper(store: Store, backend: Backend) -> None:
    _, claim = await running(store)
    reaped = await store.reap_expired(FENCE, 100, T0 + LEASE + SEC)
    assert [r.occurrence_id for r in reaped] == [claim.occurrence_id]
    (lost,) = await store.list_attempts(claim.occurrence_id)
    assert (lost.outcome, lost.worker_id, lost.started_at, lost.finished_at) == (
        AttemptOutcome.LOST, "w1", T0, T0 + LEASE + SEC)  # fmt: skip
    assert await attempt_rows(backend) == [(claim.occurrence_id, 1, "lost")]


async def test_a_running_attempt_row_an_older_clockd_wrote_is_completed_in_place(
    store: Store, backend: Backend
) -> None:
    """Claims made by an older clockd (PostgreSQL before 0005, SQLite before 0008) have a
    'running' attempt row: listed once while they run, completed (finish) or marked lost
    (reap) in place, deleted by release. (Only the claiming process holds a token, so the
    finish here stands for the older clockd's; its output makes it one this clockd would
    record in an attempts row too: a silent first success is kept on the occurrence.)"""
    claims = [(await running(store, name))[1] for name in ("finished", "reaped", "released")]
    for claim in claims:
        await backend.execute(
            "INSERT INTO attempts (occurrence_id, attempt, lease_token, worker_id, started_at, outcome) "
            "VALUES (?, 1, ?, 'old-worker', ?, 'running')",
            claim.occurrence_id,
            claim.lease_token,
            T0,
        )
    (shown,) = await store.list_attempts(claims[0].occurrence_id)
    assert (shown.outcome, shown.worker_id) == (AttemptOutcome.RUNNING, "old-worker")
    done = Completion(claims[0].lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED, output="ok")
    assert await store.finish([done], T0 + MIN) == {claims[0].lease_token}
    assert await store.release([claims[2].lease_token], T0 + MIN) == 1
    reaped = await store.reap_expired(FENCE, 100, T0 + LEASE + SEC)
    assert [r.occurrence_id for r in reaped] == [claims[1].occurrence_id]
    outcomes = [[(a.number, a.outcome) for a in await store.list_attempts(claim.occurrence_id)] for claim in claims]
    assert outcomes == [[(1, AttemptOutcome.SUCCEEDED)], [(1, AttemptOutcome.LOST)], []]
