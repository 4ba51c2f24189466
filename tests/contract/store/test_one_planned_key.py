"""Schema 0011: ``occurrences_planned`` is gone; the primary key (a planned occurrence's id
is the uuid5 of its schedule, version and instant) keeps an instant from being
materialized twice. An upgraded database keeps every occurrence and that promise."""

from __future__ import annotations

from clockd.core.ids import occurrence_id
from clockd.store import CursorAdvance, MaterializeResult, Store
from clockd.store.postgres import PostgresStore

from .support import FENCE, MIN, T0, Backend, add_schedule, materialize_next, planned

UNDO_0011 = {  # the index as schema 0001 made it in each dialect
    # On the DEFAULT partition, which holds what was written before schema 0017: a unique
    # index of the partitioned table would have to hold its partition key.
    "postgres": "CREATE UNIQUE INDEX occurrences_planned "
    "ON occurrences_default (schedule_id, schedule_version, scheduled_for) WHERE NOT manual",
    "sqlite": "CREATE UNIQUE INDEX occurrences_planned "
    "ON occurrences (schedule_id, schedule_version, scheduled_for) WHERE manual = 0",
}


async def test_an_instant_planned_twice_is_written_once_by_its_key(store: Store, backend: Backend) -> None:
    assert "occurrences_planned" not in await backend.index_names("occurrences")
    a = await add_schedule(store, "a", next_run_at=T0)
    a, oid = await materialize_next(store, a)
    assert oid == occurrence_id(a.id, a.version, T0)  # the key is the instant
    # Another materializer (a stale owner, a replay) plans the same instant again.
    again = await store.materialize(FENCE, [planned(a, T0)], [CursorAdvance(a.id, 1, T0 + MIN, T0 + 2 * MIN)], T0)
    assert again == MaterializeResult(inserted=0, advanced=1, stale=0)
    assert [o.scheduled_for for o in await store.list_occurrences(a.id)] == [T0]


async def test_the_upgrade_to_0011_keeps_every_occurrence(store: Store, backend: Backend) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    a, first = await materialize_next(store, a)
    a, second = await materialize_next(store, a)
    await store.close()
    await backend.execute(UNDO_0011[backend.kind])
    await backend.execute("DELETE FROM schema_migrations WHERE version = 11")
    new = backend.new_store()
    if isinstance(new, PostgresStore):
        assert await new.migrate() == ["0011_one_planned_key"]
    await new.open()  # SQLite migrates here
    assert "occurrences_planned" not in await backend.index_names("occurrences")
    assert [o.id for o in await new.list_occurrences(a.id)] == [second, first]
    again = await new.materialize(FENCE, [planned(a, T0)], [CursorAdvance(a.id, 1, T0 + 2 * MIN, T0 + 3 * MIN)], T0)
    assert again.inserted == 0
