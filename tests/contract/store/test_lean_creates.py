"""Schema 0014 (PostgreSQL): ``schedule_versions``, ``schedule_labels`` and
``overlap_slots`` have no foreign key to ``schedules``, whose checks looked up and locked
the schedule row for every version, label and slot a create wrote (about half of an
apply's database time). What they promised is kept by the store itself: schedules are
never deleted, and these rows are written only in the transaction that writes their
schedule row (``test_schedules.py::test_change_of_unknown_or_deleted_schedule_is_not_found``,
both stores, checks that a change of a schedule that is not there writes no version). An
upgraded database keeps every row."""

from __future__ import annotations

import psycopg
import pytest

from clockd.core.model import OverlapPolicy
from clockd.store.postgres import PostgresStore

from .support import T0, add_schedule, foreign_keys

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

KEYS_TO_SCHEDULES = "confrelid = 'schedules'::regclass"
CHILDREN = ("schedule_versions", "schedule_labels", "overlap_slots")
UNDO_0014 = tuple(
    f"ALTER TABLE {table} ADD CONSTRAINT {table}_schedule_id_fkey FOREIGN KEY (schedule_id) REFERENCES schedules (id)"
    for table in CHILDREN
)


async def _rows_of(dsn: str, schedule_id: str) -> dict[str, int]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        counts = {}
        for table in CHILDREN:
            cur = await conn.execute(f"SELECT count(*) FROM {table} WHERE schedule_id = %s", (schedule_id,))
            found = await cur.fetchone()
            counts[table] = int(found[0]) if found else 0
        return counts


async def test_a_create_writes_its_version_labels_and_slot_with_no_key_check(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    assert await foreign_keys(pg_dsn, KEYS_TO_SCHEDULES) == []
    a = await add_schedule(pg_store, "a", labels=(("team", "ops"),), overlap=OverlapPolicy.SKIP)
    assert await _rows_of(pg_dsn, a.id) == {"schedule_versions": 1, "schedule_labels": 1, "overlap_slots": 1}
    assert [v[0] for v in await pg_store.schedule_versions(a.id)] == [1]


async def test_the_upgrade_to_0014_keeps_every_row(pg_store: PostgresStore, pg_dsn: str) -> None:
    a = await add_schedule(pg_store, "a", next_run_at=T0, labels=(("team", "ops"),), overlap=OverlapPolicy.SKIP)
    await pg_store.close()
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        for statement in UNDO_0014:
            await conn.execute(statement)
        await conn.execute("DELETE FROM schema_migrations WHERE version = 14")
    assert len(await foreign_keys(pg_dsn, KEYS_TO_SCHEDULES)) == 3
    new = PostgresStore(pg_dsn, max_size=2)
    try:
        assert await new.migrate() == ["0014_lean_creates"]
        await new.open()
        assert await foreign_keys(pg_dsn, KEYS_TO_SCHEDULES) == []
        assert await _rows_of(pg_dsn, a.id) == {"schedule_versions": 1, "schedule_labels": 1, "overlap_slots": 1}
        found = await new.get_schedule_by_id(a.id)
        assert found is not None and found.definition.labels == (("team", "ops"),)
    finally:
        await new.close()
