"""Schema 0022 (PostgreSQL): a lease per claimed batch. A claim takes the runs it starts out
of the queue and writes one ``claim_batches`` row for them; a finish lowers the batch's
count of open runs and drops the row with its last; a retry and a release put the run back
in the queue; the reaper ends what an expired batch still holds. A store upgraded with
runs leased on their queue rows keeps every lease: each becomes a batch of one that its
worker heartbeats and finishes, and the reaper reaps, under the token it already holds."""

from __future__ import annotations

import uuid

import pytest

from clockd.core.model import AttemptOutcome, OccurrenceState
from clockd.store import Completion, Fence
from clockd.store.postgres.store import MIGRATIONS, PostgresStore
from tests.harness import PostgresServer

from .support import LEASE, MIN, SEC, T0, add_schedule, batch_of, enqueue, scalar

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

LEADER = Fence("leader", 1)
OK = (AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED)


async def test_a_batch_row_lives_while_its_runs_are_open(pg_store: PostgresStore, pg_dsn: str) -> None:
    for i in range(4):
        await enqueue(pg_store, await add_schedule(pg_store, f"s{i}", next_run_at=T0))
    claims = await pg_store.claim(["default"], "w", 4, LEASE, T0 + SEC)
    batch = batch_of(claims[0].lease_token)
    assert [c.lease_token for c in claims] == [f"{batch}.{c.occurrence_id}" for c in claims]
    assert await scalar(pg_dsn, "SELECT count(*) FROM dispatch") == 0  # claimed runs leave the queue
    assert await scalar(pg_dsn, "SELECT open FROM claim_batches WHERE token = %s", (batch,)) == 4
    # One succeeds, one fails for a retry (back in the queue, visible at its retry), one is
    # given back (release: back in the queue, claimable again); the batch lives on.
    retry_at = T0 + MIN
    assert await pg_store.finish([Completion(claims[0].lease_token, *OK)], T0 + 2 * SEC) == {claims[0].lease_token}
    retried = Completion(claims[1].lease_token, AttemptOutcome.FAILED, OccurrenceState.RETRY_WAIT, retry_at=retry_at)
    assert await pg_store.finish([retried], T0 + 2 * SEC) == {claims[1].lease_token}
    assert await pg_store.release([claims[2].lease_token], T0 + 2 * SEC) == 1
    assert await scalar(pg_dsn, "SELECT open FROM claim_batches WHERE token = %s", (batch,)) == 1
    assert await scalar(pg_dsn, "SELECT count(*) FROM dispatch WHERE lease_token IS NULL") == 2
    queued = "SELECT visible_at FROM dispatch WHERE occurrence_id = %s"
    assert await scalar(pg_dsn, queued, (claims[1].occurrence_id,)) == retry_at
    # A token ended once ends nothing again, and holds no lease.
    assert await pg_store.finish([Completion(claims[0].lease_token, *OK)], T0 + 3 * SEC) == set()
    assert await pg_store.extend_leases([c.lease_token for c in claims], LEASE, T0 + 3 * SEC) == {claims[3].lease_token}
    assert (await pg_store.backlog(T0 + 3 * SEC)).running == 1
    # The last open run ends: the batch row goes with it.
    assert await pg_store.finish([Completion(claims[3].lease_token, *OK)], T0 + 4 * SEC) == {claims[3].lease_token}
    assert await scalar(pg_dsn, "SELECT count(*) FROM claim_batches") == 0
    again = await pg_store.claim(["default"], "w2", 10, LEASE, T0 + 2 * MIN)
    assert sorted(c.occurrence_id for c in again) == sorted([claims[1].occurrence_id, claims[2].occurrence_id])
    assert {c.occurrence_id: c.attempt for c in again} == {claims[1].occurrence_id: 2, claims[2].occurrence_id: 1}


