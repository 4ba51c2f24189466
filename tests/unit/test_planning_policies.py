"""The pure misfire rules (clockd.core.planning): catch_up_limit at materialization, the
catch-up flag the materializer paces, and the sweep's verdict table that both stores'
``misfire_pick`` feed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Unpack

import pytest

from clockd.core.model import (
    MisfirePolicy,
    NoopTarget,
    OccurrenceState,
    Schedule,
    ScheduleDef,
    ScheduleKind,
    ScheduleState,
)
from clockd.core.planning import DueSchedule, plan_schedule, sweep_verdict
from clockd.core.spec import compile_spec
from tests.contract.store.support import Settings

T0 = datetime(2026, 3, 2, 23, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def schedule(**kw: Unpack[Settings]) -> Schedule:
    d = ScheduleDef(name="five", kind=ScheduleKind.CRON, expr="*/5 * * * *", tz="UTC", target=NoopTarget(), **kw)
    return Schedule("s1", 1, ScheduleState.ACTIVE, d, T0 + 5 * MIN, 0, T0, T0)


@pytest.mark.parametrize(
    ("misfire", "limit", "ran"),
    [
        (MisfirePolicy.SKIP, 10, [45]),
        (MisfirePolicy.FIRE_ONCE, 10, [40, 45]),
        (MisfirePolicy.CATCH_UP, 3, [30, 35, 40, 45]),
        (MisfirePolicy.CATCH_UP, 0, [45]),
        (MisfirePolicy.CATCH_UP, 10, [5, 10, 15, 20, 25, 30, 35, 40, 45]),
    ],
)
def test_late_instants_follow_the_policy_and_catch_up_limit(misfire: MisfirePolicy, limit: int, ran: list[int]) -> None:
    s = schedule(misfire=misfire, catch_up_limit=limit, max_lateness=2 * MIN)
    spec = compile_spec(s.definition.kind, s.definition.expr, s.definition.tz, T0)
    now = T0 + 43 * MIN
    plan = plan_schedule(DueSchedule.of(s), spec.next_after, now + 2 * MIN, now, 500)
    scheduled = [p for p in plan.occurrences if p.state is OccurrenceState.SCHEDULED]
    assert [int((p.scheduled_for - T0) / MIN) for p in scheduled] == ran
    # Late ones that run are flagged for pacing; on-time ones are not.
    assert [p.catch_up for p in scheduled] == [p.scheduled_for < now - 2 * MIN for p in scheduled]
    for p in plan.occurrences:
        if p.state is OccurrenceState.MISSED:
            assert p.reason is not None and f"misfire policy {misfire}" in p.reason


@pytest.mark.parametrize(
    ("policy", "rank", "limit", "newer_due", "missed"),
    [
        (MisfirePolicy.SKIP, 1, 10, False, True),
        (MisfirePolicy.FIRE_ONCE, 1, 10, False, False),
        (MisfirePolicy.FIRE_ONCE, 1, 10, True, True),
        (MisfirePolicy.FIRE_ONCE, 2, 10, False, True),
        (MisfirePolicy.CATCH_UP, 3, 3, True, False),
        (MisfirePolicy.CATCH_UP, 4, 3, False, True),
        (MisfirePolicy.CATCH_UP, 1, 0, False, True),
    ],
)
def test_the_sweep_verdict(policy: MisfirePolicy, rank: int, limit: int, newer_due: bool, missed: bool) -> None:
    assert sweep_verdict(policy, rank, limit, newer_due) is missed
