"""Schema versioning: migrations are recorded once, and a newer schema is refused."""

from __future__ import annotations

import pytest

from clockd.errors import SchemaMismatch
from clockd.store import Store

from .support import T0, Backend, add_schedule


async def test_second_migrate_is_a_no_op(store: Store) -> None:
    assert await store.migrate() == []
    await add_schedule(store, "kept")
    assert await store.migrate() == []
    assert await store.get_schedule("default", "kept") is not None


async def test_reopening_keeps_the_data(store: Store, backend: Backend) -> None:
    created = await add_schedule(store, "kept", next_run_at=T0)
    await store.close()
    again = await backend.open_store()
    assert await again.get_schedule_by_id(created.id) == created


async def test_open_refuses_a_newer_schema(store: Store, backend: Backend) -> None:
    await backend.fake_migration(9999, "from_the_future")
    newer = backend.new_store()
    with pytest.raises(SchemaMismatch, match=r"9999.*newer.*upgrade clockd"):
        await newer.open()
    with pytest.raises(SchemaMismatch):
        await store.migrate()


async def test_the_write_probe_passes_on_a_writable_store_and_changes_nothing(store: Store) -> None:
    """/healthz's probe (Store.probe_write; a disk turned read-only makes it fail:
    tests/e2e/test_full_disk_embedded.py). Probed twice, the store lists what it did."""
    schedule = await add_schedule(store, "kept", next_run_at=T0)
    await store.probe_write()
    await store.probe_write()
    assert [s.id for s in await store.list_schedules()] == [schedule.id]
    assert await store.migrate() == []  # the schema's bookkeeping is untouched
