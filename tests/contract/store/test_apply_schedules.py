"""``apply_schedules``: many creates and changes in one transaction, all or nothing
(``clockctl apply``). Every adapter must pass these."""

from __future__ import annotations

import pytest

from clockd.core.ids import new_schedule_id
from clockd.core.model import OccurrenceState, ScheduleKind, ScheduleState
from clockd.errors import Conflict
from clockd.store import NewSchedule, ScheduleChange, Store

from .support import MIN, T0, add_schedule, claim_one, definition, enqueue, materialize_next


def new(name: str, *, tenant: str = "default", shard: int = 0, **changes: object) -> NewSchedule:
    return NewSchedule(new_schedule_id(), definition(name, tenant=tenant, **changes), shard, T0 + MIN)


async def snapshot(store: Store) -> list[tuple[str, str, int, str, str]]:
    """Everything a failed apply must leave as it was: schedules, versions, occurrences."""
    rows = []
    for s in await store.list_schedules():
        versions = await store.schedule_versions(s.id)
        occurrences = await store.list_occurrences(s.id, 1000)
        rows.append((s.id, s.name, s.version, str(len(versions)), ",".join(o.state for o in occurrences)))
    return sorted(rows)


async def test_creates_updates_and_deletes_in_one_call(store: Store) -> None:
    keep = await add_schedule(store, "keep", now=T0)
    doomed = await add_schedule(store, "doomed", now=T0)
    creates = [new("alpha", shard=3), new("bravo", kind=ScheduleKind.EVERY, expr="1h30m")]
    changes = [
        ScheduleChange(keep.id, 1, definition("keep", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0 + 5 * MIN, "upd"),
        ScheduleChange(doomed.id, 1, doomed.definition, ScheduleState.DELETED, None, "pruned"),
    ]
    result = await store.apply_schedules(creates, changes, T0 + MIN)

    assert [s.name for s in result.created] == ["alpha", "bravo"]
    assert [s.name for s in result.changed] == ["keep", "doomed"]
    assert result.canceled == 0
    for made, asked in zip(result.created, creates, strict=True):
        assert made.id == asked.schedule_id
        assert made.version == 1
        assert made.state is ScheduleState.ACTIVE
        assert made.definition == asked.definition
        assert made.shard == asked.shard
        assert made.next_run_at == T0 + MIN
        assert made.created_at == made.updated_at == T0 + MIN
        assert await store.get_schedule_by_id(made.id) == made
        assert [v[0] for v in await store.schedule_versions(made.id)] == [1]

    updated, deleted = result.changed
    assert (updated.version, updated.definition.expr, updated.next_run_at) == (2, "*/5 * * * *", T0 + 5 * MIN)
    assert updated.updated_at == T0 + MIN and updated.created_at == T0
    assert (deleted.version, deleted.state) == (2, ScheduleState.DELETED)
    assert [s.name for s in await store.list_schedules()] == ["alpha", "bravo", "keep"]
    versions = await store.schedule_versions(keep.id)
    assert [(v[0], v[2]) for v in versions] == [(1, T0 + MIN), (2, None)]


async def test_changes_cancel_unclaimed_older_occurrences_like_change_schedule(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    s, running_id = await enqueue(store, s)
    await claim_one(store)
    s, queued_id = await enqueue(store, s)
    s, planned_id = await materialize_next(store, s)
    gone = await add_schedule(store, "gone", next_run_at=T0)
    gone, gone_id = await materialize_next(store, gone)

    result = await store.apply_schedules(
        [],
        [
            ScheduleChange(s.id, 1, definition("a", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0 + 10 * MIN, "upd"),
            ScheduleChange(gone.id, 1, gone.definition, ScheduleState.DELETED, None, "pruned"),
        ],
        T0 + 5 * MIN,
    )
    assert result.canceled == 3
    states = {o.id: o for o in await store.list_occurrences(None, 100)}
    assert states[running_id].state is OccurrenceState.RUNNING
    for oid, reason in ((queued_id, "upd"), (planned_id, "upd"), (gone_id, "pruned")):
        assert states[oid].state is OccurrenceState.CANCELED
        assert states[oid].reason == reason
        assert states[oid].finished_at == T0 + 5 * MIN
    backlog = await store.backlog(T0 + 5 * MIN)
    assert (backlog.outbox, backlog.queued, backlog.running) == (0, 0, 1)


async def test_a_moved_version_conflicts_and_nothing_is_applied(store: Store) -> None:
    a = await add_schedule(store, "a")
    b = await add_schedule(store, "b")
    await materialize_next(store, b)
    await store.change_schedule(a.id, 1, a.definition, ScheduleState.PAUSED, None, T0, "paused meanwhile")
    before = await snapshot(store)
    with pytest.raises(Conflict):
        await store.apply_schedules(
            [new("fresh")],
            [
                ScheduleChange(b.id, 1, definition("b", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0, "upd"),
                ScheduleChange(a.id, 1, definition("a", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0, "stale"),
            ],
            T0 + MIN,
        )
    assert await snapshot(store) == before
    assert await store.get_schedule("default", "fresh") is None


async def test_a_deleted_schedule_conflicts_and_nothing_is_applied(store: Store) -> None:
    a = await add_schedule(store, "a")
    await store.change_schedule(a.id, 1, a.definition, ScheduleState.DELETED, None, T0, "rm meanwhile")
    before = await snapshot(store)
    with pytest.raises(Conflict):
        await store.apply_schedules(
            [new("fresh")],
            [ScheduleChange(a.id, 1, a.definition, ScheduleState.ACTIVE, T0, "upd")],
            T0 + MIN,
        )
    assert await snapshot(store) == before


async def test_a_taken_name_conflicts_and_nothing_is_applied(store: Store) -> None:
    a = await add_schedule(store, "a")
    taken = await add_schedule(store, "taken")
    before = await snapshot(store)
    with pytest.raises(Conflict, match="taken"):
        await store.apply_schedules(
            [new("fresh"), new("taken")],
            [ScheduleChange(a.id, 1, definition("a", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0, "upd")],
            T0 + MIN,
        )
    assert await snapshot(store) == before
    assert (await store.get_schedule("default", "taken")) == taken
    # Two creates of one name in the same call conflict too.
    with pytest.raises(Conflict):
        await store.apply_schedules([new("twin"), new("twin")], [], T0 + MIN)
    assert await store.get_schedule("default", "twin") is None


async def test_names_are_per_tenant_and_a_deleted_name_is_reusable_in_the_same_call(store: Store) -> None:
    old = await add_schedule(store, "job")
    result = await store.apply_schedules(
        [new("job"), new("job", tenant="team-b")],
        [ScheduleChange(old.id, 1, old.definition, ScheduleState.DELETED, None, "replaced")],
        T0 + MIN,
    )
    assert len(result.created) == 2
    live = await store.get_schedule("default", "job")
    assert live is not None and live.id == result.created[0].id
    assert [s.definition.tenant for s in await store.list_schedules()] == ["default", "team-b"]


async def test_empty_apply_changes_nothing(store: Store) -> None:
    await add_schedule(store, "a")
    before = await snapshot(store)
    result = await store.apply_schedules([], [], T0)
    assert (result.created, result.changed, result.canceled) == ([], [], 0)
    assert await snapshot(store) == before


async def test_many_in_one_call(store: Store) -> None:
    creates = [new(f"job-{i:04d}", shard=i % 8) for i in range(500)]
    result = await store.apply_schedules(creates, [], T0)
    assert len(result.created) == 500
    listed = await store.list_schedules()
    assert [s.name for s in listed] == [f"job-{i:04d}" for i in range(500)]
    changes = [ScheduleChange(s.id, 1, s.definition, ScheduleState.DELETED, None, "pruned") for s in listed[::2]]
    result = await store.apply_schedules([], changes, T0 + MIN)
    assert len(result.changed) == 250
    assert len(await store.list_schedules()) == 250
