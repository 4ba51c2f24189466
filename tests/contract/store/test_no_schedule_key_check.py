"""Schema 0012 (PostgreSQL): ``occurrences`` has no foreign key to ``schedules``, whose
check looked up and locked the schedule row for every occurrence the materializer wrote.
What it promised is kept by the store itself: schedules are never deleted, the
materializer writes only under the cursors it moves, and a run-now occurrence is written
only under an existing schedule (``test_occurrences.py::
test_run_now_of_an_unknown_schedule_is_not_found``, both stores). An upgraded database
keeps every occurrence."""

from __future__ import annotations

from dataclasses import replace

import psycopg
import pytest

from clockd.core.ids import manual_occurrence_id, new_schedule_id
from clockd.errors import NotFound
from clockd.store.postgres import PostgresStore

from .support import T0, add_schedule, foreign_keys, materialize_next

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

UNDO_0012 = (
    "ALTER TABLE occurrences ADD CONSTRAINT occurrences_schedule_id_fkey "
    "FOREIGN KEY (schedule_id) REFERENCES schedules (id)"
)


async def test_an_occurrence_is_written_with_no_key_check_on_its_schedule(pg_store: PostgresStore, pg_dsn: str) -> None:
    assert await foreign_keys(pg_dsn, "conrelid = 'occurrences'::regclass") == []
    a = await add_schedule(pg_store, "a", next_run_at=T0)
    a, oid = await materialize_next(pg_store, a)
    assert [o.id for o in await pg_store.list_occurrences(a.id)] == [oid]


async def test_the_upgrade_to_0012_keeps_every_occurrence_and_run_now_still_checks(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    a = await add_schedule(pg_store, "a", next_run_at=T0)
    a, first = await materialize_next(pg_store, a)
    await pg_store.close()
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(UNDO_0012)
        await conn.execute("DELETE FROM schema_migrations WHERE version = 12")
    new = PostgresStore(pg_dsn, max_size=2)
    try:
        assert await new.migrate() == ["0012_no_schedule_key_check"]
        await new.open()
        assert await foreign_keys(pg_dsn, "conrelid = 'occurrences'::regclass") == []
        assert [o.id for o in await new.list_occurrences(a.id)] == [first]
        ghost = replace(a, id=new_schedule_id())
        with pytest.raises(NotFound):
            await new.add_manual_occurrence(ghost, manual_occurrence_id(ghost.id, T0, "n"), 1, T0)
    finally:
        await new.close()
