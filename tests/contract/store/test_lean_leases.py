"""Schema 0010: the lease_until index (``dispatch_leased``) is gone, one index entry fewer
for every claim; the reaper reads the leased rows through ``dispatch_lease_token``. A
database upgraded with leases held keeps every one of them."""

from __future__ import annotations

from clockd.core.model import AttemptOutcome, OccurrenceState
from clockd.store import Completion, Store
from clockd.store.postgres import PostgresStore
from clockd.store.sqlite import SqliteStore

from .support import FENCE, LEASE, MIN, SEC, T0, Backend, add_schedule, enqueue

UNDO_0010 = {  # the index as schema 0001 made it in each dialect
    "postgres": "CREATE INDEX dispatch_leased ON dispatch (lease_until, id) WHERE lease_token IS NOT NULL",
    "sqlite": "CREATE INDEX dispatch_leased ON dispatch (lease_until) WHERE lease_token IS NOT NULL",
}


async def test_the_upgrade_to_0010_keeps_every_lease(store: Store, backend: Backend) -> None:
    for name in ("a", "b", "c"):
        await enqueue(store, await add_schedule(store, name, next_run_at=T0))
    a, b, c = await store.claim(["default"], "w-1", 3, LEASE, T0 + SEC)
    await store.close()
    await backend.execute(UNDO_0010["sqlite" if isinstance(store, SqliteStore) else "postgres"])
    await backend.execute("DELETE FROM schema_migrations WHERE version = 10")
    new = backend.new_store()
    if isinstance(new, PostgresStore):
        assert await new.migrate() == ["0010_lean_leases"]
    await new.open()  # SQLite migrates here
    assert (await new.backlog(T0 + SEC)).running == 3
    running = await new.list_attempts(a.occurrence_id)
    assert [(r.lease_token, r.worker_id, r.started_at) for r in running] == [(a.lease_token, "w-1", T0 + SEC)]
    assert await new.extend_leases([a.lease_token, b.lease_token], LEASE, T0 + MIN) == {a.lease_token, b.lease_token}
    done = Completion(c.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED, exit_code=0)
    assert await new.finish([done], T0 + 2 * SEC) == {c.lease_token}
    assert await new.reap_expired(FENCE, 100, T0 + SEC + LEASE + SEC) == []  # a and b were extended
    reaped = await new.reap_expired(FENCE, 100, T0 + MIN + LEASE + SEC)
    assert sorted(r.occurrence_id for r in reaped) == sorted([a.occurrence_id, b.occurrence_id])
    assert (await new.backlog(T0 + MIN + LEASE + SEC)).running == 0


async def test_the_reaper_reads_the_leases_through_dispatch_lease_token(store: Store, backend: Backend) -> None:
    """SQLite. PostgreSQL leases a claimed batch with one row since schema 0022: its reaper
    reads those (reap_lock), never the queue."""
    for i in range(20):
        await enqueue(store, await add_schedule(store, f"s{i}", next_run_at=T0))
    await store.claim(["default"], "w", 10, LEASE, T0 + SEC)
    if backend.kind == "sqlite":
        plan = await backend.query_plan("reap_pick", {"now": 0, "limit": 10})  # instants as microseconds
        assert "dispatch_lease_token" in plan, plan
    else:
        plan = await backend.query_plan("reap_lock", {"now": T0, "limit": 10})
        assert "claim_batches" in plan and "dispatch" not in plan, plan
