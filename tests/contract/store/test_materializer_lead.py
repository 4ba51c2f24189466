"""``clockd_materializer_lead_seconds``: how far ahead of now the materializer's shards
are planned — the operator's alert that due instants are not planned yet."""

from __future__ import annotations

from datetime import timedelta

import pytest

from clockd.core.model import ScheduleKind
from clockd.modes.materializer import Materializer, MaterializerSettings
from clockd.obs.metrics import REGISTRY

from .pipeline import T0, Pipeline, pipeline
from .support import add_schedule

__all__ = ["pipeline"]  # the fixture, imported for pytest

SEC = timedelta(seconds=1)


def lead() -> float | None:
    return REGISTRY.get_sample_value("clockd_materializer_lead_seconds")


async def test_the_lead_is_the_earliest_unplanned_instant_and_the_horizon_once_caught_up(pipeline: Pipeline) -> None:
    p = pipeline
    await add_schedule(p.store, "first", next_run_at=T0 + SEC, shard=0, kind=ScheduleKind.EVERY, expr="1s")
    await add_schedule(p.store, "second", next_run_at=T0 + 2 * SEC, shard=1, kind=ScheduleKind.EVERY, expr="1s")
    materializer = Materializer(p.store, p.coord, p.clock, MaterializerSettings(horizon=timedelta(minutes=2)))

    assert await materializer.tick() is False
    assert lead() == 1.0  # what the tick found: "first" due in a second, unplanned
    assert await materializer.tick() is False
    assert lead() == 120.0  # caught up: nothing unplanned within the horizon

    p.clock.advance(30 * SEC)
    assert await materializer.tick() is False
    assert lead() == 91.0  # both planned to T0 + 120 s; "first"'s next at T0 + 121 s


async def test_a_materializer_behind_shows_a_negative_lead(pipeline: Pipeline) -> None:
    p = pipeline
    await add_schedule(p.store, "late", next_run_at=T0 - 30 * SEC, shard=2, kind=ScheduleKind.EVERY, expr="1s")
    materializer = Materializer(p.store, p.coord, p.clock, MaterializerSettings(horizon=timedelta(minutes=2)))

    await materializer.tick()
    assert lead() == -30.0


def staged(suffix: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(f"clockd_schedule_lag_seconds_{suffix}", {"step": "enqueued", **labels})
    return value or 0.0


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "relay"])
async def test_a_materializer_behind_shows_its_lateness_as_the_enqueued_lag(pipeline: Pipeline, direct: bool) -> None:
    """Each occurrence staged counts once in clockd_schedule_lag_seconds{step="enqueued"},
    with how late it was staged — observed by whoever stages it (the materializer with
    direct dispatch, else the relay). The leader's sampler read this from the rows due in
    its last 10 s, so a lateness longer than that never showed."""
    p = pipeline
    await add_schedule(p.store, "late", next_run_at=T0 - 40 * SEC, shard=2, kind=ScheduleKind.EVERY, expr="20s")
    settings = MaterializerSettings(horizon=timedelta(minutes=2), direct=direct)
    materializer = Materializer(p.store, p.coord, p.clock, settings)
    before = {k: staged(k) for k in ("count", "sum")} | {"le30": staged("bucket", le="30.0")}

    await materializer.tick()  # T0-40s, T0-20s, T0 (late or due now), then six ahead
    if not direct:
        await p.relay.tick()  # those due within its lead (30 s): the first four
    count = 9 if direct else 4
    assert staged("count") - before["count"] == count
    assert staged("sum") - before["sum"] == pytest.approx(60.0)
    assert staged("bucket", le="30.0") - before["le30"] == count - 1  # all but the one 40 s late
