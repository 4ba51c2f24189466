"""``Ops.apply``: the plan and the write of ``clockctl apply`` pipelined in one store
transaction (the creates planned while the store writes). On every store: the same plan
as ``Ops.plan_apply``, the same rows as ``Ops.apply_plan``, and nothing written when an
entry the store has not read yet turns out to be a problem."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from clockd.core.clock import ManualClock
from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind, ScheduleState
from clockd.services import ops as ops_module
from clockd.services.ops import ApplyPlan, Ops
from clockd.store import Store, engine

from .support import T0

NOW = T0 + timedelta(hours=1, seconds=5, microseconds=300)


def cron(name: str, expr: str = "0 9 * * *", tz: str = "Europe/Paris", **changes: object) -> ScheduleDef:
    base = ScheduleDef(name=name, kind=ScheduleKind.CRON, expr=expr, tz=tz, target=NoopTarget())
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]  # test helper: any field


def wanted(n: int) -> list[ScheduleDef]:
    zones = ("UTC", "Europe/Paris", "Asia/Tokyo")
    return [cron(f"s{i:03d}", f"{i % 60} {i % 24} * * *", zones[i % 3]) for i in range(n)]


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Creates written two at a time and planned ahead one at a time, so a plan spans many
    statements of the transaction."""
    monkeypatch.setattr(engine, "_APPLY_BATCH", 2)
    monkeypatch.setattr(ops_module, "_PLAN_CHUNK", 1)


async def test_apply_writes_what_plan_apply_plans(store: Store, small_batches: None) -> None:
    ops = Ops(store, ManualClock(NOW))
    first, result = await ops.apply([cron("keep"), cron("change"), cron("gone"), *wanted(3)])
    assert result is not None and len(result.created) == 6 and not first.problems
    desired = [cron("change", "30 9 * * *"), *wanted(9), cron("keep"), cron("daily", "@daily", "Asia/Tokyo")]

    expected = await ops.plan_apply(desired, prune=True)
    plan, result = await ops.apply(desired, prune=True)

    def shape(p: ApplyPlan) -> list[tuple[str, str, object]]:
        return [(i.action.value, i.name, i.next_run_at) for i in p.items]

    assert shape(plan) == shape(expected)
    assert [i.action.value for i in plan.items].count("create") == 7
    assert result is not None
    assert [s.name for s in result.created] == [f"s{i:03d}" for i in range(3, 9)] + ["daily"]
    assert [s.name for s in result.updated] == ["change"] and [s.name for s in result.deleted] == ["gone"]
    stored = {s.name: s for s in await ops.list_schedules()}
    assert sorted(stored) == sorted(["change", "daily", "keep", *(f"s{i:03d}" for i in range(9))])
    for item in plan.items:
        if item.action.value == "create":
            s = stored[item.name]
            assert (s.id, s.shard, s.next_run_at, s.definition) == (
                item.schedule_id, item.shard, item.next_run_at, item.desired,
            )  # fmt: skip
    assert stored["daily"].definition.expr == "0 0 * * *"
    assert stored["change"].definition.expr == "30 9 * * *" and stored["change"].state is ScheduleState.ACTIVE


async def test_a_problem_the_store_has_not_read_yet_writes_nothing(
    store: Store, small_batches: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = Ops(store, ManualClock(NOW))
    read: list[object] = []
    getitem = ops_module._PendingCreates.__getitem__

    def spy(self: ops_module._PendingCreates, index: int | slice) -> object:
        read.append(index)
        return getitem(self, index)

    monkeypatch.setattr(ops_module._PendingCreates, "__getitem__", spy)
    await ops.apply([cron("change")])

    async def not_ahead(self: ops_module._ApplyPlanner) -> None:
        """Planning only as the store reads: the first creates are surely written first."""

    monkeypatch.setattr(ops_module._ApplyPlanner, "plan_ahead", not_ahead)
    read.clear()
    desired = [cron("change", "30 9 * * *"), *wanted(6), cron("bad", "61 * * * *"), cron("s9", "0 0 30 2 *")]

    plan, result = await ops.apply(desired)

    assert result is None
    assert [(p.index, p.message) for p in plan.problems] == [
        (7, "minute: 61 is out of range 0-59"),
        (8, "day-of-month: 30 never occurs in FEB"),
    ]
    assert [(s.name, s.definition.expr, s.version) for s in await ops.list_schedules()] == [("change", "0 9 * * *", 1)]
    # 3 batches written (the first one smaller: they grow up to _APPLY_BATCH), then the problem
    # (the store reads the batch that starts a stream twice: for its quota, then to send it)
    in_order = [index for i, index in enumerate(read) if i == 0 or index != read[i - 1]]
    assert in_order == [slice(0, 1), slice(1, 3), slice(3, 5), slice(5, 7)]


async def test_nothing_to_change_writes_nothing(store: Store) -> None:
    ops = Ops(store, ManualClock(NOW))
    await ops.apply(wanted(3))
    plan, result = await ops.apply(wanted(3))
    assert result is None and plan.changes == [] and plan.count(plan.items[0].action) == 3
