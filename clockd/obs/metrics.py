"""Prometheus metrics of one clockd process. Labels are bounded: queue, mode,
outcome, reason — never a schedule or occurrence id."""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=True)

_LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600)


class LagSeries:
    """One step's series of ``clockd_schedule_lag_seconds``. ``observe_many`` takes a
    whole batch under one lock (the materializer's and the relay's staged rows, thousands
    a second); prometheus_client's ``Histogram`` has no batch observe and costs ~2.4 µs a
    value (lock, bucket search, ``_created``), this ~0.3 µs."""

    __slots__ = ("_bounds", "_counts", "_lock", "_sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # the last one is +Inf's own
        self._sum = 0.0
        self._lock = threading.Lock()  # the scrape reads from the metrics server's thread

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._counts[bisect_left(self._bounds, seconds)] += 1
            self._sum += seconds

    def observe_many(self, seconds: Iterable[float]) -> None:
        bounds, counts, total = self._bounds, self._counts, 0.0
        with self._lock:
            for value in seconds:
                counts[bisect_left(bounds, value)] += 1  # the first bound >= value: Prometheus' `le`
                total += value
            self._sum += total

    def read(self) -> tuple[list[tuple[str, float]], float]:
        """The cumulative buckets (``le`` label, count) and the sum, as one consistent read."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        buckets, running = [], 0
        for bound, count in zip((*self._bounds, math.inf), counts, strict=True):
            running += count
            # Histogram's own `le` spelling: 0.05, 1.0, 3600.0, +Inf
            buckets.append(("+Inf" if bound == math.inf else repr(float(bound)), float(running)))
        return buckets, total


class _LagHistogram(Collector):
    """``clockd_schedule_lag_seconds``, one series per step, each made at import so a
    scrape shows every step from the start (at count 0 until its first observation)."""

    NAME = "clockd_schedule_lag_seconds"
    HELP = "Delay from an occurrence's due instant (available_at) to a step: enqueued, started"

    def __init__(self, steps: tuple[str, ...], bounds: tuple[float, ...]) -> None:
        self._series = {step: LagSeries(bounds) for step in steps}

    def labels(self, step: str) -> LagSeries:
        return self._series[step]

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.NAME, self.HELP, labels=["step"])

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.NAME, self.HELP, labels=["step"])
        for step, series in self._series.items():
            buckets, total = series.read()
            family.add_metric([step], buckets, total)
        yield family


# enqueued: observed by whoever stages the row (the materializer with direct dispatch,
# else the relay) as it commits; started: by the worker as it starts the run.
schedule_lag = _LagHistogram(("enqueued", "started"), _LAG_BUCKETS)
REGISTRY.register(schedule_lag)
occurrences_materialized = Counter(
    "clockd_occurrences_materialized_total",
    "Occurrences written by this materializer, by state (SCHEDULED, MISSED)",
    ["state"],
    registry=REGISTRY,
)
occurrences_swept_missed = Counter(
    "clockd_occurrences_swept_missed_total",
    "Queued occurrences the leader's misfire sweep marked MISSED (no worker reached them in time)",
    registry=REGISTRY,
)
occurrences_relayed = Counter(
    "clockd_occurrences_relayed_total",
    "Outbox rows moved into the dispatch queue",
    registry=REGISTRY,
)
attempts_total = Counter("clockd_attempts_total", "Finished attempts by outcome", ["outcome"], registry=REGISTRY)
retries_total = Counter("clockd_retries_total", "Attempts followed by a retry", registry=REGISTRY)
dead_total = Counter("clockd_dead_total", "Occurrences that went DEAD", registry=REGISTRY)
stale_completions = Counter(
    "clockd_stale_completions_total",
    "Completions rejected because the lease token was stale (a newer attempt owns it)",
    registry=REGISTRY,
)
leases_reaped = Counter("clockd_leases_reaped_total", "Expired worker leases returned by the leader", registry=REGISTRY)
fenced_writes_rejected = Counter(
    "clockd_fenced_writes_rejected_total",
    "Writes refused because a newer holder's fencing token was stored",
    ["resource_kind"],
    registry=REGISTRY,
)
running_jobs = Gauge("clockd_running_jobs", "Jobs running in this worker", registry=REGISTRY)
leadership = Gauge("clockd_is_leader", "1 while this process holds the leader lease", registry=REGISTRY)
shards_owned = Gauge("clockd_shards_owned", "Shards this materializer holds", registry=REGISTRY)
materializer_lead = Gauge(
    "clockd_materializer_lead_seconds",
    "How far ahead of now this materializer's shards are planned, read at each full tick: "
    "about the horizon once caught up (full ticks then every 2 s), below zero while due instants "
    "are not yet planned",
    registry=REGISTRY,
)
# clockd_leadership_changes_total and clockd_shard_moves_total: read from the coordinator
# at scrape time (see ``watch_coordinator`` below).
backlog = Gauge(
    "clockd_backlog",
    "Work waiting, by stage: due schedules, outbox rows, queue rows claimable now (queued; "
    "not the rows staged for later), rows leased (running)",
    ["stage"],
    registry=REGISTRY,
)
oldest_queued_age = Gauge(
    "clockd_queue_oldest_age_seconds",
    "Age of the oldest claimable (visible, unleased) queue row, per queue (sampled by the leader)",
    ["queue"],
    registry=REGISTRY,
)
clock_offset = Gauge(
    "clockd_clock_offset_seconds",
    "This process's clock minus the database server's",
    registry=REGISTRY,
)
store_errors = Counter(
    "clockd_store_errors_total",
    "Store calls that failed and were retried",
    ["mode"],
    registry=REGISTRY,
)
tzdata_info = Gauge("clockd_tzdata_info", "IANA zone data release in use", ["version"], registry=REGISTRY)

# -- operator read paths: sampled by the leader from the store (clockd.modes.sampler) ---------

queue_depth = Gauge(
    "clockd_queue_depth",
    "Queue rows claimable now and not leased, per queue (sampled by the leader)",
    ["queue"],
    registry=REGISTRY,
)
dlq_size = Gauge(
    "clockd_dlq_size",
    "DEAD occurrences: the dead-letter queue (sampled by the leader)",
    registry=REGISTRY,
)
occurrences_not_run = Counter(
    "clockd_occurrences_not_run_total",
    "Occurrences that ended without running, by state (MISSED, SKIPPED_OVERLAP) and reason: "
    "misfire (late when materialized), lateness (queued past max_lateness), overlap (counted by the leader)",
    ["state", "reason"],
    registry=REGISTRY,
)
occurrences_unaccounted = Gauge(
    "clockd_occurrences_unaccounted",
    "Expected instants of the last reconciled hour that are missing, doubled or unexpected (the leader's reconciler)",
    registry=REGISTRY,
)


class _CoordinatorCollector(Collector):
    """The coordinator's own counters, read at scrape time: the etcd adapter counts its
    leadership changes and shard moves (and whether etcd answers); the local one has none."""

    def __init__(self) -> None:
        self.source: object | None = None

    def describe(self) -> Iterator[Metric]:
        return self._families(0.0, 0.0, None)

    def collect(self) -> Iterator[Metric]:
        src = self.source
        up = getattr(src, "etcd_up", None)
        return self._families(
            float(getattr(src, "leadership_changes", 0)),
            float(getattr(src, "shard_moves", 0)),
            None if up is None else float(bool(up)),
        )

    @staticmethod
    def _families(changes: float, moves: float, up: float | None) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "clockd_leadership_changes", "Times this process gained or lost leadership", value=changes
        )
        yield CounterMetricFamily("clockd_shard_moves", "Shards this process gained or lost", value=moves)
        if up is not None:
            yield GaugeMetricFamily("clockd_etcd_up", "1 when the last etcd call got an answer", value=up)


_coordinator = _CoordinatorCollector()
REGISTRY.register(_coordinator)


def watch_coordinator(coord: object) -> None:
    """Export ``coord``'s counters (``leadership_changes``, ``shard_moves``, ``etcd_up``)."""
    _coordinator.source = coord


class _DefinitionCacheCollector(Collector):
    """The claim path's definition cache (``clockd.store.definition_cache``) of the
    process's store, read at scrape time; nothing until a store is watched."""

    def __init__(self) -> None:
        self.source: object | None = None

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        cache = getattr(self.source, "definitions", None)
        if cache is None:
            return
        hits, misses = float(getattr(cache, "hits", 0)), float(getattr(cache, "misses", 0))
        yield CounterMetricFamily(
            "clockd_definition_cache_hits", "Claimed occurrences whose definition was cached", value=hits
        )
        yield CounterMetricFamily(
            "clockd_definition_cache_misses",
            "Claimed occurrences whose definition was read from the store",
            value=misses,
        )
        yield CounterMetricFamily(
            "clockd_definition_cache_read_ahead",
            "Definitions an idle worker read into the cache before their claims",
            value=float(getattr(cache, "read_ahead", 0)),
        )
        yield GaugeMetricFamily("clockd_definition_cache_entries", "Definitions cached", value=float(len(cache)))
        yield GaugeMetricFamily(
            "clockd_definition_cache_capacity",
            "Definitions the cache holds at most",
            value=float(getattr(cache, "capacity", 0)),
        )


_definition_cache = _DefinitionCacheCollector()
REGISTRY.register(_definition_cache)


def watch_store(store: object) -> None:
    """Export ``store``'s definition cache counters (``store.definitions``), if it has one."""
    _definition_cache.source = store
