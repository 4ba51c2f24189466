"""Schema 0017 (PostgreSQL): history in weekly partitions on the occurrence id, retired
whole. What the leader's ``prune`` promises: a week is dropped only when every occurrence
of it is terminal and finished before the cutoff, with its attempts; a week still holding
a live run stays (its ended rows go by the row delete) until a later prune finds it done;
nothing queued is dropped; a new week takes over the rows of its range an older store left
in the DEFAULT partition; an upgraded store keeps every row; and the daemon's role, which
owns no table, does all of it through the functions the migration made."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from clockd.core.ids import legacy_occurrence_id
from clockd.core.model import AttemptOutcome, OccurrenceState
from clockd.store import Completion, CursorAdvance, Fence
from clockd.store.postgres.store import MIGRATIONS, PostgresStore
from tests.harness import PostgresServer

from .support import FENCE, LEASE, MIN, SEC, T0, add_schedule, planned, scalar

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

LEADER = Fence("leader", 1)
WEEK = "20260223"  # T0 (Sunday 2026-03-01) falls in the week from Monday 2026-02-23
DAY = timedelta(days=1)


async def week_exists(dsn: str, week: str = WEEK) -> bool:
    made = (await scalar(dsn, "SELECT to_regclass(%s)", (f"occurrences_w{week}",)),
            await scalar(dsn, "SELECT to_regclass(%s)", (f"attempts_w{week}",)))  # fmt: skip
    assert (made[0] is None) == (made[1] is None), made  # the two go together
    return made[0] is not None


async def claimed(store: PostgresStore, count: int, at: datetime = T0) -> list[Any]:
    """``count`` occurrences of one schedule from ``at``, a second apart, claimed."""
    schedule = await add_schedule(store, f"s-{uuid.uuid4().hex[:6]}", next_run_at=at)
    occurrences = [planned(schedule, at + i * SEC) for i in range(count)]
    cursor = CursorAdvance(schedule.id, 1, at, at + count * SEC)
    assert (await store.materialize(FENCE, occurrences, [cursor], at - MIN)).inserted == count
    assert (await store.relay(at + MIN, count, at)).moved == count
    claims = await store.claim(["default"], "w", count, LEASE, at + MIN)
    assert len(claims) == count
    return claims


async def dead(store: PostgresStore, claims: list[Any], at: datetime) -> None:
    """Finish ``claims`` DEAD (a failure writes its attempt row)."""
    done = [Completion(c.lease_token, AttemptOutcome.FAILED, OccurrenceState.DEAD, error="boom") for c in claims]
    assert await store.finish(done, at) == {c.lease_token for c in claims}


async def test_the_leader_makes_the_weeks_around_now(pg_store: PostgresStore, pg_dsn: str) -> None:
    assert not await week_exists(pg_dsn)
    assert await pg_store.prune(LEADER, T0 - 365 * DAY, 100, T0) == 0
    for week in ("20260216", WEEK, "20260302", "20260309"):  # a week back to two ahead
        assert await week_exists(pg_dsn, week), week
    assert not await week_exists(pg_dsn, "20260316")
    # Its indexes are named as their parents'; planned rows land in it.
    names = await scalar(pg_dsn, "SELECT array_agg(indexname ORDER BY indexname) FROM pg_indexes WHERE tablename = %s",
                         (f"occurrences_w{WEEK}",))  # fmt: skip
    assert names == [f"occurrences_w{WEEK}_{n}" for n in ("by_schedule", "dead", "not_run", "pkey", "recent")]
    claims = await claimed(pg_store, 3)
    where = await scalar(pg_dsn, "SELECT array_agg(DISTINCT tableoid::regclass::text) FROM occurrences")
    assert where == [f"occurrences_w{WEEK}"] and len(claims) == 3


async def test_a_finished_week_is_retired_whole_with_its_attempts(pg_store: PostgresStore, pg_dsn: str) -> None:
    await pg_store.prune(LEADER, T0 - 365 * DAY, 100, T0)
    claims = await claimed(pg_store, 5)
    await dead(pg_store, claims, T0 + 2 * MIN)
    assert len(await pg_store.list_attempts(claims[0].occurrence_id)) == 1
    # A limit of 0: the row delete takes nothing, so what goes is the week's drop.
    assert await pg_store.prune(LEADER, T0 + 30 * DAY, 0, T0 + 30 * DAY) == 5
    assert not await week_exists(pg_dsn)
    assert await scalar(pg_dsn, "SELECT count(*) FROM occurrences") == 0
    assert await scalar(pg_dsn, "SELECT count(*) FROM attempts") == 0
    assert await pg_store.get_occurrence(claims[0].occurrence_id) is None
    # The empty weeks that ended went too; the week the cutoff falls in stays.
    assert not await week_exists(pg_dsn, "20260302")
    assert await week_exists(pg_dsn, "20260330")
    assert await pg_store.prune(LEADER, T0 + 30 * DAY, 0, T0 + 30 * DAY) == 0


async def test_a_week_holding_a_live_run_stays_until_it_ends(pg_store: PostgresStore, pg_dsn: str) -> None:
    await pg_store.prune(LEADER, T0 - 365 * DAY, 100, T0)
    claims = await claimed(pg_store, 3)
    await dead(pg_store, claims[:2], T0 + 2 * MIN)  # the third is still running
    # The week stays whole; the row delete takes its two ended runs.
    assert await pg_store.prune(LEADER, T0 + 30 * DAY, 100, T0 + 30 * DAY) == 2
    assert await week_exists(pg_dsn)
    live = await pg_store.get_occurrence(claims[2].occurrence_id)
    assert live is not None and live.state is OccurrenceState.RUNNING
    # A run that finished after the cutoff keeps its week too.
    await dead(pg_store, claims[2:], T0 + 31 * DAY)
    assert await pg_store.prune(LEADER, T0 + 30 * DAY, 0, T0 + 30 * DAY) == 0
    assert await week_exists(pg_dsn)
    assert await pg_store.prune(LEADER, T0 + 32 * DAY, 0, T0 + 32 * DAY) == 1
    assert not await week_exists(pg_dsn)


async def test_a_week_with_a_queued_run_is_not_dropped(pg_store: PostgresStore, pg_dsn: str) -> None:
    """The census reads without a lock; a run queued since (a dead letter replayed) has a
    queue row, which the drop looks for under the lock its detach takes."""
    await pg_store.prune(LEADER, T0 - 365 * DAY, 100, T0)
    await claimed(pg_store, 1)  # RUNNING: its batch row holds the lease (schema 0022)
    monday = datetime.fromisoformat("2026-02-23T00:00:00+00:00")
    assert await scalar(pg_dsn, "SELECT clockd_history_drop(%s)", (monday,)) is False
    assert await week_exists(pg_dsn)
    assert await scalar(pg_dsn, "SELECT count(*) FROM occurrences") == 1


async def test_a_new_week_takes_over_the_rows_of_its_range_from_the_default(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    """Rows of a week nobody made a partition for yet (and the uuid5 ids an older store
    wrote, spread over every range) are in the DEFAULT; making the week moves them."""
    later = T0 + 60 * DAY  # week of Monday 2026-04-27
    claims = await claimed(pg_store, 2, later)
    await dead(pg_store, claims[:1], later + 2 * MIN)
    where = "SELECT array_agg(DISTINCT tableoid::regclass::text) FROM {} WHERE occurrence_id = ANY(%s)"
    ids = [c.occurrence_id for c in claims]
    assert await scalar(pg_dsn, where.format("attempts"), (ids,)) == ["attempts_default"]
    await pg_store.prune(LEADER, T0 - 365 * DAY, 100, later)
    assert await scalar(pg_dsn, where.format("attempts"), (ids,)) == ["attempts_w20260427"]
    moved = "SELECT array_agg(DISTINCT tableoid::regclass::text) FROM occurrences WHERE id = ANY(%s)"
    assert await scalar(pg_dsn, moved, (ids,)) == ["occurrences_w20260427"]
    running = await pg_store.get_occurrence(claims[1].occurrence_id)
    assert running is not None and running.state is OccurrenceState.RUNNING
    ended = await pg_store.get_occurrence(claims[0].occurrence_id)
    assert ended is not None and ended.state is OccurrenceState.DEAD  # generated columns recomputed
    assert [o.id for o in await pg_store.list_dead()] == [claims[0].occurrence_id]


# The columns schemas 0018 and 0019 add, which this release's statements name.
_LATER_COLUMNS = ("occurrences", "dispatch")
# What schema 0022 adds, which this release's claims and finishes name.
_BATCH_LEASES = (
    'CREATE TABLE claim_batches (token text COLLATE "C" PRIMARY KEY, worker_id text NOT NULL,'
    " lease_until timestamptz NOT NULL, leased_at timestamptz NOT NULL, open integer NOT NULL,"
    ' occurrence_ids text[] COLLATE "C" NOT NULL)',
    'ALTER TABLE occurrences ADD COLUMN lease_batch text COLLATE "C"',
)
# The leases as a release before 0022 held them: on the queue row, under a token of its
# own (no '.'): each claimed batch's running runs, back in the queue, leased.
_AS_QUEUE_ROWS = """
INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at, lease_token, lease_until, worker_id, leased_at)
SELECT o.id, o.queue, o.tenant, o.available_at, replace(b.token || '.' || x.id, '.', 'n'), b.lease_until,
       b.worker_id, b.leased_at