async def test_the_reaper_ends_only_what_an_expired_batch_still_holds(pg_store: PostgresStore, pg_dsn: str) -> None:
    for i in range(3):
        await enqueue(pg_store, await add_schedule(pg_store, f"s{i}", next_run_at=T0))
    claims = await pg_store.claim(["default"], "w", 3, LEASE, T0 + SEC)
    assert await pg_store.finish([Completion(claims[0].lease_token, *OK)], T0 + 2 * SEC) == {claims[0].lease_token}
    reaped = await pg_store.reap_expired(LEADER, 10, T0 + SEC + LEASE + SEC)
    assert [(r.occurrence_id, r.next_state) for r in reaped] == [
        (c.occurrence_id, OccurrenceState.RETRY_WAIT) for c in claims[1:]
    ]
    assert await scalar(pg_dsn, "SELECT count(*) FROM claim_batches") == 0
    assert await scalar(pg_dsn, "SELECT count(*) FROM dispatch WHERE lease_token IS NULL") == 2
    # The worker comes back late: its runs were reaped, its finish ends nothing.
    late = [Completion(c.lease_token, *OK) for c in claims[1:]]
    assert await pg_store.finish(late, T0 + 2 * LEASE) == set()
    lost = await pg_store.list_attempts(claims[1].occurrence_id)
    assert [a.outcome for a in lost] == [AttemptOutcome.LOST]


async def test_the_reaper_takes_whole_batches_until_its_limit_of_runs(pg_store: PostgresStore, pg_dsn: str) -> None:
    for i in range(9):
        await enqueue(pg_store, await add_schedule(pg_store, f"s{i}", next_run_at=T0))
    batches = [await pg_store.claim(["default"], "w", 3, LEASE, T0 + k * SEC) for k in range(1, 4)]
    # 3 runs open per batch, a limit of 4: the oldest batch (0 before it) and the next (3
    # before it) — 6 runs, whole batches; the third waits for the next call.
    first = await pg_store.reap_expired(LEADER, 4, T0 + MIN)
    assert [r.occurrence_id for r in first] == [c.occurrence_id for c in batches[0] + batches[1]]
    second = await pg_store.reap_expired(LEADER, 4, T0 + MIN)
    assert [r.occurrence_id for r in second] == [c.occurrence_id for c in batches[2]]
    assert await scalar(pg_dsn, "SELECT count(*) FROM claim_batches") == 0


async def test_the_upgrade_to_0022_keeps_every_lease(pg_server: PostgresServer) -> None:
    name = f"u_{uuid.uuid4().hex[:12]}"
    dsn = pg_server.create_database(name)
    try:
        old = PostgresStore(dsn, max_size=2)
        old.driver.migrations = MIGRATIONS[:21]  # a store of schema 0021: leases on the queue rows
        await old.migrate()
        await old.open()
        ids = []
        for i in range(3):
            schedule, _ = await enqueue(old, await add_schedule(old, f"s{i}", next_run_at=T0))
            ids.append(await scalar(dsn, "SELECT id FROM occurrences WHERE schedule_id = %s", (schedule.id,)))
        await old.close()
        # As the release before 0022 leased them: the token, worker and lease on the queue
        # row, the occurrence RUNNING (first attempt).
        tokens = [uuid.uuid4().hex for _ in ids]
        for occurrence_id, token in zip(ids, tokens, strict=True):
            await scalar(
                dsn,
                "WITH o AS (UPDATE occurrences SET state = 'RUNNING', attempts = 1, started_at = %s WHERE id = %s)"
                " UPDATE dispatch SET lease_token = %s, lease_until = %s, worker_id = 'w-old', leased_at = %s"
                " WHERE occurrence_id = %s RETURNING 1",
                (T0 + SEC, occurrence_id, token, T0 + SEC + LEASE, T0 + SEC, occurrence_id),
            )
        new = PostgresStore(dsn, max_size=2)
        assert await new.migrate() == ["0022_batch_leases"]
        await new.open()
        try:
            assert await scalar(dsn, "SELECT count(*) FROM dispatch") == 0
            assert (await new.backlog(T0 + 2 * SEC)).running == 3
            running = await new.list_attempts(ids[0])
            assert [(r.worker_id, r.started_at, r.outcome) for r in running] == [
                ("w-old", T0 + SEC, AttemptOutcome.RUNNING)
            ]
            assert await new.extend_leases(tokens[:2], LEASE, T0 + MIN) == set(tokens[:2])
            assert await new.finish([Completion(tokens[0], *OK)], T0 + MIN) == {tokens[0]}
            reaped = await new.reap_expired(LEADER, 10, T0 + SEC + LEASE + SEC)
            assert [r.occurrence_id for r in reaped] == [ids[2]]  # the other was extended
            reaped = await new.reap_expired(LEADER, 10, T0 + MIN + LEASE + SEC)
            assert [r.occurrence_id for r in reaped] == [ids[1]]
            assert (await new.backlog(T0 + 2 * MIN + LEASE)).running == 0
            assert await scalar(dsn, "SELECT count(*) FROM claim_batches") == 0
        finally:
            await new.close()
    finally:
        pg_server.drop_database(name)
