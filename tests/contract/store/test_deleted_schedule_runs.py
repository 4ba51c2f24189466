"""A deleted schedule's runs stay until retention prunes them, and an operator reads them
by the name it had (``clockctl runs NAME``, ``/v1/occurrences?schedule=NAME``): the
store finds the schedule of that name deleted last (schema 0021)."""

from __future__ import annotations

from clockd.core.model import ScheduleState
from clockd.store import Store

from .support import MIN, T0, Backend, add_schedule


async def test_the_schedule_of_a_name_deleted_last_is_found_by_that_name(store: Store, backend: Backend) -> None:
    first = await add_schedule(store, "backup")
    await store.change_schedule(first.id, 1, first.definition, ScheduleState.DELETED, None, T0, "rm")
    second = await add_schedule(store, "backup", now=T0 + MIN)  # the name again, a new schedule
    found = await store.get_deleted_schedule("default", "backup")
    assert found is not None and found.id == first.id and found.state is ScheduleState.DELETED

    await store.change_schedule(second.id, 1, second.definition, ScheduleState.DELETED, None, T0 + 2 * MIN, "rm")
    found = await store.get_deleted_schedule("default", "backup")
    assert found is not None and found.id == second.id  # the later delete

    await add_schedule(store, "live")
    assert await store.get_deleted_schedule("default", "live") is None  # live: get_schedule's
    assert await store.get_deleted_schedule("default", "never") is None
    assert await store.get_deleted_schedule("other-tenant", "backup") is None

    plan = await backend.query_plan("schedule_get_deleted_by_name", {"tenant": "default", "name": "backup"})
    assert "schedules_deleted_name" in plan, plan
