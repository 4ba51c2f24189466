"""The operator read paths of the store port (reconcile_rows, queue_stats, start_lag,
dead_count, not_run_counts) and ``clockctl status``'s document, on both stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from clockctl.commands.status import gather
from clockd.config import Settings, StoreLocation
from clockd.coord.etcd import EtcdCoordinator
from clockd.core.model import AttemptOutcome, OccurrenceState, ScheduleState
from clockd.store import Completion, CursorAdvance, QueueReady, Store
from clockd.store.postgres import PostgresStore
from tests.harness import EtcdServer
from tests.harness.procs import until

from .conftest import PostgresBackend, SqliteBackend
from .support import FENCE, LEASE, MIN, SEC, T0, Backend, add_schedule, definition, materialize_next, planned


async def five_due(store: Store) -> None:
    """Five occurrences due at T0, T0+1s, … T0+4s, staged into the queue at T0-30s."""
    s = await add_schedule(store, "five", next_run_at=T0)
    rows = [planned(s, T0 + i * SEC) for i in range(5)]
    result = await store.materialize(FENCE, rows, [CursorAdvance(s.id, 1, T0, T0 + MIN)], T0 - MIN)
    assert result.inserted == 5
    assert (await store.relay(T0 + MIN, 100, T0 - 30 * SEC)).moved == 5


async def test_versions_record_the_cursor_each_version_started_at(store: Store) -> None:
    s = await add_schedule(store, "job", next_run_at=T0)
    changed, _, _ = await store.change_schedule(
        s.id, 1, definition("job", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0 + 5 * MIN, T0 + SEC, "updated"
    )
    await store.change_schedule(s.id, 2, changed.definition, ScheduleState.PAUSED, T0 + 5 * MIN, T0 + 2 * SEC, "paused")
    rows = await store.reconcile_rows(T0, T0 + 10 * MIN, s.id)
    [history] = rows.schedules
    assert (history.name, history.state, history.version) == ("job", ScheduleState.PAUSED, 3)
    assert [(v.version, v.state, v.next_run_at) for v in history.versions] == [
        (1, ScheduleState.ACTIVE, T0),
        (2, ScheduleState.ACTIVE, T0 + 5 * MIN),
        (3, ScheduleState.PAUSED, T0 + 5 * MIN),
    ]
    assert history.versions[0].valid_to == T0 + SEC and history.versions[2].valid_to is None
    assert history.versions[1].definition.expr == "*/5 * * * *"


async def test_reconcile_rows_reads_the_range_of_every_relevant_schedule(store: Store) -> None:
    a = await add_schedule(store, "a", next_run_at=T0)
    b = await add_schedule(store, "b", next_run_at=T0)
    await materialize_next(store, a)
    await materialize_next(store, b, at=T0 + 2 * MIN)
    await store.add_manual_occurrence(a, "manual-1", 1, T0)
    rows = await store.reconcile_rows(T0, T0 + MIN)
    assert sorted(h.name for h in rows.schedules) == ["a", "b"]
    assert [(o.schedule_name, o.scheduled_for) for o in rows.occurrences] == [("a", T0)]  # not run-now
    assert rows.occurrences[0].last_error is None
    gone = await add_schedule(store, "gone", next_run_at=T0, now=T0 - 2 * MIN)
    await store.change_schedule(gone.id, 1, gone.definition, ScheduleState.DELETED, None, T0 - MIN, "deleted")
    later = await store.reconcile_rows(T0, T0 + MIN)
    assert "gone" not in {h.name for h in later.schedules}  # deleted before the range


async def test_queue_stats_per_queue(store: Store) -> None:
    await five_due(store)
    other = await add_schedule(store, "other", next_run_at=T0, queue="batch")
    await materialize_next(store, other, available_at=T0 + MIN)
    assert (await store.relay(T0 + 2 * MIN, 100, T0)).moved == 1
    await store.claim(["default"], "w", 2, LEASE, T0 + 2 * SEC)
    stats = {q.queue: q for q in await store.queue_stats(T0 + 10 * SEC)}
    assert set(stats) == {"batch", "default"}
    assert (stats["default"].ready, stats["default"].running, stats["default"].staged) == (3, 2, 0)
    assert stats["default"].oldest_ready_at == T0 + 2 * SEC
    assert (stats["batch"].ready, stats["batch"].staged, stats["batch"].oldest_ready_at) == (0, 1, None)
    # The leader's sample (the backlog) reads the same claimable rows per queue, and only
    # those: batch's row, visible at T0+1m, is staged, not queued.
    backlog = await store.backlog(T0 + 10 * SEC)
    assert backlog.queues == (QueueReady("batch", 0, None), QueueReady("default", 3, T0 + 2 * SEC))
    assert (backlog.queued, backlog.running, backlog.oldest_queued_at) == (3, 2, T0 + 2 * SEC)


async def test_start_lag_percentiles_are_the_same_on_every_store(store: Store) -> None:
    await five_due(store)
    claims = await store.claim(["default"], "w", 4, LEASE, T0 + 10 * SEC)  # lags 10, 9, 8, 7 s
    assert len(claims) == 4
    # The fifth (due at T0+4s) still waits at T0+20s: it counts with its lag so far, 16 s.
    lag = await store.start_lag(T0 - MIN, T0 + 20 * SEC)
    assert lag.count == 5
    # percentile_cont over [7, 8, 9, 10, 16]
    assert lag.p50 == pytest.approx(9.0)
    assert lag.p95 == pytest.approx(10 + 0.8 * 6)
    assert lag.p99 == pytest.approx(10 + 0.96 * 6)
    empty = await store.start_lag(T0 + MIN, T0 + 2 * MIN)
    assert (empty.count, empty.p50, empty.p95, empty.p99) == (0, None, None, None)


async def test_start_lag_histogram_counts_every_run_due_at_the_instant(store: Store) -> None:
    """The dashboard's top-of-hour burst: every occurrence due at T0 (here 12, from 12
    schedules), none sampled; one due a second later and one MISSED at T0 do not count."""
    burst = [await add_schedule(store, f"b{i:02d}", next_run_at=T0) for i in range(12)]
    for schedule in burst:
        await materialize_next(store, schedule)
    late = await add_schedule(store, "later", next_run_at=T0 + SEC)
    await materialize_next(store, late)
    missed = await add_schedule(store, "missed", next_run_at=T0)
    await materialize_next(store, missed, state=OccurrenceState.MISSED, reason="missed")
    assert (await store.relay(T0 + MIN, 100, T0 - 30 * SEC)).moved == 13
    for at in (1, 1, 1, 2, 5, 9, 11):  # one claim per instant: lags of 1, 1, 1, 2, 5, 9 and 11 s
        assert len(await store.claim(["default"], "w", 1, LEASE, T0 + at * SEC)) == 1
    # At T0+12s the other five (and the one due at T0+1s) still wait: they count 12 s so far.
    hist = await store.start_lag_histogram(T0, T0 + 12 * SEC, 4)
    assert (hist.count, hist.low, hist.high) == (12, 0.0, pytest.approx(12.0))  # type: ignore[comparison-overlap]  # approx equals a float
    assert hist.width == pytest.approx(3.0)
    # Bins [0, 3) [3, 6) [6, 9) [9, 12]: the highest lag falls in the last bin.
    assert hist.counts == (4, 1, 0, 7)
    assert sum(hist.counts) == hist.count
    empty = await store.start_lag_histogram(T0 + 2 * MIN, T0 + 3 * MIN, 4)
    assert (empty.count, empty.counts) == (0, (0, 0, 0, 0))


async def test_dead_count_and_not_run_counts_by_reason(store: Store) -> None:
    s = await add_schedule(store, "s", next_run_at=T0)
    missed = planned(s, T0, state=OccurrenceState.MISSED, reason="missed: 20m late")
    await store.materialize(FENCE, [missed], [CursorAdvance(s.id, 1, T0, T0 + MIN)], T0 + 20 * MIN)
    d = await add_schedule(store, "d", next_run_at=T0)
    await materialize_next(store, d)
    await store.relay(T0 + MIN, 10, T0)
    [claim] = await store.claim(["default"], "w", 1, LEASE, T0)
    completion = Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.DEAD, exit_code=1, error="boom")
    await store.finish([completion], T0 + SEC)
    assert await store.dead_count() == 1
    counts = await store.not_run_counts(T0, T0 + 30 * MIN)
    assert counts == {(OccurrenceState.MISSED, "misfire"): 1}
    assert await store.not_run_counts(T0 + 30 * MIN, T0 + 40 * MIN) == {}


# -- clockctl status's document -----------------------------------------------------------------


def _location(backend: Backend) -> StoreLocation:
    if isinstance(backend, SqliteBackend):
        return StoreLocation("sqlite", str(backend.path))
    assert isinstance(backend, PostgresBackend)
    return StoreLocation("postgresql", backend.dsn)


async def test_status_document_has_the_same_shape_on_every_store(store: Store, backend: Backend) -> None:
    await five_due(store)
    doc = await gather(store, Settings(), _location(backend))
    assert set(doc) == {
        "now", "store", "coordination", "lag", "backlog", "queues", "dlq", "unaccounted", "job_containment",
    }  # fmt: skip
    assert doc["store"]["kind"] == ("sqlite" if backend.kind == "sqlite" else "postgresql")
    assert abs(doc["store"]["clock_offset_seconds"]) < 5
    assert set(doc["lag"]) == {"5m", "60m"} and set(doc["lag"]["5m"]) == {"count", "p50", "p95", "p99"}
    assert set(doc["backlog"]) == {"due_schedules", "outbox", "queued", "running", "oldest_queued_age_seconds"}
    assert [q["queue"] for q in doc["queues"]] == ["default"]
    assert set(doc["queues"][0]) == {"queue", "ready", "running", "staged", "oldest_age_seconds"}
    assert doc["dlq"] == 0
    assert set(doc["unaccounted"]) == {"count", "from", "to", "problems"}
    coordination = doc["coordination"]
    if backend.kind == "sqlite":
        assert coordination["kind"] == "embedded"
        assert coordination["lock"]["held"] is False and coordination["leader"] is None
    else:
        assert coordination["kind"] == "unknown" and "--etcd" in coordination["note"]


async def test_status_reads_leader_members_and_shards_from_etcd(
    pg_dsn: str, etcd_server: EtcdServer, tmp_path: Path
) -> None:
    store = PostgresStore(pg_dsn)
    await store.open()
    cluster = f"status-{tmp_path.name[-8:]}"
    # A TTL a loaded machine's event loop cannot outlast between two renewals.
    node = EtcdCoordinator(etcd_server.endpoints, cluster, "n1", shard_count=4, ttl=10)
    await node.start(lead=True, materialize=True, modes=("leader", "materializer"))
    try:
        await until(
            lambda: node.leader_lease() is not None and len(node.shard_leases()) == 4,
            within=20,
            what="n1 to lead and own the 4 shards",
        )
        settings = Settings(etcd=tuple(etcd_server.endpoints), cluster=cluster, shard_count=4)
        doc = await gather(store, settings, StoreLocation("postgresql", pg_dsn))
    finally:
        await node.stop()
        await store.close()
    coordination = doc["coordination"]
    assert coordination["kind"] == "etcd" and coordination["reachable"] is True
    assert coordination["leader"]["node"] == "n1" and coordination["leader"]["token"] > 0
    assert coordination["members"] == [{"node": "n1", "modes": ["leader", "materializer"], "shards": [0, 1, 2, 3]}]
