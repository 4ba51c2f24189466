"""``Ops.plan_apply`` / ``Ops.apply_plan`` on the embedded store with a manual clock: what
is created, updated (exactly like ``Ops.update``), pruned or refused, and that a plan
the store moved away from applies nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clockd.core.clock import ManualClock
from clockd.core.ids import occurrence_id
from clockd.core.model import CommandTarget, NoopTarget, OccurrenceState, ScheduleDef, ScheduleKind, ScheduleState
from clockd.errors import Conflict, InvalidInput
from clockd.formats.validate import MANAGED_BY
from clockd.services.ops import ApplyPlan, Ops, PlanAction, cursor_after_update, is_managed
from clockd.store import CursorAdvance, Fence, NewOccurrence
from clockd.store.sqlite import SqliteStore

T0 = datetime(2026, 3, 1, 8, 0, 0, 250_000, tzinfo=UTC)
MIN = timedelta(minutes=1)


@pytest.fixture
async def ops(tmp_path: Path) -> AsyncIterator[Ops]:
    store = SqliteStore(tmp_path / "clockd.db")
    await store.open()
    try:
        yield Ops(store, ManualClock(T0))
    finally:
        await store.close()


def cron(name: str, expr: str = "0 9 * * *", **changes: object) -> ScheduleDef:
    base = ScheduleDef(name=name, kind=ScheduleKind.CRON, expr=expr, tz="Europe/Paris", target=NoopTarget())
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]  # test helper: any field


def actions(plan: ApplyPlan) -> list[tuple[str, str]]:
    return [(item.action.value, item.name) for item in plan.items]


async def test_create_then_unchanged(ops: Ops) -> None:
    wanted = [cron("a"), cron("b", "@hourly"), cron("c", kind=ScheduleKind.EVERY, expr="90m")]
    plan = await ops.plan_apply(wanted, "team")
    assert plan.problems == []
    assert actions(plan) == [("create", "a"), ("create", "b"), ("create", "c")]
    assert plan.now == T0.replace(microsecond=0)
    result = await ops.apply_plan(plan)
    assert [s.name for s in result.created] == ["a", "b", "c"]
    stored = {s.name: s for s in await ops.list_schedules("team")}
    assert stored["a"].next_run_at == datetime(2026, 3, 2, 8, 0, tzinfo=UTC)  # 09:00 Paris, tomorrow
    assert stored["b"].definition.expr == "0 * * * *"
    assert stored["c"].created_at == plan.now  # the every anchor, whole seconds
    assert stored["c"].next_run_at == plan.now + timedelta(minutes=90)
    for s in stored.values():
        assert s.definition.tenant == "team" and is_managed(s.definition)
        assert (MANAGED_BY, "apply") in s.definition.labels
    again = await ops.plan_apply(wanted, "team")
    assert actions(again) == [("unchanged", "a"), ("unchanged", "b"), ("unchanged", "c")]
    assert again.changes == []
    assert await ops.list_schedules("default") == []


async def test_update_moves_the_cursor_like_ops_update_and_cancels_old_occurrences(ops: Ops) -> None:
    await ops.apply_plan(await ops.plan_apply([cron("a", "*/5 * * * *")]))
    s = await ops.get("a")
    first = s.next_run_at
    assert first is not None
    # The materializer ran ahead: two instants planned, the cursor moved past them.
    planned = [first, first + 5 * MIN]
    await ops.store.materialize(
        Fence("shard:0", 1),
        [NewOccurrence(occurrence_id(s.id, 1, t), s.id, 1, t, t, "default", "default", 3) for t in planned],
        [CursorAdvance(s.id, 1, first, first + 10 * MIN)],
        T0,
    )
    s = await ops.get("a")
    new = cron("a", "*/2 * * * *", retry=s.definition.retry)
    plan = await ops.plan_apply([new])
    (item,) = plan.items
    assert item.action is PlanAction.UPDATE and item.desired is not None
    expected_cursor = cursor_after_update(s, item.desired, T0)  # Ops.update's own rule
    assert item.next_run_at == expected_cursor
    # The new version starts at its first instant after now (08:02), not at the old
    # cursor: no */2 instant before 08:15 is lost. Of the two planned ahead, 08:10 is
    # re-planned under version 2 (the materializer finds its id taken), 08:05 dropped.
    assert item.next_run_at == T0.replace(microsecond=0) + 2 * MIN
    result = await ops.apply_plan(plan)
    assert result.canceled == 2
    (updated,) = result.updated
    assert (updated.version, updated.definition.expr, updated.next_run_at) == (2, "*/2 * * * *", expected_cursor)
    occurrences = await ops.store.list_occurrences(s.id, 10)
    assert sorted((o.scheduled_for, o.version, o.state, o.reason) for o in occurrences) == [
        (first, 1, OccurrenceState.CANCELED, "schedule updated by apply; version 2 does not fire at this instant"),
        (first + 5 * MIN, 1, OccurrenceState.CANCELED, "schedule updated by apply; re-planned under version 2"),
        (first + 5 * MIN, 2, OccurrenceState.SCHEDULED, None),
    ]


async def test_a_paused_schedule_stays_paused(ops: Ops) -> None:
    await ops.apply_plan(await ops.plan_apply([cron("a")]))
    await ops.pause("a")
    plan = await ops.plan_apply([cron("a", "0 10 * * *")])
    result = await ops.apply_plan(plan)
    assert result.updated[0].state is ScheduleState.PAUSED


async def test_a_hand_added_schedule_is_never_taken_over(ops: Ops) -> None:
    await ops.add(cron("handmade", target=CommandTarget(("/bin/true",))))
    plan = await ops.plan_apply([cron("fresh"), cron("handmade")])
    assert [(p.index, p.exit_code) for p in plan.problems] == [(1, 1)]
    assert "'handmade' already exists and was not created by apply" in plan.problems[0].message
    with pytest.raises(InvalidInput, match="nothing was applied"):
        await ops.apply_plan(plan)
    assert [s.name for s in await ops.list_schedules()] == ["handmade"]
    # Nor pruned.
    await ops.apply_plan(await ops.plan_apply([cron("fresh")], prune=True))
    assert [s.name for s in await ops.list_schedules()] == ["fresh", "handmade"]


async def test_prune_deletes_only_managed_schedules_of_the_tenant(ops: Ops) -> None:
    await ops.apply_plan(await ops.plan_apply([cron("a"), cron("b")]))
    await ops.apply_plan(await ops.plan_apply([cron("x")], "other"))
    await ops.add(cron("handmade"))
    kept = await ops.plan_apply([cron("a")])
    assert kept.not_listed == ["b"] and kept.changes == []
    plan = await ops.plan_apply([cron("a")], prune=True)
    assert actions(plan) == [("unchanged", "a"), ("delete", "b")]
    result = await ops.apply_plan(plan)
    assert [(s.name, s.state) for s in result.deleted] == [("b", ScheduleState.DELETED)]
    assert [s.name for s in await ops.list_schedules("default")] == ["a", "handmade"]
    assert [s.name for s in await ops.list_schedules("other")] == ["x"]


async def test_a_plan_the_store_moved_away_from_applies_nothing(ops: Ops) -> None:
    await ops.apply_plan(await ops.plan_apply([cron("a")]))
    plan = await ops.plan_apply([cron("a", "0 10 * * *"), cron("new")])
    await ops.pause("a")  # someone else, between plan and apply
    with pytest.raises(Conflict, match="changed meanwhile"):
        await ops.apply_plan(plan)
    assert [s.name for s in await ops.list_schedules()] == ["a"]
    assert (await ops.get("a")).definition.expr == "0 9 * * *"


async def test_definitions_that_cannot_run_are_problems(ops: Ops) -> None:
    past = cron("old", kind=ScheduleKind.ONCE, expr="2020-01-01T00:00:00Z")
    plan = await ops.plan_apply([cron("ok"), past, cron("ok"), cron("bad", "61 * * * *")])
    assert [(p.index, p.exit_code) for p in plan.problems] == [(1, 2), (2, 2), (3, 2)]
    assert "never fires" in plan.problems[0].message
    assert plan.problems[1].message == "name: 'ok' is also defined by entry 1"
    assert plan.problems[2].message == "minute: 61 is out of range 0-59"
