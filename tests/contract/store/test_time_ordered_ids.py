"""Schema 0016: occurrence ids are time-ordered (``clockd.core.ids``). The schema changes
no row: an upgraded store keeps the uuid5 ids its occurrences were written with (a retry
or a replay keeps its id), finds them by id and by prefix, and refuses a clockd that
predates 0016, so a store is never planned into by both schemes."""

from __future__ import annotations

import pytest

from clockd.core.ids import legacy_occurrence_id
from clockd.errors import SchemaMismatch
from clockd.store import Store
from clockd.store.engine import SqlStore
from clockd.store.postgres import PostgresStore
from clockd.store.postgres.store import PostgresDriver
from clockd.store.sqlite.store import SqliteDriver

from .support import MIN, T0, Backend, add_schedule, materialize_next


async def test_the_upgrade_to_0016_keeps_every_stored_id(store: Store, backend: Backend) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    a, written = await materialize_next(store, a)
    legacy = legacy_occurrence_id(a.id, a.version, T0)  # as a release before 0016 wrote it
    await store.close()
    await backend.execute(f"UPDATE occurrences SET id = '{legacy}' WHERE id = '{written}'")
    await backend.execute("DELETE FROM schema_migrations WHERE version = 16")
    new = backend.new_store()
    if isinstance(new, PostgresStore):
        assert await new.migrate() == ["0016_time_ordered_ids"]
    await new.open()  # SQLite migrates here
    a, later = await materialize_next(new, a)
    assert [o.id for o in await new.list_occurrences(a.id)] == [later, legacy]
    found = await new.get_occurrence(legacy[:8])
    assert found is not None and (found.id, found.scheduled_for) == (legacy, T0)
    assert (await new.get_occurrence(later)).scheduled_for == T0 + MIN  # type: ignore[union-attr]  # found above


async def test_a_release_before_0016_refuses_the_upgraded_store(store: Store, backend: Backend) -> None:
    await store.close()
    old = backend.new_store()
    assert isinstance(old, SqlStore) and isinstance(old.driver, PostgresDriver | SqliteDriver)
    old.driver.migrations = old.driver.migrations[:15]  # what a release before 0016 knows
    with pytest.raises(SchemaMismatch, match="newer than this clockd"):
        await old.open()
