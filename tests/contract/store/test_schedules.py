"""Schedules: create, read, list, change (update / pause / resume / delete), versions."""

from __future__ import annotations

from datetime import timedelta

import pytest

from clockd.core.ids import new_schedule_id
from clockd.core.model import (
    CommandTarget,
    MisfirePolicy,
    NoopTarget,
    OverlapPolicy,
    RetryPolicy,
    ScheduleKind,
    ScheduleState,
)
from clockd.errors import Conflict, NotFound
from clockd.store import Store

from .support import MIN, T0, add_schedule, definition

WEIRD = [
    'it\'s "quoted"; DROP TABLE schedules; --',
    "naïve ☃ 日本語 🙂 Ω",
    "tab\tnew\nline\rbell\x07esc\x1b[31mdel\x7f",
    "100% _under_ back\\slash",
    " padded  ",
]


async def test_create_then_read_back(store: Store) -> None:
    created = await add_schedule(store, "backup", next_run_at=T0, shard=3, now=T0 - MIN)
    assert created.version == 1
    assert created.state is ScheduleState.ACTIVE
    assert created.next_run_at == T0
    assert created.shard == 3
    assert created.created_at == created.updated_at == T0 - MIN
    assert created.paused_at is None

    by_name = await store.get_schedule("default", "backup")
    by_id = await store.get_schedule_by_id(created.id)
    assert by_name == created
    assert by_id == created
    assert await store.get_schedule("default", "other") is None
    assert await store.get_schedule("other-tenant", "backup") is None
    assert await store.get_schedule_by_id(new_schedule_id()) is None


async def test_every_definition_field_round_trips(store: Store) -> None:
    full = definition(
        "full",
        kind=ScheduleKind.EVERY,
        expr="90m",
        tz="Europe/Paris",
        target=CommandTarget(argv=("/bin/sh", "-c", "echo $X"), shell=True, env=(("A", "1"), ("X", "y")), cwd="/tmp"),
        queue="gpu",
        tenant="team-a",
        timeout=timedelta(minutes=5, microseconds=7),
        retry=RetryPolicy(
            retries=4,
            backoff=timedelta(seconds=3),
            backoff_max=timedelta(minutes=2),
            permanent_exit_codes=(2, 64),
        ),
        misfire=MisfirePolicy.CATCH_UP,
        max_lateness=timedelta(hours=1),
        overlap=OverlapPolicy.QUEUE_ONE,
        window=timedelta(seconds=90),
        labels=(("team", "infra"), ("env", "prod"), ("team", "dup")),
    )
    created = await store.create_schedule(new_schedule_id(), full, 1, None, T0)
    assert created.definition == full
    fetched = await store.get_schedule("team-a", "full")
    assert fetched is not None
    assert fetched.definition == full
    assert fetched.next_run_at is None

    noop = definition("noop", target=NoopTarget(), kind=ScheduleKind.ONCE, expr=T0.isoformat())
    await store.create_schedule(new_schedule_id(), noop, 0, T0, T0)
    fetched = await store.get_schedule("default", "noop")
    assert fetched is not None
    assert fetched.definition == noop


@pytest.mark.parametrize("text", WEIRD)
async def test_strings_round_trip_unchanged(store: Store, text: str) -> None:
    defn = definition(
        text,
        tenant=f"tenant {text}",
        queue=f"queue {text}",
        target=CommandTarget(argv=("printf", text), env=((f"K{len(text)}", text),), cwd=text),
        labels=((text, text), ("k", text)),
    )
    created = await store.create_schedule(new_schedule_id(), defn, 0, T0, T0)
    fetched = await store.get_schedule(f"tenant {text}", text)
    assert fetched == created
    assert fetched is not None
    assert fetched.definition == defn
    assert [s.name for s in await store.list_schedules(f"tenant {text}")] == [text]
    versions = await store.schedule_versions(created.id)
    assert versions[0][3] == defn


async def test_duplicate_live_name_conflicts(store: Store) -> None:
    await add_schedule(store, "backup")
    with pytest.raises(Conflict):
        await add_schedule(store, "backup")
    # Names are per tenant.
    other = await add_schedule(store, "backup", tenant="team-b")
    assert other.definition.tenant == "team-b"
    assert len(await store.list_schedules()) == 2


async def test_duplicate_id_conflicts(store: Store) -> None:
    sid = new_schedule_id()
    await store.create_schedule(sid, definition("a"), 0, T0, T0)
    with pytest.raises(Conflict):
        await store.create_schedule(sid, definition("b"), 0, T0, T0)


async def test_name_is_reusable_after_delete(store: Store) -> None:
    old = await add_schedule(store, "backup")
    deleted, _, _ = await store.change_schedule(old.id, 1, old.definition, ScheduleState.DELETED, None, T0, "deleted")
    assert deleted.state is ScheduleState.DELETED
    assert await store.get_schedule("default", "backup") is None
    new = await add_schedule(store, "backup")
    assert new.id != old.id
    found = await store.get_schedule("default", "backup")
    assert found is not None
    assert found.id == new.id
    # The deleted one is still readable by id (history keeps its parent).
    gone = await store.get_schedule_by_id(old.id)
    assert gone is not None
    assert gone.state is ScheduleState.DELETED


