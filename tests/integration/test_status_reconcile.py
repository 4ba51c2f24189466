"""The status document's reconciler report (``clockd.services.status.ReconcileCache``):
``clockctl status`` recomputes a stale one before answering; the dashboard's health page
never waits for it once a report exists — it serves the last one with its age while one
refresh runs in the background — and the document says when the report was made."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clockd.config import resolve_store
from clockd.core.ids import new_schedule_id
from clockd.core.instants import iso_utc
from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.services.status import RECONCILE_EVERY, ReconcileCache, gather
from clockd.store.sqlite import SqliteStore

HORIZON = timedelta(minutes=2)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "clockd.db")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_background_cache_serves_the_last_report_and_refreshes_it_off_the_request(
    store: SqliteStore, tmp_path: Path
) -> None:
    cache = ReconcileCache(background=True)
    now = datetime.now(UTC)
    first, at = await cache.current(store, HORIZON, now)  # no report yet: this one waits
    assert (first.unaccounted, at) == (0, now)
    # Stale: the same report comes back at once, and one refresh is under way.
    later = now + RECONCILE_EVERY
    served, served_at = await cache.current(store, HORIZON, later)
    assert (served, served_at) == (first, now)
    running = cache._running
    assert running is not None
    cache.refresh_soon(store, HORIZON, later)  # never two at once
    assert cache._running is running
    await running
    assert cache.at == later and cache.report is not first
    cache.at = datetime.now(UTC)
    doc = await gather(store, HORIZON, resolve_store(str(tmp_path / "clockd.db")), {"kind": "embedded"}, cache)
    unaccounted = doc["unaccounted"]
    assert unaccounted["checked_at"] == iso_utc(cache.at)
    assert 0 <= unaccounted["age_seconds"] < RECONCILE_EVERY.total_seconds()


async def test_a_foreground_cache_recomputes_a_stale_report_before_answering(store: SqliteStore) -> None:
    cache = ReconcileCache()
    now = datetime.now(UTC)
    first, at = await cache.current(store, HORIZON, now)
    assert at == now
    assert (await cache.current(store, HORIZON, now + RECONCILE_EVERY / 2))[0] is first  # fresh: kept
    again, again_at = await cache.current(store, HORIZON, now + RECONCILE_EVERY)
    assert again is not first and again_at == now + RECONCILE_EVERY
    assert cache._running is None


async def test_above_its_limit_of_live_schedules_the_cache_says_it_did_not_check(
    store: SqliteStore, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    for name in ("a", "b", "c"):
        definition = ScheduleDef(name=name, kind=ScheduleKind.CRON, expr="0 0 1 1 *", tz="UTC", target=NoopTarget())
        await store.create_schedule(new_schedule_id(), definition, 0, None, now)
    cache = ReconcileCache(background=True, max_schedules=2)
    doc = await gather(store, HORIZON, resolve_store(str(tmp_path / "clockd.db")), {"kind": "embedded"}, cache)
    unaccounted = doc["unaccounted"]
    assert unaccounted["count"] is None
    assert unaccounted["skipped"] == (
        "not checked: 3 live schedules exceed 2 (run clockctl reconcile NAME per schedule, or --tenant T per tenant)"
    )
    cache.max_schedules = 3
    cache.at = None  # no report at all: this page waits for one
    doc = await gather(store, HORIZON, resolve_store(str(tmp_path / "clockd.db")), {"kind": "embedded"}, cache)
    assert (doc["unaccounted"]["count"], "skipped" in doc["unaccounted"]) == (0, False)