FROM claim_batches AS b CROSS JOIN LATERAL unnest(b.occurrence_ids) AS x(id)
JOIN occurrences AS o ON o.id = x.id AND o.lease_batch = b.token AND o.state = 'RUNNING'
"""


def as_queue_row_lease(claim: Any) -> Any:
    """A claim of this release as the release before 0022 would have leased it (_AS_QUEUE_ROWS)."""
    return claim._replace(lease_token=claim.lease_token.replace(".", "n"))


async def add_later_columns(dsn: str) -> None:
    """The columns schemas 0018 and 0019 add and schema 0022's lease rows, on a store of an
    older schema: this release's statements, which write and claim that store's rows here,
    name them (dropped again before the upgrade, so the store is the older schema's again,
    its leases on the queue rows)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for table in _LATER_COLUMNS:
            await conn.execute(f"ALTER TABLE {table} ADD COLUMN overlap text")
        for statement in _BATCH_LEASES:
            await conn.execute(statement)


async def drop_later_columns(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(_AS_QUEUE_ROWS)
        await conn.execute("DROP TABLE claim_batches")
        await conn.execute("ALTER TABLE occurrences DROP COLUMN lease_batch")
        for table in _LATER_COLUMNS:
            await conn.execute(f"ALTER TABLE {table} DROP COLUMN overlap")


async def test_the_upgrade_to_0017_keeps_every_row(pg_server: PostgresServer) -> None:
    name = f"u_{uuid.uuid4().hex[:12]}"
    dsn = pg_server.create_database(name)
    try:
        old = PostgresStore(dsn, max_size=2)
        old.driver.migrations = MIGRATIONS[:16]  # a store of schema 0016, flat history
        await old.migrate()
        await add_later_columns(dsn)  # this release's statements write them
        await old.open()
        claims = await claimed(old, 3)
        await dead(old, claims[:1], T0 + 2 * MIN)
        schedule = await add_schedule(old, "legacy", next_run_at=T0)
        uuid5 = legacy_occurrence_id(schedule.id, 1, T0)  # as a release before 0016 wrote it
        legacy = planned(schedule, T0)._replace(id=uuid5)
        cursor = CursorAdvance(schedule.id, 1, T0, T0 + MIN)
        assert (await old.materialize(FENCE, [legacy], [cursor], T0 - MIN)).inserted == 1
        await old.close()
        await drop_later_columns(dsn)
        new = PostgresStore(dsn, max_size=2)
        assert await new.migrate() == [
            "0017_partitioned_history", "0018_overlap_on_occurrence", "0019_overlap_on_queue_row",
            "0020_paused_name_index", "0021_deleted_name_index", "0022_batch_leases",
        ]  # fmt: skip
        await new.open()
        try:
            for c in claims:
                assert await new.get_occurrence(c.occurrence_id) is not None
            assert await new.get_occurrence(uuid5) is not None
            assert len(await new.list_attempts(claims[0].occurrence_id)) == 1
            assert await scalar(dsn, "SELECT count(*) FROM ONLY occurrences_default") == 4
            assert await scalar(dsn, "SELECT relkind FROM pg_class WHERE relname = 'occurrences'") == "p"
            # The rest of the run goes on: the two running ones, leased on their queue rows
            # before the upgrade (batches of one since 0022), finish.
            await dead(new, [as_queue_row_lease(c) for c in claims[1:]], T0 + 3 * MIN)
            assert len(await new.list_dead()) == 3
        finally:
            await new.close()
    finally:
        pg_server.drop_database(name)


async def test_the_daemons_role_keeps_the_weeks_without_owning_a_table(pg_store: PostgresStore, pg_dsn: str) -> None:
    """clockd_daemon of roles.sql owns nothing; the migration's functions run as their
    owner and do only the partitions' upkeep. (A login role of its own in the group.)"""
    await pg_store.create_roles()
    role = f"node_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE clockd_daemon")
    daemon = PostgresStore(psycopg.conninfo.make_conninfo(pg_dsn, user=role), max_size=2)
    try:
        await daemon.open()
        await daemon.prune(LEADER, T0 - 365 * DAY, 100, T0)
        assert await week_exists(pg_dsn)
        owner = await scalar(pg_dsn, "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = %s",
                             (f"occurrences_w{WEEK}",))  # fmt: skip
        assert owner == await scalar(
            pg_dsn, "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'schedules'"
        )
        claims = await claimed(daemon, 2)
        await dead(daemon, claims, T0 + 2 * MIN)
        assert await daemon.prune(LEADER, T0 + 30 * DAY, 0, T0 + 30 * DAY) == 2
        assert not await week_exists(pg_dsn)
        # What the functions do not give: DDL of its own.
        async with await psycopg.AsyncConnection.connect(psycopg.conninfo.make_conninfo(pg_dsn, user=role)) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute("ALTER TABLE occurrences DETACH PARTITION occurrences_default")
    finally:
        await daemon.close()
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute(f"DROP ROLE {role}")


async def test_a_role_with_table_rights_only_still_prunes_row_by_row(pg_store: PostgresStore, pg_dsn: str) -> None:
    """A role given the tables but not clockd_daemon's functions (its own grants, as before
    schema 0017 worked): prune says once that it keeps no partitions and deletes as before."""
    role = f"dml_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(f"CREATE ROLE {role} LOGIN")
        await conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
    plain = PostgresStore(psycopg.conninfo.make_conninfo(pg_dsn, user=role), max_size=2)
    try:
        await plain.open()
        claims = await claimed(pg_store, 2)  # no week made around T0: the DEFAULT holds them
        await dead(pg_store, claims, T0 + 2 * MIN)
        assert await plain.prune(LEADER, T0 + 30 * DAY, 100, T0 + 30 * DAY) == 2
        assert await scalar(pg_dsn, "SELECT count(*) FROM occurrences") == 0
        assert not await week_exists(pg_dsn, "20260330")
        assert await plain.prune(LEADER, T0 + 30 * DAY, 100, T0 + 30 * DAY) == 0  # and again, quietly
    finally:
        await plain.close()
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute(f"DROP OWNED BY {role}")
            await conn.execute(f"DROP ROLE {role}")
