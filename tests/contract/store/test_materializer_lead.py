"""``clockd_materializer_lead_seconds``: how far ahead of now the materializer's shards
are planned — the operator's alert that due instants are not planned yet."""

from __future__ import annotations

from datetime import timedelta

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