async def test_list_is_live_only_ordered_by_name_and_filtered_by_tenant(store: Store) -> None:
    for name in ["charlie", "alpha", "bravo"]:
        await add_schedule(store, name)
    await add_schedule(store, "zulu", tenant="team-b")
    doomed = await add_schedule(store, "delta")
    await store.change_schedule(doomed.id, 1, doomed.definition, ScheduleState.DELETED, None, T0, "rm")
    assert [s.name for s in await store.list_schedules()] == ["alpha", "bravo", "charlie", "zulu"]
    assert [s.name for s in await store.list_schedules("default")] == ["alpha", "bravo", "charlie"]
    assert [s.name for s in await store.list_schedules("team-b")] == ["zulu"]
    assert await store.list_schedules("nobody") == []


async def test_change_bumps_version_and_records_versions(store: Store) -> None:
    created = await add_schedule(store, "backup", now=T0)
    updated_def = definition("backup", expr="*/5 * * * *", queue="slow")
    updated, canceled, _ = await store.change_schedule(
        created.id, 1, updated_def, ScheduleState.ACTIVE, T0 + 5 * MIN, T0 + MIN, "updated"
    )
    assert canceled == 0
    assert updated.version == 2
    assert updated.definition == updated_def
    assert updated.next_run_at == T0 + 5 * MIN
    assert updated.updated_at == T0 + MIN
    assert updated.created_at == T0
    assert await store.get_schedule_by_id(created.id) == updated

    paused, _, _ = await store.change_schedule(
        created.id, 2, updated_def, ScheduleState.PAUSED, None, T0 + 2 * MIN, "p"
    )
    assert paused.version == 3
    assert paused.state is ScheduleState.PAUSED
    assert paused.paused_at == T0 + 2 * MIN
    # Still paused after an update: paused_at keeps the first pause.
    still, _, _ = await store.change_schedule(created.id, 3, updated_def, ScheduleState.PAUSED, None, T0 + 3 * MIN, "u")
    assert still.paused_at == T0 + 2 * MIN
    resumed, _, _ = await store.change_schedule(
        created.id, 4, updated_def, ScheduleState.ACTIVE, T0 + 10 * MIN, T0 + 4 * MIN, "r"
    )
    assert resumed.state is ScheduleState.ACTIVE
    assert resumed.paused_at is None
    assert resumed.version == 5

    versions = await store.schedule_versions(created.id)
    assert [v[0] for v in versions] == [1, 2, 3, 4, 5]
    assert [v[1] for v in versions] == [T0, T0 + MIN, T0 + 2 * MIN, T0 + 3 * MIN, T0 + 4 * MIN]
    assert [v[2] for v in versions] == [T0 + MIN, T0 + 2 * MIN, T0 + 3 * MIN, T0 + 4 * MIN, None]
    assert versions[0][3] == created.definition
    assert versions[1][3] == updated_def
    assert [v[4] for v in versions] == [
        ScheduleState.ACTIVE,
        ScheduleState.ACTIVE,
        ScheduleState.PAUSED,
        ScheduleState.PAUSED,
        ScheduleState.ACTIVE,
    ]


async def test_change_with_wrong_expected_version_conflicts_and_changes_nothing(store: Store) -> None:
    created = await add_schedule(store, "backup")
    await store.change_schedule(created.id, 1, created.definition, ScheduleState.PAUSED, None, T0, "p")
    with pytest.raises(Conflict):
        await store.change_schedule(created.id, 1, definition("renamed"), ScheduleState.ACTIVE, T0, T0, "stale")
    current = await store.get_schedule_by_id(created.id)
    assert current is not None
    assert current.version == 2
    assert current.name == "backup"
    assert current.state is ScheduleState.PAUSED
    assert len(await store.schedule_versions(created.id)) == 2


async def test_rename_onto_a_taken_name_conflicts(store: Store) -> None:
    await add_schedule(store, "alpha")
    bravo = await add_schedule(store, "bravo")
    with pytest.raises(Conflict):
        await store.change_schedule(bravo.id, 1, definition("alpha"), ScheduleState.ACTIVE, T0, T0, "rename")
    unchanged = await store.get_schedule_by_id(bravo.id)
    assert unchanged is not None
    assert unchanged.version == 1
    renamed, _, _ = await store.change_schedule(bravo.id, 1, definition("charlie"), ScheduleState.ACTIVE, T0, T0, "mv")
    assert renamed.name == "charlie"
    assert await store.get_schedule("default", "bravo") is None


async def test_change_of_unknown_or_deleted_schedule_is_not_found(store: Store) -> None:
    # ... and writes nothing: no foreign key stops a version or a label of a schedule that
    # is not there (PostgreSQL schema 0014), the store's own order of writes does.
    ghost = new_schedule_id()
    with pytest.raises(NotFound):
        await store.change_schedule(ghost, 1, definition(labels=(("team", "x"),)), ScheduleState.ACTIVE, T0, T0, "x")
    assert await store.schedule_versions(ghost) == []
    created = await add_schedule(store, "backup")
    await store.change_schedule(created.id, 1, created.definition, ScheduleState.DELETED, None, T0, "rm")
    with pytest.raises(NotFound):
        await store.change_schedule(created.id, 2, created.definition, ScheduleState.ACTIVE, T0, T0, "back")
    assert [v[0] for v in await store.schedule_versions(created.id)] == [1, 2]
