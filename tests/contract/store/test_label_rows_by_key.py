"""Schema 0015: ``schedule_labels`` has no index by schedule id (a create's entry in it was
5-6 µs of PostgreSQL's time); a change finds its schedule's label rows by the table's key,
from the definition of the version it replaces. The rows stay exactly the labels of the
live schedules, through every kind of change, on both stores and after the upgrade."""

from __future__ import annotations

import dataclasses

from clockd.core.ids import new_schedule_id
from clockd.core.model import Schedule, ScheduleDef, ScheduleState
from clockd.store import NewSchedule, ScheduleChange, Store
from clockd.store.postgres import PostgresStore

from .support import MIN, T0, Backend, add_schedule, definition

Row = tuple[str, str, str, str, str]

UNDO_0015 = "CREATE INDEX schedule_labels_schedule ON schedule_labels (schedule_id)"


async def _label_rows(backend: Backend) -> set[Row]:
    rows = await backend.execute("SELECT tenant, key, value, name, schedule_id FROM schedule_labels")
    return {(str(t), str(k), str(v), str(n), str(i)) for t, k, v, n, i in rows}


def _rows_of(live: dict[str, ScheduleDef]) -> set[Row]:
    """The label rows the live schedules (id → current definition) must have."""
    return {(d.tenant, key, value, d.name, sid) for sid, d in live.items() for key, value in d.labels}


async def _change(store: Store, s: Schedule, new: ScheduleDef, state: ScheduleState) -> Schedule:
    changed = await store.change_schedule(s.id, s.version, new, state, None, T0, state.value)
    return changed.schedule


async def test_a_change_replaces_exactly_its_own_label_rows(store: Store, backend: Backend) -> None:
    assert "schedule_labels_schedule" not in await backend.index_names("schedule_labels")
    shared = (("team", "x"),)
    a = await add_schedule(store, "a", labels=(("team", "x"), ("team", "x"), ("env", "prod")))
    b = await add_schedule(store, "b", labels=shared)
    c = await add_schedule(store, "a", tenant="other", labels=shared)  # same name and label, other tenant
    batch = [NewSchedule(new_schedule_id(), definition("d", labels=shared), 0, T0)]
    [d] = (await store.apply_schedules(batch, [], T0 - MIN)).created
    live = {s.id: s.definition for s in (a, b, c, d)}
    assert await _label_rows(backend) == _rows_of(live)

    # Renamed and relabeled, then paused (rows kept), resumed, then deleted (rows gone).
    moved = dataclasses.replace(a.definition, name="a2", labels=(("team", "y"), ("env", "prod")))
    a = await _change(store, a, moved, ScheduleState.ACTIVE)
    live[a.id] = moved
    assert await _label_rows(backend) == _rows_of(live)
    a = await _change(store, a, moved, ScheduleState.PAUSED)
    assert await _label_rows(backend) == _rows_of(live)
    a = await _change(store, a, dataclasses.replace(moved, labels=()), ScheduleState.ACTIVE)
    live[a.id] = a.definition
    assert await _label_rows(backend) == _rows_of(live)
    a = await _change(store, a, moved, ScheduleState.ACTIVE)
    live[a.id] = moved
    await _change(store, a, moved, ScheduleState.DELETED)
    del live[a.id]
    assert await _label_rows(backend) == _rows_of(live)

    # A schedule written by a batch, changed by a batch (apply's path).
    relabeled = dataclasses.replace(d.definition, labels=(("team", "z"),))
    change = ScheduleChange(d.id, d.version, relabeled, ScheduleState.ACTIVE, T0, "applied")
    await store.apply_schedules([], [change], T0)
    live[d.id] = relabeled
    assert await _label_rows(backend) == _rows_of(live)


async def test_the_upgrade_to_0015_keeps_the_label_rows_following_changes(store: Store, backend: Backend) -> None:
    a = await add_schedule(store, "a", labels=(("team", "x"),))
    b = await add_schedule(store, "b", labels=(("team", "x"),))
    await store.close()
    await backend.execute(UNDO_0015)
    await backend.execute("DELETE FROM schema_migrations WHERE version = 15")
    new = backend.new_store()
    if isinstance(new, PostgresStore):
        assert await new.migrate() == ["0015_label_rows_by_key"]
    await new.open()  # SQLite migrates here
    assert "schedule_labels_schedule" not in await backend.index_names("schedule_labels")
    assert await _label_rows(backend) == _rows_of({a.id: a.definition, b.id: b.definition})
    moved = dataclasses.replace(a.definition, labels=(("team", "y"),))
    await new.change_schedule(a.id, 1, moved, ScheduleState.ACTIVE, T0, T0, "updated")
    assert await _label_rows(backend) == _rows_of({a.id: moved, b.id: b.definition})


async def test_a_change_finds_its_label_rows_by_the_key(store: Store, backend: Backend) -> None:
    """The delete's plan: the version by its key, each label row by the table's key, no
    scan of ``schedule_labels``."""
    for i in range(50):
        await add_schedule(store, f"job-{i}", labels=(("team", "x"),))
    a = await add_schedule(store, "a", labels=(("team", "x"),))
    plan = await backend.query_plan("schedule_labels_delete", {"schedule_id": a.id, "version": 2})
    if backend.kind == "sqlite":
        assert "SEARCH schedule_labels USING PRIMARY KEY" in plan, plan
        assert "SCAN schedule_labels" not in plan, plan
    else:
        assert "Index Scan using schedule_labels_pkey on schedule_labels" in plan, plan
        assert "Seq Scan on schedule_labels" not in plan, plan
