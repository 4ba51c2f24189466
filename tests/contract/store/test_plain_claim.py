"""Schema 0019: a queue row carries its occurrence's overlap policy (every store), and
PostgreSQL's claim tries ``claim_plain`` first — the claim with nothing to judge: no
tenant capped, every row allowing overlap — and hands a batch with anything to
judge to ``claim_lease`` in the same transaction. What a claim hands out is the same
either way (the policy tests in test_policies.py run through both); these tests hold
the row's policy, the hand-over and a queue row whose occurrence cannot be claimed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import psycopg
import pytest

from clockd.core.model import AttemptOutcome, OccurrenceState, OverlapPolicy, TenantLimits
from clockd.store import Completion, CursorAdvance, Store
from clockd.store.postgres import PostgresStore
from clockd.store.postgres.store import JUDGED_STREAK

from .support import FENCE, LEASE, MIN, QUEUE, SEC, T0, Backend, add_schedule, planned, queued


async def overlap_of_queue_rows(backend: Backend) -> dict[str, str | None]:
    rows = await backend.execute("SELECT occurrence_id, overlap FROM dispatch")
    return {str(occurrence_id): overlap for occurrence_id, overlap in rows}


async def test_every_queue_row_carries_its_occurrences_overlap_policy(backend: Backend, store: Store) -> None:
    """Written by the relay, by the materializer itself (direct dispatch) and by a
    dead-letter replay: the queue row says what its occurrence says."""
    _, relayed = await queued(store, "relayed", 2, overlap=OverlapPolicy.SKIP)
    direct = await add_schedule(store, "direct", next_run_at=T0, overlap=OverlapPolicy.QUEUE_ONE)
    rows = [planned(direct, T0 + i * SEC) for i in range(2)]
    cursor = CursorAdvance(direct.id, 1, T0, T0 + MIN)
    assert (await store.materialize(FENCE, rows, [cursor], T0 - MIN, direct=True)).inserted == 2
    assert await overlap_of_queue_rows(backend) == {
        relayed[0]: "skip", relayed[1]: "skip", rows[0].id: "queue_one", rows[1].id: "queue_one"
    }  # fmt: skip

    _, [dead_id] = await queued(store, "replayed", 1, at=T0 + MIN)
    await backend.execute("DELETE FROM dispatch WHERE occurrence_id <> ?", dead_id)
    [claim] = await store.claim([QUEUE], "w", 10, LEASE, T0 + 2 * MIN)
    ended = Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.DEAD, exit_code=1)
    assert await store.finish([ended], T0 + 2 * MIN) == {claim.lease_token}
    await store.replay_dead(dead_id, "fixed", T0 + 3 * MIN)
    assert await overlap_of_queue_rows(backend) == {dead_id: "allow"}


async def test_a_queue_row_whose_occurrence_cannot_be_claimed_is_left_unleased(backend: Backend, store: Store) -> None:
    """No writer leaves one so; if one is there anyway, the claim starts the others and
    leaves that row in the queue unleased (claim_plain leases it first and gives it back)."""
    _, ids = await queued(store, "job", 3)
    await backend.execute("UPDATE occurrences SET state = 'SUCCEEDED' WHERE id = ?", ids[1])
    claims = await store.claim([QUEUE], "w", 10, LEASE, T0 + SEC)
    assert [c.occurrence_id for c in claims] == [ids[0], ids[2]]
    assert await backend.execute("SELECT lease_token FROM dispatch WHERE occurrence_id = ?", ids[1]) == [(None,)]


async def test_a_claim_with_nothing_to_judge_is_the_plain_one(pg_store: PostgresStore) -> None:
    """One tenant, no cap, every row allowing overlap: leased and started in queue order
    without claim_lease; and after a claim that had something to judge, the plain claim is
    tried again once JUDGED_STREAK claims have gone straight to claim_lease."""
    _, ids = await queued(pg_store, "job", 3, step=SEC)
    claims = await pg_store.claim([QUEUE], "w", 10, LEASE, T0 + MIN)
    assert [c.occurrence_id for c in claims] == ids
    assert all(c.attempt == 1 for c in claims)
    for oid in ids:
        occ = await pg_store.get_occurrence(oid)
        assert occ is not None and occ.state is OccurrenceState.RUNNING
    assert pg_store.driver.judged_streak == 0

    pg_store.driver.judged_streak = 2
    for _ in range(2):
        assert await pg_store.claim([QUEUE], "w", 10, LEASE, T0 + MIN) == []
    assert pg_store.driver.judged_streak == 0


async def test_tenants_sharing_a_queue_are_claimed_plain_in_turns(pg_store: PostgresStore) -> None:
    """Several tenants, none capped, every row allowing overlap: the plain claim, in
    claim_lease's round-robin (each tenant's oldest first, then each one's second, ...),
    not claim_lease's judging. Before, a second tenant in the queue was a reason to
    judge, so every claim of a queue that tenants share paid claim_lease's price."""
    _, acme = await queued(pg_store, "a", 4, tenant="acme")
    _, beta = await queued(pg_store, "b", 2, at=T0 + 10 * SEC, tenant="beta")
    _, gamma = await queued(pg_store, "c", 1, at=T0 + 20 * SEC, tenant="gamma")
    claims = await pg_store.claim([QUEUE], "w", 5, LEASE, T0 + MIN)
    assert [c.occurrence_id for c in claims] == [acme[0], beta[0], gamma[0], acme[1], beta[1]]
    assert (pg_store.driver.judged_streak, pg_store.driver.shared_streak) == (0, JUDGED_STREAK)
    rest = await pg_store.claim([QUEUE], "w", 5, LEASE, T0 + MIN)  # claim_shared at once
    assert [c.occurrence_id for c in rest] == [acme[2], acme[3]]
    assert pg_store.driver.shared_streak == JUDGED_STREAK - 1


