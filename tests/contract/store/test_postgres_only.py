"""What only the PostgreSQL adapter does: concurrency between processes (several stores
on one database), the schema check and the migrator, connection failures, the session
settings, and the SQL itself (every named statement prepares; the claim's plan)."""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from clockd.core import states
from clockd.core.ids import new_schedule_id
from clockd.core.model import AttemptOutcome, OccurrenceState, OverlapPolicy
from clockd.errors import SchemaMismatch, StoreUnavailable
from clockd.store import Completion, CursorAdvance, NewSchedule
from clockd.store.engine import new_tokens, policy_rules
from clockd.store.postgres import PostgresStore
from clockd.store.postgres.store import KNOWN_VERSION, MIGRATIONS, PG, Q
from tests.harness import PostgresServer, free_port

from .support import FENCE, LEASE, MIN, SEC, T0, add_schedule, batch_of, definition, planned, running, scalar

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

US = timedelta(microseconds=1)


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture
async def stores(pg_dsn: str) -> AsyncIterator[list[PostgresStore]]:
    """Two open stores on one fresh migrated database: two clockd processes."""
    made = [PostgresStore(pg_dsn, max_size=8) for _ in range(2)]
    for store in made:
        await store.open()
    try:
        yield made
    finally:
        for store in made:
            await store.close()


@pytest.fixture
def empty_dsn(pg_server: PostgresServer) -> Iterator[str]:
    """A fresh database that was never migrated."""
    name = f"e_{uuid.uuid4().hex[:12]}"
    dsn = pg_server.create_database(name)
    try:
        yield dsn
    finally:
        pg_server.drop_database(name)


async def fill_queue(store: PostgresStore, count: int, name: str = "bulk") -> None:
    """``count`` visible dispatch rows of one schedule, written in one batch."""
    schedule = await add_schedule(store, name, next_run_at=T0)
    occurrences = [planned(schedule, T0 + i * US) for i in range(count)]
    cursor = CursorAdvance(schedule.id, 1, T0, T0 + count * US)
    result = await store.materialize(FENCE, occurrences, [cursor], T0 - MIN)
    assert result.inserted == count
    assert (await store.relay(T0 + MIN, count, T0 - MIN)).moved == count


def claim_params(queues: list[str], limit: int) -> dict[str, Any]:
    """The parameters of ``claim_lease`` for worker "w" at T0 + 1 min, as the engine passes
    them (clockd.store.engine): its tokens, states, defaults and reasons."""
    return {
        "queues": queues,
        "worker_id": "w",
        "limit": limit,
        "now": T0 + MIN,
        "lease_until": T0 + 2 * MIN,
        "minute": T0 + MIN,
        "tokens": new_tokens(limit),
        "claimable": [s.value for s in states.sources("claim")],
        **policy_rules(),
    }


async def waiting_on_a_lock(dsn: str, count: int, *, statement: str = "") -> None:
    """Until ``count`` sessions of this database (running ``statement``, when given) wait on a
    lock; fails the test after 20 s. (``tests.harness.until`` polls a synchronous check.)"""
    deadline = time.monotonic() + 20
    while True:
        waiting = await scalar(
            dsn,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            (f"%{statement}%",),
        )
        if waiting >= count:
            return
        assert time.monotonic() < deadline, f"{waiting} of {count} sessions waiting on a lock"
        await asyncio.sleep(0.01)


