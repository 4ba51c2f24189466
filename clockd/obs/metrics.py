"""Prometheus metrics of one clockd process. Labels are bounded: queue, mode,
outcome, reason — never a schedule or occurrence id."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

_LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600)

schedule_lag = Histogram(
    "clockd_schedule_lag_seconds",
    "Delay from an occurrence's due instant (available_at) to a step: enqueued, started",
    ["step"],
    buckets=_LAG_BUCKETS,
    registry=REGISTRY,
)
occurrences_materialized = Counter(
    "clockd_occurrences_materialized_total",
    "Occurrences written by this materializer, by state (SCHEDULED, MISSED)",
    ["state"],
    registry=REGISTRY,
)
occurrences_relayed = Counter(
    "clockd_occurrences_relayed_total",
    "Outbox rows moved into the dispatch queue",
    registry=REGISTRY,
)
attempts_total = Counter(
    "clockd_attempts_total", "Finished attempts by outcome", ["outcome"], registry=REGISTRY
)
retries_total = Counter("clockd_retries_total", "Attempts followed by a retry", registry=REGISTRY)
dead_total = Counter("clockd_dead_total", "Occurrences that went DEAD", registry=REGISTRY)
stale_completions = Counter(
    "clockd_stale_completions_total",
    "Completions rejected because the lease token was stale (a newer attempt owns it)",
    registry=REGISTRY,
)
leases_reaped = Counter(
    "clockd_leases_reaped_total", "Expired worker leases returned by the leader", registry=REGISTRY
)
fenced_writes_rejected = Counter(
    "clockd_fenced_writes_rejected_total",
    "Writes refused because a newer holder's fencing token was stored",
    ["resource_kind"],
    registry=REGISTRY,
)
running_jobs = Gauge("clockd_running_jobs", "Jobs running in this worker", registry=REGISTRY)
leadership = Gauge(
    "clockd_is_leader", "1 while this process holds the leader lease", registry=REGISTRY
)
shards_owned = Gauge("clockd_shards_owned", "Shards this materializer holds", registry=REGISTRY)
leadership_changes = Counter(
    "clockd_leadership_changes_total",
    "Times this process gained or lost leadership",
    registry=REGISTRY,
)
shard_moves = Counter("clockd_shard_moves_total", "Shards gained or lost", registry=REGISTRY)
backlog = Gauge(
    "clockd_backlog",
    "Work waiting, by stage (due, outbox, queued, running)",
    ["stage"],
    registry=REGISTRY,
)
oldest_queued_age = Gauge(
    "clockd_queue_oldest_age_seconds",
    "Age of the oldest visible unclaimed queue row",
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
tzdata_info = Gauge(
    "clockd_tzdata_info", "IANA zone data release in use", ["version"], registry=REGISTRY
)