async def test_one_tenant_left_in_a_shared_queue_is_claimed_plain_again(pg_store: PostgresStore) -> None:
    """After claims of a shared queue, the one-tenant claim is tried again once the streak
    of round-robin claims has run out."""
    _, acme = await queued(pg_store, "a", 3, tenant="acme")
    pg_store.driver.shared_streak = 1
    claims = await pg_store.claim([QUEUE], "w", 2, LEASE, T0 + MIN)  # claim_shared, one tenant
    assert [c.occurrence_id for c in claims] == acme[:2]
    assert pg_store.driver.shared_streak == 0
    rest = await pg_store.claim([QUEUE], "w", 2, LEASE, T0 + MIN)  # claim_plain
    assert [c.occurrence_id for c in rest] == acme[2:]
    assert (pg_store.driver.judged_streak, pg_store.driver.shared_streak) == (0, 0)


async def _capped(store: Store) -> None:
    await store.set_tenant_limits(TenantLimits("acme", max_running=1), T0)
    await queued(store, "a", 2, tenant="acme")


async def _capped_beside_another(store: Store) -> None:
    await _capped(store)
    await queued(store, "b", 2, tenant="beta")


async def _overlap_skip(store: Store) -> None:
    await queued(store, "a", 2, overlap=OverlapPolicy.SKIP)


async def _queued_by_an_older_release(store: Store) -> None:
    """Rows a clockd of schema 0018 queued during an upgrade: no policy on the queue row."""
    await queued(store, "a", 2)
    assert isinstance(store, PostgresStore)
    async with await psycopg.AsyncConnection.connect(store.driver.dsn, autocommit=True) as conn:
        await conn.execute("UPDATE dispatch SET overlap = NULL")


@pytest.mark.parametrize(
    ("setup", "started"),
    [(_capped, 1), (_capped_beside_another, 3), (_overlap_skip, 1), (_queued_by_an_older_release, 2)],
    ids=["a capped tenant", "a capped tenant beside another", "overlap skip", "queued by an older release"],
)
async def test_a_claim_with_something_to_judge_is_claim_leases(
    pg_store: PostgresStore, setup: Callable[[Store], Awaitable[None]], started: int
) -> None:
    await setup(pg_store)
    claims = await pg_store.claim([QUEUE], "w", 10, LEASE, T0 + MIN)
    assert len(claims) == started
    assert pg_store.driver.judged_streak == JUDGED_STREAK