async def published(store: PostgresStore) -> None:
    """Until the backend of ``store``'s one pooled connection has published its counters to
    pg_stat_* (pg_stat_force_next_flush(): at once, no waiting)."""

    async def flush(conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
        await conn.execute("SELECT pg_stat_force_next_flush()")

    await store._call(flush, write=False)


async def sequential_scans(store: PostgresStore, dsn: str, table: str) -> int:
    """Sequential scans of ``table`` so far (of all its partitions, schema 0017), once the
    backend of ``store``'s one pooled connection has published its counters."""
    await published(store)
    query = (
        "SELECT coalesce(sum(seq_scan), 0)::bigint FROM pg_stat_user_tables "
        "WHERE relid IN (SELECT relid FROM pg_partition_tree(%s::regclass))"
    )
    return int(await scalar(dsn, query, (table,)))


# -- several processes on one database -------------------------------------------------------


async def test_concurrent_claimers_never_receive_the_same_occurrence(stores: list[PostgresStore], pg_dsn: str) -> None:
    await fill_queue(stores[0], 1000)
    seen: list[str] = []
    tokens: list[str] = []
    rounds = 0
    while True:
        batches = await asyncio.gather(
            *(store.claim(["default"], f"w{n}-{i}", 37, LEASE, T0 + MIN) for n, store in enumerate(stores)
              for i in range(8))
        )  # fmt: skip
        rounds += 1
        claimed = [c for batch in batches for c in batch]
        if not claimed:
            break
        seen += [c.occurrence_id for c in claimed]
        tokens += [c.lease_token for c in claimed]
    assert len(seen) == 1000
    assert len(set(seen)) == 1000, "an occurrence was handed to two claimers"
    assert len(set(tokens)) == 1000
    assert rounds <= 5  # 16 claims of 37 per round: the claimers really ran side by side
    # Each leased once, as its first attempt (the lease is the running attempt's record):
    # out of the queue, RUNNING under one claimed batch (schema 0022), 1,000 runs open.
    assert await scalar(pg_dsn, "SELECT count(*) FROM dispatch") == 0
    assert await scalar(pg_dsn, "SELECT sum(open) FROM claim_batches") == 1000
    assert await scalar(pg_dsn, "SELECT count(*) FROM occurrences WHERE lease_batch IS NOT NULL") == 1000
    assert await scalar(pg_dsn, "SELECT count(*) FROM occurrences WHERE state = 'RUNNING' AND attempts = 1") == 1000
    done = await stores[0].finish(
        [Completion(token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED) for token in tokens], T0 + MIN
    )
    assert done == set(tokens)
    ended = "SELECT count(*) FROM attempt_history WHERE attempt = 1 AND outcome = 'succeeded'"
    assert await scalar(pg_dsn, ended) == 1000
    assert await scalar(pg_dsn, "SELECT count(*) FROM attempt_history WHERE attempt > 1") == 0


async def test_claim_and_finish_from_two_stores_account_for_every_occurrence(stores: list[PostgresStore]) -> None:
    first, second = stores
    await fill_queue(first, 300)

    async def worker(store: PostgresStore, name: str) -> int:
        done = 0
        while claims := await store.claim(["default"], name, 20, LEASE, T0 + MIN):
            succeeded = [Completion(c.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED) for c in claims]
            assert await store.finish(succeeded, T0 + MIN + SEC) == {c.lease_token for c in claims}
            done += len(claims)
        return done

    counts = await asyncio.gather(*(worker(store, f"w{i}") for i, store in enumerate(stores * 3)))
    assert sum(counts) == 300
    backlog = await first.backlog(T0 + MIN)
    assert (backlog.queued, backlog.running) == (0, 0)
    occurrences = await second.list_occurrences(limit=1000)
    assert {o.state for o in occurrences} == {OccurrenceState.SUCCEEDED}


async def test_the_reaper_skips_a_lease_its_worker_is_finishing(stores: list[PostgresStore], pg_dsn: str) -> None:
    worker, leader = stores
    _, claim = await running(worker)
    # A finishing worker holds the batch row (leases_lock) ...
    async with await psycopg.AsyncConnection.connect(pg_dsn) as holder:
        await holder.execute("SELECT 1 FROM claim_batches WHERE token = %s FOR UPDATE", (batch_of(claim.lease_token),))
        # ... so the reaper passes it by instead of waiting or fighting over it.
        assert await asyncio.wait_for(leader.reap_expired(FENCE, 100, T0 + LEASE + SEC), 5) == []
        await holder.rollback()
    done = Completion(claim.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED)
    assert await worker.finish([done], T0 + LEASE + 2 * SEC) == {claim.lease_token}
    assert await leader.reap_expired(FENCE, 100, T0 + LEASE + 3 * SEC) == []


async def test_a_worker_stalled_inside_a_transaction_loses_its_locks_and_its_run_is_reaped(pg_dsn: str) -> None:
    # A worker's heartbeat locks its batch rows and commits in a second round trip. A
    # worker that stops in between (SIGSTOP, a paused VM) kept the lock for as long as it
    # stayed stopped, and the reaper — which passes locked rows by (the test above) — never
    # redelivered its run (the likely cause of a drill 4 that timed out in CI). A daemon's connections carry a
    # limit on idle-in-transaction time (clockd.wiring.daemon_stall_limit).
    worker = PostgresStore(pg_dsn, idle_in_transaction_timeout=timedelta(milliseconds=500))
    leader = PostgresStore(pg_dsn)
    await worker.open()
    await leader.open()
    try:
        _, claim = await running(worker)
        stopped = asyncio.Event()  # the worker's process, stopped between two statements
        locked = asyncio.Event()  # its heartbeat holds the row lock: only then may the reaper look

        async def heartbeat_then_stop(conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
            await conn.execute(
                "UPDATE claim_batches SET lease_until = lease_until WHERE token = %s", (batch_of(claim.lease_token),)
            )
            locked.set()
            await stopped.wait()

        stalled = asyncio.create_task(worker._call(heartbeat_then_stop, write=True))
        # Without this wait a reap could come first (a loaded machine: CI, 2026-12-06), find
        # the row unlocked and reap it, and the heartbeat then matched nothing and committed.
        await asyncio.wait_for(locked.wait(), 20)
        deadline = time.monotonic() + 20
        while not (reaped := await leader.reap_expired(FENCE, 100, T0 + LEASE + SEC)):
            assert time.monotonic() < deadline, "the stalled worker's run was never reaped"
            await asyncio.sleep(0.05)
        assert [(r.occurrence_id, r.attempt, r.next_state) for r in reaped] == [
            (claim.occurrence_id, 1, OccurrenceState.RETRY_WAIT)
        ]
        stopped.set()  # the worker runs again: its transaction is gone, nothing of it commits
        with pytest.raises(StoreUnavailable, match="sat inside a transaction longer"):
            await stalled
        # The run is back in the queue, unleased, for its retry; its batch is gone.
        queued = "SELECT count(*) FROM dispatch WHERE occurrence_id = %s AND lease_token IS NULL"
        assert await scalar(pg_dsn, queued, (claim.occurrence_id,)) == 1
        assert await scalar(pg_dsn, "SELECT count(*) FROM claim_batches") == 0
    finally:
        await worker.close()
        await leader.close()


async def test_the_reconcilers_snapshot_is_not_held_to_the_daemons_idle_in_transaction_limit(pg_dsn: str) -> None:
    # The snapshot read (reconcile_rows: the leader's periodic reconciliation, explain,
    # the API's reconcile) decodes its rows between its statements, an hour of
    # occurrences at a time; it takes no row lock, so the limit (which is about locks)
    # must not end it.
    limit = timedelta(milliseconds=300)
    store = PostgresStore(pg_dsn, idle_in_transaction_timeout=limit)
    await store.open()
    try:

        async def snapshot_with_a_long_pause(conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> int:
            await conn.execute(PG["snapshot_read"])
            await conn.execute("SELECT count(*) FROM occurrences")
            await asyncio.sleep(3 * limit.total_seconds())  # the decoding of a large answer
            row = await (await conn.execute("SELECT count(*) FROM schedules")).fetchone()
            assert row is not None
            return int(row[0])

        assert await store._call(snapshot_with_a_long_pause, write=True) == 0
    finally:
        await store.close()


async def test_a_finish_that_waits_on_a_reaper_which_unleases_the_row_ends_nothing(
    stores: list[PostgresStore], pg_dsn: str
) -> None:
    # The finish locks the batch rows of the runs it ends (leases_lock) and reads their
    # occurrences only then, in a statement of its own: when a reaper holds a batch, the
    # finish waits, and once the reaper has reaped it (the batch row gone, the run back in
    # the queue for its retry), the finish must end nothing — ending the run would lose
    # the retry the reaper queued. (A read in the waiting statement's own snapshot would
    # still have seen the run RUNNING under its batch.)
    worker, _ = stores
    _, claim = await running(worker)
    async with await psycopg.AsyncConnection.connect(pg_dsn) as reaper:
        await reaper.execute("DELETE FROM claim_batches WHERE token = %s", (batch_of(claim.lease_token),))
        await reaper.execute("UPDATE occurrences SET state = 'RETRY_WAIT' WHERE id = %s", (claim.occurrence_id,))
        await reaper.execute(
            "INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at)"
            " SELECT id, queue, tenant, available_at FROM occurrences WHERE id = %s", (claim.occurrence_id,),
        )  # fmt: skip
        done = Completion(claim.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED)
        finishing = asyncio.create_task(worker.finish([done], T0 + LEASE + SEC))
        await waiting_on_a_lock(pg_dsn, 1, statement="/* leases_lock */")
        await reaper.commit()
    assert await asyncio.wait_for(finishing, 10) == set()
    assert await scalar(pg_dsn, "SELECT count(*) FROM dispatch WHERE occurrence_id = %s", (claim.occurrence_id,)) == 1


# -- schema: check on open, migrate ------------------------------------------------------------


async def test_open_on_an_unmigrated_database_says_run_clockd_migrate(empty_dsn: str) -> None:
    store = PostgresStore(empty_dsn)
    with pytest.raises(
        SchemaMismatch, match=r"schema is at 0000, this clockd needs \d{4}: run `clockd migrate --store"
    ):
        await store.open()
    # open() never migrates: nothing was created.
    assert await scalar(empty_dsn, "SELECT to_regclass('schema_migrations') IS NULL") is True
    with pytest.raises(StoreUnavailable, match="not open"):
        await store.list_schedules()


async def test_migrate_works_on_a_store_that_is_not_open(empty_dsn: str) -> None:
    store = PostgresStore(empty_dsn)
    assert await store.migrate() == [m.label for m in MIGRATIONS]
    assert await store.migrate() == []
    await store.open()
    try:
        assert await store.list_schedules() == []
        assert await store.migrate() == []
    finally:
        await store.close()


async def test_concurrent_migrators_apply_each_migration_once(empty_dsn: str) -> None:
    migrators = [PostgresStore(empty_dsn) for _ in range(4)]
    results = await asyncio.gather(*(m.migrate() for m in migrators))
    # Each migration is its own transaction under the lock: migrators may share the work,
    # but every migration is applied exactly once.
    assert sorted(label for applied in results for label in applied) == [m.label for m in MIGRATIONS]
    assert await scalar(empty_dsn, "SELECT count(*) FROM schema_migrations") == KNOWN_VERSION


async def test_concurrent_migrators_with_the_roles_present_grant_without_failing(
    pg_server: PostgresServer, pg_dsn: str
) -> None:
    """Every `clockd migrate` re-applies the roles' grants when the roles exist; two
    GRANTs on one object at once fail in PostgreSQL ("tuple concurrently updated"), so
    they run under the migration lock. (Without it 5 of 15 such runs failed here.)"""
    await PostgresStore(pg_dsn).create_roles()  # cluster-wide: present for every database below
    for _ in range(6):
        name = f"mig_{uuid.uuid4().hex[:8]}"
        dsn = pg_server.create_database(name)
        try:
            results = await asyncio.gather(*(PostgresStore(dsn).migrate() for _ in range(4)))
            assert sorted(label for applied in results for label in applied) == [m.label for m in MIGRATIONS]
            granted = await scalar(dsn, "SELECT has_table_privilege('clockd_operator', 'schedule_labels', 'INSERT')")
            assert granted is True
        finally:
            pg_server.drop_database(name)


@pytest.mark.parametrize("odd", [None, "heartbeat", "finish"])
async def test_a_heartbeat_never_waits_for_a_finish_of_the_same_leases(
    stores: list[PostgresStore], pg_dsn: str, odd: str | None
) -> None:
    """A worker's heartbeat extends the leases of completions not yet recorded while its
    flush ends them, on two connections. Each locked the rows in the order its plan
    visited them — the id order for an index scan of the primary key, the physical order
    for a bitmap, sequential or hash-join plan — so the two could each hold a row the
    other waited for: PostgreSQL broke the cycle after deadlock_timeout (1 s) by failing
    one (StoreLocked), and the worker logged an error and retried. The heartbeat now skips
    a row another session holds and counts it as held, so it never waits and is never
    part of a cycle. Staged (schema 0022: the rows are claimed batches): three batches, a
    third session holding the middle one, the finish waiting on it; one of the two
    statements (``odd``) in a session kept off index scans and nested loops."""
    await fill_queue(stores[0], 3)
    claims = [c for _ in range(3) for c in await stores[0].claim(["default"], "w", 1, LEASE, T0 + MIN)]
    batches = sorted(batch_of(c.lease_token) for c in claims)
    assert len(set(batches)) == 3
    tokens_by_id = sorted((c.lease_token for c in claims), key=batch_of)
    done = [
        Completion(token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED, exit_code=0) for token in tokens_by_id
    ]
    oddball = PostgresStore(f"{pg_dsn}?options=-c%20enable_indexscan%3Doff%20-c%20enable_nestloop%3Doff", max_size=2)
    await oddball.open()
    heartbeat = oddball if odd == "heartbeat" else stores[0]
    finisher = oddball if odd == "finish" else stores[1]
    try:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as blocker:
            await blocker.execute("SELECT 1 FROM claim_batches WHERE token = %s FOR UPDATE", (batches[1],))
            finished = asyncio.create_task(finisher.finish(done, T0 + 2 * MIN))
            await waiting_on_a_lock(pg_dsn, 1)
            # The finish holds one row and waits for the middle one: the heartbeat does not wait.
            held = await asyncio.wait_for(heartbeat.extend_leases(tokens_by_id, LEASE, T0 + MIN), timeout=10)
            assert held == set(tokens_by_id)
            assert not finished.done()
            await blocker.commit()
        assert await finished == set(tokens_by_id)
    finally:
        await oddball.close()
    assert await scalar(pg_dsn, "SELECT count(*) FROM occurrences WHERE state = 'SUCCEEDED'") == 3
    assert await stores[0].extend_leases(tokens_by_id, LEASE, T0 + 3 * MIN) == set()  # ended: not held


# -- connection failures -----------------------------------------------------------------------


async def test_an_unreachable_server_is_unavailable_quickly_and_the_password_is_hidden() -> None:
    port = free_port()  # nothing listens there
    dsn = f"postgresql://clockd:s3cret-pw@127.0.0.1:{port}/clockd"
    store = PostgresStore(dsn)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as caught:
        await store.open()
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert f"cannot reach PostgreSQL at 127.0.0.1:{port}/clockd" in message
    assert "start it or fix --store" in message
    assert "s3cret-pw" not in message
    with pytest.raises(StoreUnavailable) as caught:
        await store.migrate()
    assert "s3cret-pw" not in str(caught.value)
    assert "s3cret-pw" not in repr(store)


async def test_after_a_server_restart_the_next_call_succeeds(pg_server: PostgresServer, pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, min_size=3, max_size=3)
    await store.open()
    try:
        await add_schedule(store, "kept")
        await asyncio.gather(*(store.list_schedules() for _ in range(6)))  # every pooled connection used
        await asyncio.to_thread(pg_server.restart)  # every connection in the pool is now dead
        failures = 0
        try:
            await store.list_schedules()
        except StoreUnavailable as exc:
            failures += 1
            assert "PostgreSQL at 127.0.0.1" in str(exc)
        # The failure made the pool drop its other dead connections: the next call works.
        assert [s.name for s in await store.list_schedules()] == ["kept"]
        assert await store.server_time()
        assert failures <= 1
    finally:
        await store.close()


# -- session settings and stored values ----------------------------------------------------------


async def test_every_connection_runs_with_the_session_settings(pg_dsn: str) -> None:
    dsn = f"{pg_dsn}?options=-c%20statement_timeout%3D12345"  # the DSN's own options are kept
    store = PostgresStore(dsn)
    await store.open()
    try:

        async def settings(conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> list[str]:
            names = ("plan_cache_mode", "jit", "TimeZone", "statement_timeout")
            values = []
            for name in names:
                row = await (await conn.execute(f"SHOW {name}")).fetchone()
                assert row is not None  # SHOW answers one row
                values.append(row[0])
            return values

        assert await store._call(settings, write=False) == ["force_custom_plan", "off", "UTC", "12345ms"]
    finally:
        await store.close()


async def test_job_output_with_nul_bytes_is_stored(stores: list[PostgresStore]) -> None:
    store = stores[0]
    _, claim = await running(store)
    done = Completion(
        claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.DEAD, output="a\x00b", error="bad\x00byte"
    )
    assert await store.finish([done], T0 + SEC) == {claim.lease_token}
    [attempt] = await store.list_attempts(claim.occurrence_id)
    assert attempt.output == "a\ufffdb"
    assert attempt.error == "bad\ufffdbyte"


async def test_instants_are_timestamptz_and_documents_jsonb(stores: list[PostgresStore], pg_dsn: str) -> None:
    created = await add_schedule(stores[0], "a", next_run_at=T0)
    types = await scalar(
        pg_dsn,
        "SELECT array[pg_typeof(next_run_at)::text, pg_typeof(spec)::text] FROM schedules WHERE id = %s",
        (created.id,),
    )
    assert types == ["timestamp with time zone", "jsonb"]
    spec = await scalar(pg_dsn, "SELECT spec->'target' FROM schedules WHERE id = %s", (created.id,))
    assert spec == json.loads(json.dumps(created.definition.target.to_json()))


# -- the SQL itself ------------------------------------------------------------------------------


def _numbered(query: str) -> str:
    """psycopg's %(name)s / %(name)b placeholders as $1, $2, … (one number per name)."""
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    return re.sub(r"%\((\w+)\)[sb]", number, query)


async def test_every_named_statement_prepares_against_the_schema(stores: list[PostgresStore], pg_dsn: str) -> None:
    """Including the steps of claim_lease and relay_dispatch kept for parity, which the
    store does not run: they must stay true to the schema. (DDL cannot be prepared;
    schema_migrations_create runs in every migrate. Nor can SET: snapshot_read runs in
    every reconcile_rows. Nor VACUUM, nor a DO block: queue_vacuum and
    stale_statistics_analyze run in their own tests.)"""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        for i, (name, query) in enumerate([*Q.items(), *PG.items()]):
            code = query.split("\n", 1)[1]  # after the "/* name */" line (clockd.store.sql)
            if code.lstrip().upper().startswith(("CREATE ", "SET ", "VACUUM ", "DO ")):  # cannot be prepared
                continue
            try:
                await conn.execute(f"PREPARE q{i} AS {_numbered(query)}")
            except psycopg.Error as exc:
                pytest.fail(f"{name} does not prepare: {exc}")


async def test_the_claim_reads_the_ready_index_in_order_without_statistics(
    stores: list[PostgresStore], pg_dsn: str
) -> None:
    """The shape the notes warn about: no scan of the queue, no sort of every visible row,
    even right after a bulk load (no ANALYZE has run since). The rows land in the partition
    of their week (schema 0017) beside the week's history, analyzed when the leader last
    made the weeks (the partitioned tables' own statistics, which autovacuum never
    gathers: without them a join by id to occurrences was estimated at thousands of rows
    a row, and the claim's update of its occurrences scanned every partition)."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute("SELECT clockd_history_extend(%s, %s)", (T0, T0))
        # The week's history so far: 50,000 runs that ended, enough that scanning the
        # partition costs more than looking rows up by key in every partition.
        await conn.execute(
            "INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for, "
            "available_at, state, attempts, max_attempts, finished_at) "
            "SELECT clockd_id_bound(at) || '-8' || substr(h, 1, 3) || '-a' || substr(h, 4, 3) || '-' "
            "|| substr(h, 7, 12), 'old', 1, 'default', 'default', at, at, 'SUCCEEDED', 1, 1, at "
            "FROM generate_series(1, 50000) AS g, "
            "LATERAL (SELECT %s - g * interval '1 s' AS at, md5(g::text) AS h) AS x",
            (T0,),
        )
        await conn.execute("SELECT clockd_history_extend(%s, %s)", (T0, T0))  # the leader's next prune
    await fill_queue(stores[0], 2000)
    params = claim_params(["default", "other"], 100)
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute("SET plan_cache_mode = force_custom_plan")
        cur = await conn.execute("EXPLAIN " + Q["claim_lease"], params)
        plan = "\n".join(row[0] for row in await cur.fetchall())
        week = await (await conn.execute("SELECT count(*) FROM occurrences_w20260223")).fetchone()
    assert week == (52000,)  # T0's week, Monday 2026-02-23
    assert "Index Scan using dispatch_ready on dispatch" in plan, plan
    assert not re.search(r"Seq Scan on dispatch\s+\(", plan), (
        plan
    )  # the pick (the UPDATE's own scan may seq-scan a small table)
    # No partition holding rows is scanned whole (an empty one costs nothing to scan).
    scanned = re.findall(r"Seq Scan on (occurrences\w*) .*\(cost=([0-9.]+)\.\.([0-9.]+)", plan)
    assert [name for name, _, end in scanned if float(end) > 0] == [], plan
    claims = await stores[1].claim(["default", "other"], "w", 100, LEASE, T0 + MIN)
    assert [c.scheduled_for for c in claims] == [T0 + i * US for i in range(100)]


async def fill_queue_of_distinct_schedules(store: PostgresStore, count: int, overlap: OverlapPolicy) -> None:
    """``count`` visible dispatch rows, one for each of ``count`` schedules of ``overlap``."""
    schedules = [await add_schedule(store, f"s{i}", next_run_at=T0, overlap=overlap) for i in range(count)]
    result = await store.materialize(
        FENCE, [planned(s, T0) for s in schedules], [CursorAdvance(s.id, 1, T0, T0 + MIN) for s in schedules], T0 - MIN
    )
    assert result.inserted == count
    assert (await store.relay(T0 + MIN, count, T0 - MIN)).moved == count


@pytest.mark.parametrize("overlap", [None, OverlapPolicy.ALLOW, OverlapPolicy.SKIP])
async def test_the_claim_visits_each_row_of_its_batch_a_bounded_number_of_times(
    stores: list[PostgresStore], pg_dsn: str, overlap: OverlapPolicy | None
) -> None:
    """A claim of 500 rows reads no CTE once per claimed row. The planner estimates every
    CTE at a row or ten, so a CTE joined to another (or looked up by a subquery per row)
    becomes a nested loop: the claim was quadratic in its batch, 250,000 CTE row visits for
    500 rows and most of its time at 10,000 claims/s (issue 18). ``None``: 600 rows of one
    schedule; otherwise one row of each of 600 schedules of that overlap policy (each with
    its overlap slot)."""
    if overlap is None:
        await fill_queue(stores[0], 600)
    else:
        await fill_queue_of_distinct_schedules(stores[0], 600, overlap)
    params = claim_params(["default"], 500)
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:  # rolled back: nothing claimed
        cur = await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + Q["claim_lease"], params)
        row = await cur.fetchone()
        assert row is not None
        await conn.rollback()
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])

    def scans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield node
        for child in node.get("Plans", []):
            yield from scans(child)

    root = plan[0]["Plan"]
    assert root["Actual Rows"] == 500
    rescanned = [
        f"{n['Node Type']} on {n.get('CTE Name')}: {n['Actual Loops']} loops of {n['Actual Rows']} rows"
        for n in scans(root)
        if n["Node Type"] == "CTE Scan" and n["Actual Loops"] > 1 and n["Actual Rows"] * n["Actual Loops"] > 5_000
    ]
    assert not rescanned, rescanned


async def analyzed_plan(dsn: str, name: str, params: dict[str, Any], analyze: str = "") -> list[dict[str, Any]]:
    """Every node of the plan of the named query as it ran (EXPLAIN ANALYZE; nothing kept:
    rolled back), the root first; ``analyze`` names a table to ANALYZE first."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        if analyze:
            await conn.execute(f"ANALYZE {analyze}")
        cur = await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + Q[name], params)
        row = await cur.fetchone()
        await conn.rollback()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])

    def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    return list(nodes(plan[0]["Plan"]))


async def test_the_backlog_sample_reads_only_the_rows_claimable_now(stores: list[PostgresStore], pg_dsn: str) -> None:
    """The leader samples the backlog every 10 s. With direct dispatch the queue holds the
    horizon's rows planned ahead (1.2 M at 10,000/s): queue_ready counts each queue's range
    up to now, not every unleased row (as the backlog's count did)."""
    await fill_queue(stores[0], 2000)  # visible at T0 + i µs
    now = T0 + 99 * US  # 100 rows claimable, 1,900 staged for later
    plan = await analyzed_plan(pg_dsn, "queue_ready", {"now": now})
    read = sum(n["Actual Rows"] * n["Actual Loops"] for n in plan if n.get("Relation Name") == "dispatch")
    assert read <= 110, plan  # the 100 claimable rows and the skip scan's probes
    backlog = await stores[1].backlog(now)
    assert (backlog.queued, backlog.oldest_queued_at) == (100, T0)
    assert [(q.queue, q.ready, q.staged) for q in await stores[1].queue_stats(now)] == [("default", 100, 1900)]


async def test_an_idle_workers_next_visible_reads_one_row_of_a_queue_never_analyzed(
    stores: list[PostgresStore], pg_dsn: str
) -> None:
    """An idle worker asks every poll (0.1 s) when the next row becomes visible; before a
    burst the queue holds the horizon's rows (500,000 in the drill), never analyzed. The
    answer is dispatch_ready's first entry past now, never a scan of the queue."""
    await fill_queue(stores[0], 2000)  # visible at T0 + i µs, never analyzed
    now = T0 + 99 * US  # 100 visible already, 1,900 staged for later
    plan = await analyzed_plan(pg_dsn, "next_visible", {"queues": ["default"], "now": now})
    assert not [n for n in plan if n["Node Type"] == "Seq Scan"], plan
    read = sum(n["Actual Rows"] * n["Actual Loops"] for n in plan if n.get("Relation Name") == "dispatch")
    assert read == 1, plan
    assert await stores[1].next_visible(["default"], now) == T0 + 100 * US


async def test_reading_ahead_reads_a_chunk_of_the_queue_and_probes_only_its_occurrences(
    stores: list[PostgresStore], pg_dsn: str
) -> None:
    """An idle worker reads ahead a chunk of the rows staged next (2,000 of the 500,000 drill's
    at a time): dispatch_ready from the position on, one probe of each row's occurrence —
    never a scan of the queue or a join over the history, analyzed or not."""
    await fill_queue(stores[0], 2000)  # visible at T0 + i µs
    params = {"queues": ["default"], "after_at": T0 + 999 * US, "after_id": 2**63 - 1, "limit": 100}
    for analyze in ("", "dispatch, occurrences"):
        plan = await analyzed_plan(pg_dsn, "queue_upcoming_definitions", params, analyze=analyze)
        ran = [n for n in plan if n.get("Actual Loops")]  # the empty weeks' scans are pruned as it runs
        assert not [n for n in ran if n["Node Type"] in ("Seq Scan", "Hash Join", "Merge Join")], plan
        tables = [(n.get("Relation Name", ""), n["Actual Rows"] * n["Actual Loops"]) for n in ran]
        read = {t: sum(rows for name, rows in tables if name.startswith(t)) for t in ("dispatch", "occurrences")}
        assert read == {"dispatch": 100, "occurrences": 100}, plan
    done = await stores[1].read_ahead_definitions(["default"], None, T0 + 999 * US, 100)
    assert (done.looked_at, done.read) == (100, 1)  # the rows of one schedule
    assert done.after is not None and done.after[0] == T0 + 1099 * US


@pytest.fixture
async def one_store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    """An open store with one pooled connection, whose counters ``published`` makes its
    backend report (a backend left idle reports them up to 10 s later)."""
    store = PostgresStore(pg_dsn, min_size=1, max_size=1)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def table_stats(dsn: str, table: str) -> tuple[int, int]:
    """(ANALYZEs so far, rows changed since the last) of ``table`` in the cumulative statistics."""
    query = (
        "SELECT array[analyze_count, n_mod_since_analyze]::bigint[] FROM pg_stat_user_tables WHERE relid = %s::regclass"
    )
    analyzed, changed = await scalar(dsn, query, (table,))
    return int(analyzed), int(changed)


async def finish_all(store: PostgresStore, count: int, now: datetime) -> int:
    """Claim up to ``count`` rows and finish them, succeeded, in batches of 500; how many."""
    finished = 0
    while finished < count and (claims := await store.claim(["default"], "w", min(500, count - finished), LEASE, now)):
        done = [Completion(c.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED) for c in claims]
        finished += len(await store.finish(done, now))
    return finished


async def test_a_burst_staged_after_the_queue_was_vacuumed_empty_is_claimed_by_key(
    one_store: PostgresStore, pg_dsn: str
) -> None:
    """The top-of-hour pattern: a burst drains, the leader VACUUMs the empty queue (TRUNCATE
    false: reltuples 0 over the pages kept), the next burst is staged. PostgreSQL estimates
    a table's rows as reltuples / relpages × its pages now — 0 — so until an ANALYZE it
    plans the new burst's claim as if the queue held one row: the lease's update joined its
    `starters` by a full scan of dispatch's primary key (4.5 s for 500 of 20,000 rows on a
    quiet server). The leader's next tick VACUUMs again, which does not mend it when it
    scans under 2 % of an unchanged table's pages (it keeps the old count: here a small
    burst after a large one), and then ANALYZEs the queue (its statistics count fewer rows
    than pages, and more than 1,000 rows changed since): the claim after that tick looks
    its rows up by key."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        # No autovacuum ANALYZE between the burst and the claim (it comes at most once a
        # minute in production; pinned here so that the test says the same every run). A
        # large first burst, drawn as pages: rows spread 10 % full over 1,200 pages.
        await conn.execute("ALTER TABLE dispatch SET (autovacuum_enabled = false, fillfactor = 10)")
    await fill_queue(one_store, 7200, "first")
    assert await finish_all(one_store, 7200, T0 + MIN) == 7200
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute("ALTER TABLE dispatch RESET (fillfactor)")
    await published(one_store)
    assert await one_store.vacuum_queue()  # as the leader does every 2 s: the queue is empty
    await fill_queue(one_store, 1100, "second")  # ~20 pages of the 1,200 kept
    await published(one_store)
    analyzed, changed = await table_stats(pg_dsn, "dispatch")
    assert changed >= 1100
    assert await one_store.vacuum_queue()  # the leader's next tick
    assert (await table_stats(pg_dsn, "dispatch"))[0] == analyzed + 1
    plan = await analyzed_plan(pg_dsn, "claim_plain", claim_params(["default"], 100))
    full_scans = [
        (n.get("Relation Name"), n.get("Actual Loops"))
        for n in plan
        if n["Node Type"] in ("Index Scan", "Index Only Scan", "Seq Scan")
        and "Index Cond" not in n
        and n.get("Actual Loops")
        and n.get("Relation Name", "").startswith(("dispatch", "occurrences"))
    ]
    assert not full_scans, full_scans


async def test_a_finish_after_its_partition_was_counted_empty_probes_by_key(
    one_store: PostgresStore, pg_dsn: str
) -> None:
    """A week's partition whose statistics were taken while the first rows written to it
    were not visible to ANALYZE (the leader's ANALYZE of history at its first prune beside
    the materializer's first batch: an insert in progress counts no row) says 0 rows over
    its pages, and the planner takes it for one row: the finish (planned by key, sequential
    scans off) joined its batch to every partition by a full scan of each one's key,
    materialized — ~1 s a finish of 500 over 20,000 rows (run II2's 20,000 drill drained at
    637/s). The same statistics are made here by an ANALYZE inside a transaction that has
    deleted the rows and then rolls back (pg_class's counts are written in place, kept).
    The leader's next tick ANALYZEs the partition (fewer rows counted than pages, more
    than 1,000 changed since), and the finish after it reads its rows by key."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute("SELECT clockd_history_extend(%s, %s)", (T0, T0))  # T0's week, analyzed empty
    schedule = await add_schedule(one_store, "bulk", next_run_at=T0)
    occurrences = [planned(schedule, T0 + i * US) for i in range(20_000)]
    random.Random(18).shuffle(occurrences)  # a batch's ids all over the partition, as a drill's
    cursor = CursorAdvance(schedule.id, 1, T0, T0 + MIN)
    assert (await one_store.materialize(FENCE, occurrences, [cursor], T0 - MIN, direct=True)).inserted == 20_000
    partition = await scalar(pg_dsn, "SELECT tableoid::regclass::text FROM occurrences LIMIT 1")
    assert partition != "occurrences_default"
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        await conn.execute(f"ALTER TABLE {partition} SET (autovacuum_enabled = false)")
        await conn.commit()
        await conn.execute(f"DELETE FROM {partition}")
        await conn.execute(f"ANALYZE {partition}")
        await conn.rollback()

    async def counted() -> float:
        """The partition's rows as its statistics count them."""
        return float(await scalar(pg_dsn, "SELECT reltuples FROM pg_class WHERE oid = %s::regclass", (partition,)))

    assert await counted() == 0  # 20,000 rows in the partition, 0 counted over its pages

    async def keys_read() -> int:
        """Index entries of the partition's key read so far (a probe reads one)."""
        await published(one_store)
        query = "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelid = %s::regclass"
        return int(await scalar(pg_dsn, query, (partition + "_pkey",)))

    before = await keys_read()
    assert await finish_all(one_store, 600, T0 + MIN) == 600  # claims and finishes: 1,200 changes
    misread = await keys_read() - before
    assert misread > 20_000  # the stale plan, reproduced: the partition's key read whole
    assert await one_store.vacuum_queue()  # the leader's tick
    assert await counted() > 10_000
    before = await keys_read()
    assert await finish_all(one_store, 500, T0 + MIN) == 500
    read = await keys_read() - before
    assert read <= 4 * 500, (read, misread)  # each claimed and finished row probed by key


async def test_the_leader_analyzes_the_queue_only_when_its_statistics_fall_behind(
    one_store: PostgresStore, pg_dsn: str
) -> None:
    """The tick's ANALYZE is for a table whose statistics say "nearly empty" (fewer rows than
    pages): one they count full is left to its VACUUMs and autovacuum's ANALYZE, however
    much it changes (at ~40 ms for 20,000 rows, an ANALYZE every few thousand executions
    would cost a draining queue more than the plans it mends)."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute("ALTER TABLE dispatch SET (autovacuum_enabled = false)")
    await fill_queue(one_store, 1500)
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute("ANALYZE dispatch")  # as autovacuum would: the statistics know 1,500 rows
    analyzed, _ = await table_stats(pg_dsn, "dispatch")
    assert await finish_all(one_store, 600, T0 + MIN) == 600
    await published(one_store)
    assert (await table_stats(pg_dsn, "dispatch"))[1] >= 1200  # 600 leases and 600 deletes
    for _ in range(3):
        assert await one_store.vacuum_queue()
    assert (await table_stats(pg_dsn, "dispatch"))[0] == analyzed


async def test_the_backlog_sample_counts_due_schedules_by_shard_range(stores: list[PostgresStore], pg_dsn: str) -> None:
    """The leader's 10-second sample counts the due schedules per shard over schedules_due's
    range up to now, not by reading every active schedule's index entry (the index leads
    with the shard: a plain count filtered on next_run_at read all 1 M in the scale run)."""
    news = [
        NewSchedule(new_schedule_id(), definition(f"s{i}"), i % 8, T0 - MIN if i % 100 == 0 else T0 + MIN)
        for i in range(2000)
    ]
    assert len((await stores[0].apply_schedules(news, [], T0 - 2 * MIN)).created) == 2000
    plan = await analyzed_plan(pg_dsn, "backlog", {"now": T0}, analyze="schedules")
    scans = [n for n in plan if n.get("Relation Name") == "schedules"]
    # The count seeks each shard's range (a count filtered on next_run_at alone scans the
    # table or the whole index, which EXPLAIN's row counts do not show).
    assert not [n for n in scans if n["Node Type"] == "Seq Scan"], plan
    counts = [n.get("Index Cond", "") for n in plan if "next_run_at" in n.get("Index Cond", "")]
    assert counts and all("shard =" in cond for cond in counts), plan
    read = sum((n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"] for n in scans)
    assert read <= 20 + 2 * 9, plan  # the 20 due and the skip scan's probes (8 shards)
    assert (await stores[1].backlog(T0)).due_schedules == 20


@pytest.mark.parametrize("late", [False, True], ids=["nothing late", "100 schedules late"])
async def test_a_misfire_sweep_reads_only_the_rows_it_looks_at(
    stores: list[PostgresStore], pg_dsn: str, late: bool
) -> None:
    """The leader sweeps every 5 s, looking at each queue's oldest :limit rows. In a
    top-of-hour drain every queued row is a few seconds old and none is late: the sweep
    finds no late schedule and reads nothing more. Where it finds late schedules it reads
    their queued rows, not the queue. Both read every unleased row of the queue before
    (the late rows' join, planned before any ANALYZE of the queue, walked a ready index
    instead of probing by key): 0.6 s of database time per sweep over a 100,000-row
    drain, 1 s over a 30,000-row queue with 1,000 schedules late."""
    if late:
        await fill_queue_of_distinct_schedules(stores[0], 600, OverlapPolicy.ALLOW)  # at T0
        now = T0 + 20 * MIN  # beyond max_lateness (10 min)
    else:
        await fill_queue(stores[0], 2000)  # visible at T0 + i µs
        now = T0 + 30 * SEC  # older than the sweep's 1-s floor, within max_lateness
    params = {"now": now, "floor": SEC, "limit": 100, **policy_rules()}
    plan = await analyzed_plan(pg_dsn, "misfire_pick", params)
    read = sum(n["Actual Rows"] * n["Actual Loops"] for n in plan if n.get("Relation Name") == "dispatch")
    # The 100 looked at (and their late_schedules check); when late, each late row found
    # by its occurrence and locked by id.
    assert read <= (4 if late else 2) * 100 + 10, (read, plan)
    assert plan[0]["Actual Rows"] == (100 if late else 0)


async def test_the_reaper_reads_the_leases_by_index_without_statistics(pg_dsn: str) -> None:
    """The leader reaps every second, reading every lease through dispatch_lease_token.
    Right after a burst, before any ANALYZE of the queue, the planner takes 199 rows in
    200 for leased (its default for IS NOT NULL) and scanned the whole queue instead: 82
    ms a tick over 100,000 queued rows against 10.6 ms through the index. One pooled
    connection: pg_stat_force_next_flush() makes that backend publish its counters."""
    store = PostgresStore(pg_dsn, min_size=1, max_size=1)
    await store.open()
    try:
        await fill_queue(store, 2000)  # never analyzed
        claims = await store.claim(["default"], "w", 100, LEASE, T0 + MIN)
        before = await sequential_scans(store, pg_dsn, "dispatch")
        reaped = await store.reap_expired(FENCE, 1000, T0 + MIN + LEASE + SEC)
        after = await sequential_scans(store, pg_dsn, "dispatch")
    finally:
        await store.close()
    assert sorted(r.occurrence_id for r in reaped) == sorted(c.occurrence_id for c in claims)
    assert after == before, "the reap scanned the whole queue"


async def test_a_finish_finds_its_leases_by_index_without_statistics(pg_dsn: str) -> None:
    """A finish finds its queue rows by index, whatever the statistics. Right after a
    burst, before ANALYZE or VACUUM has seen the queue, the planner estimated the finish's
    leases at 228 rows and deleted their queue rows through a hash join over a scan of the
    whole queue (other states gave a merge join over a full index scan; in one 20,000
    drill every finish of 500 took 1.2 s). One pooled connection:
    pg_stat_force_next_flush() makes that backend publish its counters."""
    store = PostgresStore(pg_dsn, min_size=1, max_size=1)
    await store.open()
    try:
        await fill_queue(store, 20_000)  # never analyzed nor vacuumed
        claims = await store.claim(["default"], "w", 500, LEASE, T0 + MIN)
        assert len(claims) == 500
        before = await sequential_scans(store, pg_dsn, "dispatch")
        done = [Completion(c.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED) for c in claims]
        assert len(await store.finish(done, T0 + MIN + SEC)) == 500
        after = await sequential_scans(store, pg_dsn, "dispatch")
    finally:
        await store.close()
    assert after == before, "the finish scanned the queue"


async def test_a_finish_updates_its_occurrences_by_key_not_by_a_scan_of_their_partition(pg_dsn: str) -> None:
    """A worker's finish looks its occurrences up by key, whatever the planner thinks of
    the partition. At the default random_page_cost a batch of 500 over an analyzed weekly
    partition of 20,000 rows (the 20,000 drill) was a hash join over a scan of the whole
    partition: ~16 µs of database time per execution against ~9 by key, and a scan that
    grows with the week. One pooled connection: pg_stat_force_next_flush() makes that
    backend publish its counters."""
    store = PostgresStore(pg_dsn, min_size=1, max_size=1)
    await store.open()
    try:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute("SELECT clockd_history_extend(%s, %s)", (T0, T0))  # T0's week
        # The drill's 20,000 rows: many schedules' instants, so a batch's ids lie all over
        # the partition (one schedule's, written in time order, lie side by side).
        schedule = await add_schedule(store, "bulk", next_run_at=T0)
        occurrences = [planned(schedule, T0 + i * US) for i in range(20_000)]
        random.Random(18).shuffle(occurrences)
        cursor = CursorAdvance(schedule.id, 1, T0, T0 + MIN)
        assert (await store.materialize(FENCE, occurrences, [cursor], T0 - MIN, direct=True)).inserted == 20_000
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute("ANALYZE")  # what autovacuum does within a minute of the load
        claims = await store.claim(["default"], "w", 500, LEASE, T0 + MIN)
        assert len(claims) == 500
        before = await sequential_scans(store, pg_dsn, "occurrences")
        done = [Completion(c.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED) for c in claims]
        assert len(await store.finish(done, T0 + MIN + SEC)) == 500
        after = await sequential_scans(store, pg_dsn, "occurrences")
        states = await scalar(
            pg_dsn,
            "SELECT array_agg(DISTINCT state) FROM occurrences WHERE id = ANY(%s)",
            ([c.occurrence_id for c in claims],),
        )
    finally:
        await store.close()
    assert states == ["SUCCEEDED"]
    assert after == before, "the finish scanned the occurrences' partition"


# -- HOT updates (schema 0004) -------------------------------------------------------------------


async def test_the_relay_the_claim_and_the_finish_update_occurrences_heap_only(pg_dsn: str) -> None:
    """No index of occurrences uses a column the relay, the claim or a successful finish
    changes (0004 took state out of occurrences_dead's predicate, 0006 finished_at out of
    every index), so with room on the page every update is HOT: the hot path writes no
    index entries. Five rows fit one page with all four of their versions, so this holds
    whether or not the page gets pruned in between. One
    pooled connection: pg_stat_force_next_flush() makes that backend publish its counters
    before it answers, no waiting."""
    store = PostgresStore(pg_dsn, min_size=1, max_size=1)
    await store.open()
    try:

        async def updates() -> tuple[int, int]:
            await published(store)
            query = (  # every partition's (schema 0017)
                "SELECT array[sum(n_tup_upd), sum(n_tup_hot_upd)]::bigint[] FROM pg_stat_user_tables "
                "WHERE relid IN (SELECT relid FROM pg_partition_tree('occurrences'))"
            )
            total, hot = await scalar(pg_dsn, query)
            return total, hot

        count = 5
        schedule = await add_schedule(store, "hot", next_run_at=T0)
        occurrences = [planned(schedule, T0 + i * SEC) for i in range(count)]
        cursor = CursorAdvance(schedule.id, 1, T0, T0 + count * SEC)
        assert (await store.materialize(FENCE, occurrences, [cursor], T0 - MIN)).inserted == count
        start = await updates()
        assert (await store.relay(T0 + MIN, count, T0)).moved == count
        relayed = await updates()
        claims = await store.claim(["default"], "w", count, LEASE, T0 + MIN)
        assert len(claims) == count
        claimed = await updates()
        done = [Completion(c.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED) for c in claims]
        assert len(await store.finish(done, T0 + MIN + SEC)) == count
        finished = await updates()
    finally:
        await store.close()
    assert (relayed[0] - start[0], relayed[1] - start[1]) == (count, count), "relay updates not all HOT"
    assert (claimed[0] - relayed[0], claimed[1] - relayed[1]) == (count, count), "claim updates not all HOT"
    assert (finished[0] - claimed[0], finished[1] - claimed[1]) == (count, count), "finish updates not all HOT"


async def test_the_direct_materialize_reads_none_of_the_occurrences_it_writes(pg_dsn: str) -> None:
    """direct_dispatch: the queue rows come from the insert's own RETURNING, in the same
    statement. Written as a second statement that looked each new occurrence up by id,
    the materializer's transaction fetched every row it had just written back from
    ``occurrences`` (500,000 heap fetches in the 500,000 drill, which then materialized at
    ~2,550/s instead of ~6,100/s). One pooled connection: pg_stat_force_next_flush()
    makes that backend publish its counters before it answers."""
    store = PostgresStore(pg_dsn, min_size=1, max_size=1)
    await store.open()
    try:

        async def fetched() -> int:
            await published(store)
            query = (  # every partition's (schema 0017)
                "SELECT sum(coalesce(idx_tup_fetch, 0) + seq_tup_read) FROM pg_stat_user_tables "
                "WHERE relid IN (SELECT relid FROM pg_partition_tree(%s::regclass))"
            )
            return int(await scalar(pg_dsn, query, ("occurrences",)))

        count = 200
        schedule = await add_schedule(store, "direct", next_run_at=T0)
        occurrences = [planned(schedule, T0 + i * SEC) for i in range(count)]
        cursor = CursorAdvance(schedule.id, 1, T0, T0 + count * SEC)
        before = await fetched()
        assert (await store.materialize(FENCE, occurrences, [cursor], T0 - MIN, direct=True)).inserted == count
        after = await fetched()
        queued = await scalar(pg_dsn, "SELECT count(*) FROM dispatch")
    finally:
        await store.close()
    assert queued == count
    assert after - before < count // 10, f"the direct materialize read {after - before} occurrence rows back"


async def test_dead_at_follows_state_and_the_dead_letter_reads_use_occurrences_dead(
    stores: list[PostgresStore], pg_dsn: str
) -> None:
    store = stores[0]
    _, claim = await running(store)
    oid = claim.occurrence_id

    async def dead() -> bool:
        return await scalar(pg_dsn, "SELECT dead_at FROM occurrences WHERE id = %s", (oid,)) is not None

    assert await dead() is False  # RUNNING
    failed = Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.DEAD, error="boom")
    assert await store.finish([failed], T0 + SEC) == {claim.lease_token}
    assert await dead() is True
    assert [o.id for o in await store.list_dead()] == [oid]
    assert await store.dead_count() == 1
    await store.replay_dead(oid, "fixed", T0 + MIN)
    assert await dead() is False  # ENQUEUED again
    assert await store.list_dead() == []
    # occurrences_dead's predicate is on dead_at: the planner uses it only if the query says so.
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute("SET enable_seqscan = off")
        for name, params, index in (
            ("dlq_list", {"tenant": None, "limit": 50, "before_at": None, "before_id": None}, "occurrences_dead"),
            ("dlq_list", {"tenant": None, "limit": 50, "before_at": T0, "before_id": "x"}, "occurrences_dead"),
            ("dead_count", {}, "occurrences_dead"),
            ("not_run_counts", {"since": T0, "until": T0 + MIN}, "occurrences_not_run"),
            ("prune", {"before": T0, "limit": 100}, "occurrences_recent"),
        ):
            cur = await conn.execute("EXPLAIN " + Q[name], params)
            plan = "\n".join(row[0] for row in await cur.fetchall())
            # The partitions' indexes (schema 0017): occurrences_default_dead,
            # occurrences_w20260223_dead, … are the parts of occurrences_dead.
            part = rf"occurrences(?:_default|_w[0-9]{{8}})?_{index.removeprefix('occurrences_')}\b"
            assert re.search(part, plan), f"{name}:\n{plan}"


# -- the queue's upkeep ----------------------------------------------------------------------


def _queue_state(dsn: str) -> tuple[int, int, int]:
    """The queue's live and dead row versions (pgstattuple: the pages themselves, not the
    statistics collector's estimate) and how often it was vacuumed by hand."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        found = conn.execute(
            "SELECT t.tuple_count, t.dead_tuple_count, s.vacuum_count "
            "FROM pgstattuple('dispatch') AS t, pg_stat_user_tables AS s WHERE s.relname = 'dispatch'"
        ).fetchone()
    assert found is not None
    return int(found[0]), int(found[1]), int(found[2])


async def test_vacuum_queue_removes_the_dead_rows_finished_runs_leave(stores: list[PostgresStore], pg_dsn: str) -> None:
    """Every run leaves dead versions of its queue row (the claim's update, the finish's
    delete), and their entries at the head of the ready indexes every claim walks, until
    a vacuum; autovacuum comes at most once a minute. The leader's vacuum_queue removes
    them at once and keeps the rows still queued."""
    store = stores[0]
    await fill_queue(store, 300)
    claims = await store.claim(["default"], "w", 200, LEASE, T0 + MIN)
    assert len(claims) == 200
    done = [Completion(c.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED) for c in claims]
    assert await store.finish(done, T0 + MIN + SEC) == {c.lease_token for c in claims}
    _, _, vacuums = _queue_state(pg_dsn)

    assert await store.vacuum_queue() is True

    live, dead, vacuumed = _queue_state(pg_dsn)
    assert (live, dead, vacuumed) == (100, 0, vacuums + 1)
    rest = await stores[1].claim(["default"], "w2", 500, LEASE, T0 + MIN)
    assert len(rest) == 100


async def test_vacuum_queue_reports_a_role_that_may_not_vacuum(stores: list[PostgresStore], pg_dsn: str) -> None:
    """A role that owns no table (as clockd_daemon of roles.sql): PostgreSQL only warns
    and skips its VACUUM, so vacuum_queue says so (the leader then logs it once) and does
    nothing. (A role of its own rather than roles.sql's: those are cluster-wide, and
    other test files create them at the same time.)"""
    role = f"daemon_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
    daemon = PostgresStore(psycopg.conninfo.make_conninfo(pg_dsn, user=role), max_size=2)
    try:
        await daemon.open()
        _, _, vacuums = _queue_state(pg_dsn)
        assert await daemon.vacuum_queue() is False
        assert _queue_state(pg_dsn)[2] == vacuums
        assert await stores[0].vacuum_queue() is True  # the owner may
    finally:
        await daemon.close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")  # its grants in this database
            conn.execute(f"DROP ROLE {role}")


async def test_vacuum_queue_never_waits_to_shrink_the_table(stores: list[PostgresStore], pg_dsn: str) -> None:
    """Giving a table's empty end pages back takes an ACCESS EXCLUSIVE lock, which every
    claim would queue behind, and a plain VACUUM tries for it up to 5 s — holding up the
    leader's tick (reaps included) while any session reads the queue. The queue's pages
    are needed again at once: vacuum_queue does not try (TRUNCATE false)."""
    store = stores[0]
    await fill_queue(store, 300)
    claims = await store.claim(["default"], "w", 300, LEASE, T0 + MIN)
    done = [Completion(c.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED) for c in claims]
    assert await store.finish(done, T0 + MIN + SEC) == {c.lease_token for c in claims}
    with psycopg.connect(pg_dsn) as reader:  # a session in the middle of reading the queue
        reader.execute("SELECT count(*) FROM dispatch").fetchone()
        began = time.monotonic()
        assert await store.vacuum_queue() is True
        took = time.monotonic() - began
    assert took < 4.0, f"vacuum_queue took {took:.1f} s: it waited for the table's exclusive lock"
    assert _queue_state(pg_dsn)[:2] == (0, 0)
