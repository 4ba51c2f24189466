"""Distributed benchmarks: real ``clockd`` processes per mode on PostgreSQL and etcd.

Goals (issue 18, "Performance, round two"): 10,000 executions/s sustained for 60 s with
lag p99 ≤ 2 s, no backlog growth and the materializer never behind; the knee (the
highest rate still meeting p99 ≤ 2 s) ≥ 12,000/s; database time per execution
(pg_stat_statements) ≤ 80 µs and CPU per execution over every clockd process ≤ 60 µs;
the 500,000 top-of-hour drill 100 % in the queue before T, drained at ≥ 30,000/s with
claim lag p99 ≤ 17 s and ≤ 5× the bare-SQL drill of the same run (the 20,000 drill:
p99 ≤ 5× bare); creation through the ``clockctl apply`` path ≥ 20,000/s; every clockd
process under 300 MB resident (VmHWM) at 1,000,000 schedules.

Scenarios, each on a fresh database of the same server, each with its own processes
(``materializer``, ``relay``, ``leader`` and two ``worker`` processes, one mode each):

0. **bare SQL** (``bench.baseline``): the claim/complete pattern with no clockd code,
   N rows due at one instant, 2 processes, batches of 1000, run twice (``BARE_RUNS``);
   the faster run's figures are the denominators of the ratios printed next to
   clockd's, so a slow bare run cannot make a drill pass.
1. **top-of-hour drill**: N ``once`` schedules (no-op target) all due at T. The
   processes start first; the schedules are created (a sample through
   ``Store.apply_schedules``, the rest with ``COPY`` when that path is too slow for
   the size — the output says so), then T arrives. Measured from the database:
   materialization rate, the share of occurrences in the queue (``dispatch``,
   committed) at T, claim lag (attempt ``started_at`` − ``scheduled_for``) p50/p99/max,
   completion p99, executions/s, database size per million executed occurrences, and
   the materializer's CPU time per occurrence.
2. **sustained load**: ``every`` schedules (1 s, 2 s, 5 s, 10 s; anchors spread over
   the period in 100 ms steps) firing R times a second; after a warm-up and then
   until the materializer has planned every due instant (its start-up horizon, R ×
   20 s at once: a transient, not the sustained load; at most ``CATCH_UP_CAP``
   seconds, printed), a window of W seconds: lag p99, executions/s, queue depth (due rows in ``dispatch`` and
   ``outbox``) at the start and the end of the window, the most overdue schedule
   cursor (sampled every 2 s: > 1 s means the materializer fell behind), database time
   per execution (pg_stat_statements of the scenario's database, the bench's own
   ``/* bench */`` probes left out, ÷ attempts finished in the window; beside it the
   bare-SQL drill's claim+complete time per row) and CPU per execution (utime + stime
   of every clockd process from ``/proc/<pid>/stat``, summed, ÷ the same attempts).
2b. **the knee**: more sustained runs (fresh database and processes each, shorter
   windows) from R up by 25 % while p99 ≤ 2 s holds (down while it does not), then
   bisection to 250/s; prints the highest rate that met it and every rate tried.
3. **scale**: M active schedules (mixed zones and cron expressions, 10 % every
   minute): creation rate through ``clockctl apply``'s path (``Ops.plan_apply`` +
   ``Ops.apply_plan``) on a sample, and through the bare set-based SQL it could be;
   the rest loaded with ``COPY``; then all modes run for a while: materializer CPU
   per occurrence, database size per million occurrences, peak resident memory
   (VmHWM) of every process.
4. **real commands**: 1,000 ``/bin/true`` jobs due at one instant, 2 workers ×
   concurrency 16: executions/s and lag p99.

Sizes (``--quick`` / full; ``--scale F`` multiplies N, R and M): drill 20,000 /
20,000 and 500,000 (each after a bare-SQL drill of its size); sustained 2,000/s for 8 s
/ 10,000/s for 60 s; knee 2 runs of 8 s / 4 runs of 30 s (after a 20 s warm-up; one
more at 12,000/s when the goal falls between the rates tried);
scale 50,000 / 1,000,000.

Run: ``python -m bench --only distributed [--quick] [--scale 0.2] [--store DSN]
[--etcd URLS] [--profile DIR] [--scenario drill|sustained|knee|scale|commands]`` or
``python -m bench.distributed [--quick]``. ``BENCH_DRILL_LEAD=SECONDS`` overrides the
drill's lead (the time the pipeline gets between the creation and T), e.g. to measure
the claims alone with everything staged.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench import baseline, bulk
from bench.baseline import BareResult
from bench.cluster import Cluster, percentile, row
from bench.servers import Servers, log, machine_busy, servers
from clockd.core.durations import parse_duration
from clockd.core.ids import shard_of
from clockd.core.model import CommandTarget, NoopTarget, ScheduleDef, ScheduleKind
from clockd.core.spec import compile_spec

SHARDS = 64
# The longest a sustained run waits, after its warm-up, for the materializer to have
# planned every due instant (the start-up horizon) before its window opens.
CATCH_UP_CAP = 90.0
Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Sizes:
    drills: tuple[int, ...]  # each drill size runs with a bare-SQL drill of the same size
    sustained_rate: int
    sustained_window: float
    sustained_warmup: float
    scale: int
    scale_sample: int  # schedules created through clockctl apply's path
    scale_run: float
    commands: int
    knee_steps: int  # runs of the knee search besides the sustained one
    knee_window: float
    knee_warmup: float

    @classmethod
    def of(cls, quick: bool, factor: float) -> Sizes:
        if quick:
            base = cls((20_000,), 2_000, 8.0, 5.0, 50_000, 5_000, 8.0, 1000, 2, 8.0, 5.0)
        else:
            base = cls((20_000, 500_000), 10_000, 60.0, 25.0, 1_000_000, 20_000, 60.0, 1000, 4, 30.0, 20.0)
        return cls(
            drills=tuple(sorted({max(1000, int(n * factor)) for n in base.drills})),
            sustained_rate=max(100, int(base.sustained_rate * factor)),
            sustained_window=base.sustained_window,
            sustained_warmup=base.sustained_warmup,
            scale=max(5000, int(base.scale * factor)),
            scale_sample=max(1000, int(base.scale_sample * min(1.0, factor))),
            scale_run=base.scale_run,
            commands=base.commands,
            knee_steps=base.knee_steps,
            knee_window=base.knee_window,
            knee_warmup=base.knee_warmup,
        )


def _profile(cluster: Cluster) -> None:
    directory = os.environ.get("BENCH_PROFILE")
    if directory:
        cluster.profile(directory)


def _finish(srv: Servers, dsn: str, scenario: str) -> None:
    """Drop the scenario's database, after saving its statement statistics if profiling."""
    directory = os.environ.get("BENCH_PROFILE")
    if directory:
        os.makedirs(directory, exist_ok=True)
        srv.statements(dsn, os.path.join(directory, f"{scenario}-statements.tsv"))
    srv.drop_database(dsn)


def _one(conn: psycopg.Connection[tuple[Any, ...]], query: str, params: Any = None) -> tuple[Any, ...]:
    found = conn.execute(query, params).fetchone()
    assert found is not None
    return found


def _history(conn: psycopg.Connection[tuple[Any, ...]]) -> str:
    """Where every ended attempt is: the attempt_history view since schema 0013 (a silent
    first success is kept on its occurrence row), the attempts table before (an older tree
    under ``BENCH_CLOCKD``)."""
    (view,) = _one(conn, "SELECT to_regclass('attempt_history') IS NOT NULL")
    return "attempt_history" if view else "attempts"


def _size_mib(conn: psycopg.Connection[tuple[Any, ...]]) -> float:
    """pg_total_relation_size of the four tables an occurrence lives in (logged per table)."""
    query = (  # a partitioned table's size is its partitions' (schema 0017); pg_partition_tree
        # of a plain table is empty
        "SELECT coalesce(sum(pg_total_relation_size(relid)), pg_total_relation_size(%(t)s::regclass)) "
        "FROM pg_partition_tree(%(t)s::regclass)"
    )
    sizes = {
        table: int(_one(conn, query, {"t": table})[0]) for table in ("occurrences", "attempts", "dispatch", "outbox")
    }
    log("table sizes (MiB, indexes included): " + ", ".join(f"{t} {v / 2**20:,.0f}" for t, v in sizes.items()))
    return sum(sizes.values()) / 2**20


def _sleep_until(instant: datetime) -> None:
    while (left := (instant - datetime.now(UTC)).total_seconds()) > 0:
        time.sleep(min(left, 0.5))


def _start_all(cluster: Cluster, *, horizon: str, concurrency: int = 1000, workers: int = 2) -> float:
    """materializer, relay, leader and ``workers`` worker processes; returns seconds to ready."""
    cluster.spawn("materializer", "materializer", "--horizon", horizon)
    cluster.spawn("relay", "relay")
    cluster.spawn("leader", "leader")
    for i in range(workers):
        cluster.spawn(f"worker-{i + 1}", "worker", "--concurrency", str(concurrency))
    ready = cluster.wait_ready()
    _profile(cluster)
    return ready


# -- 0. bare SQL ---------------------------------------------------------------------------


BARE_RUNS = 2  # the baseline is the faster of this many bare-SQL drills (see ``bare``)


def bare(srv: Servers, n: int) -> tuple[BareResult, float, list[Row]]:
    """The bare-SQL drill, run ``BARE_RUNS`` times, each on a fresh database; the one
    with the lowest claim lag p99 is the baseline (a single run of the 20,000 drill
    lasts ~0.3 s, so one hiccup — a checkpoint, another process's burst — could double
    it and let clockd's drill pass on the baseline's bad luck: run EE1's 0.513 s against
    0.29 s in the run after). Also returns that run's database time per row claimed and
    completed (µs: the claim's ``UPDATE`` and the complete's ``DELETE … INSERT``,
    pg_stat_statements)."""
    runs: list[tuple[BareResult, float]] = []
    for attempt in range(1, BARE_RUNS + 1):
        dsn = srv.new_database("bare")
        try:
            log(f"bare SQL, run {attempt} of {BARE_RUNS}: {n:,} rows due at one instant, 2 processes, "
                "batches of 1000")  # fmt: skip
            r = baseline.drill(dsn, n)
            claim_ms = srv.db_time_ms(dsn, like="%UPDATE bench_queue%")
            complete_ms = srv.db_time_ms(dsn, like="%DELETE FROM bench_queue%")
        finally:
            _finish(srv, dsn, "bare")
        db_per_row = (
            (claim_ms + complete_ms) * 1000 / r.done if claim_ms is not None and complete_ms is not None and r.done
            else float("nan")
        )  # fmt: skip
        runs.append((r, db_per_row))
    r, db_per_row = min(runs, key=lambda run: run[0].lag_p99)
    label = f"bare SQL {n // 1000}k"
    rows = [
        row(f"{label}: INSERT…SELECT", r.stage_rate, "/s"),
        row(f"{label}: database time per row (claim+complete)", db_per_row, "µs"),
        row(f"{label}: claim lag p50", r.lag_p50, "s"),
        row(f"{label}: claim lag p99", r.lag_p99, "s"),
        row(f"{label}: claim lag p99 of each run (the lowest is the baseline)",
            " / ".join(f"{run.lag_p99:.3f}" for run, _ in runs), "s"),
        row(f"{label}: claim+complete", r.rate, "/s"),
        row(f"{label}: done", r.done, "", f"= {n:,}", all(run.done == n for run, _ in runs)),
    ]  # fmt: skip
    return r, db_per_row, rows


# -- 1. top-of-hour drill ------------------------------------------------------------------


def _once_rows(n: int, due: datetime, now: datetime, prefix: str, target: Any) -> list[bulk.Row]:
    template = bulk.Template.of(
        ScheduleDef(name=f"{prefix}-template", kind=ScheduleKind.ONCE, expr=due.isoformat(), tz="UTC", target=target)
    )
    out = []
    for i in range(n):
        sid = str(uuid.uuid4())
        out.append(bulk.Row(sid, f"{prefix}-{i:07d}", template, shard_of(sid, SHARDS), due, now))
    return out


def _create(dsn: str, rows: list[bulk.Row], now: datetime, sample: int) -> tuple[float, str, float]:
    """A sample through ``Store.apply_schedules`` (the port's batched create); the rest
    through it too if it creates at least 25,000/s (the pace the drill plans T with),
    else with COPY. Returns (apply rate, how the schedules were made, total seconds)."""
    began = time.monotonic()
    sample = min(sample, len(rows))
    seconds = bulk.create_via_store(dsn, rows[:sample], now)
    rate = sample / seconds
    rest = rows[sample:]
    if not rest:
        how = "apply_schedules"
    elif rate >= 25_000:
        bulk.create_via_store(dsn, rest, now)
        how = "apply_schedules"
    else:
        bulk.copy_schedules(dsn, rest)  # and ANALYZEs, as autovacuum would after a bulk load
        how = f"{sample // 1000}k apply_schedules + COPY"
    return rate, how, time.monotonic() - began


@dataclass
class Progress:
    """(seconds since start, occurrences, outbox rows, dispatch rows) samples."""

    began: float
    samples: list[tuple[float, int, int, int]]

    def add(self, conn: psycopg.Connection[tuple[Any, ...]]) -> tuple[int, int, int]:
        occ, outbox, queued = _one(
            conn,
            f"SELECT /* bench */ (SELECT count(*) FROM occurrences), (SELECT count(*) FROM outbox), {_IN_QUEUE_SQL}",
        )
        self.samples.append((time.monotonic() - self.began, int(occ), int(outbox), int(queued)))
        return int(occ), int(outbox), int(queued)

    def rate(self, column: int, n: int) -> tuple[float, float | None, float | None]:
        """Rows/s of ``column`` from its first non-zero sample to the first at ``n`` (or
        the last), and the instants of those two samples (None if not seen)."""
        first = next((s for s in self.samples if s[column] > 0), None)
        if first is None:
            return 0.0, None, None
        full = next((s for s in self.samples if s[column] >= n), None)
        last = full or self.samples[-1]
        span = last[0] - first[0]
        rate = (last[column] - first[column]) / span if span > 0 else float("nan")
        return rate, first[0], None if full is None else full[0]


def drill(srv: Servers, n: int, quick: bool, bare_result: BareResult | None) -> list[Row]:
    dsn = srv.new_database("drill")
    cluster = Cluster(dsn, srv.etcd, "drill")
    label = f"drill {n // 1000}k"
    try:
        with cluster:
            cluster.migrate()
            ready = _start_all(cluster, horizon="10m")
            log(f"{label}: 5 clockd processes ready in {ready:.1f}s")
            mat = cluster.procs["materializer"]
            cpu0 = mat.cpu()
            # T: after the creation (planned at 25 k/s) plus a lead of n / 5,000 s (at least 8 s):
            # the pipeline must materialize and stage at 5,000/s or more to have all in the
            # queue by T (in production the horizon gives it minutes).
            now = datetime.now(UTC).replace(microsecond=0)
            lead = float(os.environ.get("BENCH_DRILL_LEAD") or max(8.0, n / 5_000))
            due = now + timedelta(seconds=math.ceil(2 + n / 25_000 + lead))
            rows = _once_rows(n, due, now, "drill", NoopTarget())
            apply_rate, how, created_in = _create(dsn, rows, now, 2000 if quick else 5000)
            del rows
            log(f"{label}: {n:,} schedules created in {created_in:.1f}s ({how}); T in "
                f"{(due - datetime.now(UTC)).total_seconds():.1f}s")  # fmt: skip
            progress = Progress(time.monotonic(), [])
            with psycopg.connect(dsn, autocommit=True) as conn:
                every = 0.5 if n <= 100_000 else 1.0  # a count of the occurrences costs ~0.1 µs a row
                while (due - datetime.now(UTC)).total_seconds() > every + 0.1:
                    progress.add(conn)
                    cluster.sample()
                    time.sleep(every)
                _sleep_until(due - timedelta(milliseconds=5))
                # One statement, one snapshot taken at T: what was committed before T.
                at_t_queue, at_t_outbox, at_t_occ = _one(
                    conn,
                    f"SELECT {_IN_QUEUE_SQL}, (SELECT count(*) FROM outbox), (SELECT count(*) FROM occurrences)",
                )
                t_seen = time.monotonic() - progress.began
                cpu_mat = mat.cpu() - cpu0  # until T, for the occurrences made by T
                # The drain's profile: CPU and statements from T until the queue is empty.
                at_t = _Usage.read(srv, cluster)
                srv.db_time_ms(dsn, reset=True)
                # Until the queue and the outbox are empty and every occurrence exists (the
                # polls read the small tables; the occurrence count only once they are empty).
                deadline = time.monotonic() + 60 + n / 2000
                while time.monotonic() < deadline:
                    cluster.sample()
                    outbox, queued = _one(conn, f"SELECT /* bench */ (SELECT count(*) FROM outbox), {_IN_QUEUE_SQL}")
                    if outbox == 0 and queued == 0 and progress.add(conn)[0] >= n:
                        break
                    time.sleep(0.5)
                drain_cpu, drain_server, drain_backends, _ = _Usage.read(srv, cluster).since(at_t)
                drain_db_ms = srv.db_time_ms(dsn)
                _log_usage(label, drain_cpu, drain_server, drain_backends, "in the drain")
                _log_statements(label, srv.top_statements(dsn), "in the drain")
                lags = conn.execute(
                    "SELECT extract(epoch FROM a.started_at - o.scheduled_for)::float8, "
                    "extract(epoch FROM a.finished_at - o.scheduled_for)::float8 "
                    f"FROM {_history(conn)} a JOIN occurrences o ON o.id = a.occurrence_id WHERE a.attempt = 1"
                ).fetchall()
                (succeeded,) = _one(conn, "SELECT count(*) FROM occurrences WHERE state = 'SUCCEEDED'")
                size = _size_mib(conn)
                log(f"{label}: {_tables(conn)}")
            rss = cluster.peak_rss_mb()
        mat_rate, mat_first, mat_full = progress.rate(1, n)
        _, _, staged_full = progress.rate(3, n)
        claim = [float(r[0]) for r in lags]
        done = [float(r[1]) for r in lags if r[1] is not None]
        p50, p99, worst = percentile(claim, 0.5), percentile(claim, 0.99), max(claim, default=float("nan"))
        done_p99 = percentile(done, 0.99)
        span = max(done, default=0.0)
        rate = len(done) / span if span > 0 else float("nan")
        share = int(at_t_queue) / n
        # Issue 18: p99 ≤ 5× bare SQL at every size; at 500,000 also ≤ 17 s and a drain of
        # ≥ 30,000/s (at other sizes those two are printed for reference, not judged).
        full = n >= 500_000
        bare_p99 = bare_result.lag_p99 if bare_result else None
        ratio_p99 = p99 / bare_p99 if bare_p99 else None
        before_t = ""
        if staged_full is not None and staged_full <= t_seen:
            before_t = f"; queue complete {t_seen - staged_full:.1f}s before T"
        log(f"{label}: materialized {mat_rate:,.0f}/s (first rows at +{mat_first or 0:.1f}s, all at "
            f"+{mat_full if mat_full is not None else float('nan'):.1f}s, T at +{t_seen:.1f}s){before_t}; "
            f"at T: {at_t_queue:,} queued, {at_t_outbox:,} in outbox, {at_t_occ:,} occurrences")  # fmt: skip
        return [
            row(f"{label}: created via {how}", n, "", "", None),
            row(f"{label}: apply_schedules rate", apply_rate, "/s", "≥ 20,000/s", apply_rate >= 20_000),
            row(f"{label}: materialization", mat_rate, "/s", "", None,
                mat_rate / bare_result.stage_rate if bare_result else None),
            row(f"{label}: materializer CPU/occurrence", cpu_mat / max(1, int(at_t_occ)) * 1e6, "µs"),
            row(f"{label}: in queue before T", share * 100, "%", f"= 100 % ({lead:.0f} s lead)", share >= 1.0),
            row(f"{label}: claim lag p50", p50, "s", "", None, p50 / bare_result.lag_p50 if bare_result else None),
            row(f"{label}: claim lag p99", p99, "s", "≤ 17 s, ≤ 5× bare" if full else "≤ 5× bare",
                (p99 <= 17.0 or not full) and (ratio_p99 is None or ratio_p99 <= 5.0), ratio_p99),
            row(f"{label}: claim lag max", worst, "s", "", None, worst / bare_result.lag_max if bare_result else None),
            row(f"{label}: completion p99", done_p99, "s", "", None,
                done_p99 / bare_result.done_p99 if bare_result else None),
            row(f"{label}: drain, executions/s", rate, "/s", "≥ 30,000/s" if full else "(≥ 30,000/s at 500k)",
                rate >= 30_000 if full else None, rate / bare_result.rate if bare_result else None),
            row(f"{label}: succeeded", int(succeeded), "", f"= {n:,}", int(succeeded) == n),
            # Where the drain's time goes (no goals: the drain's own goal is above).
            row(f"{label}: drain CPU per execution, all clockd processes", sum(drain_cpu.values()) / n * 1e6, "µs"),
            row(f"{label}: drain CPU per execution, PostgreSQL server",
                drain_server / n * 1e6 if drain_server is not None else float("nan"), "µs"),
            row(f"{label}: drain database time per execution",
                drain_db_ms * 1000 / n if drain_db_ms is not None else float("nan"), "µs"),
            row(f"{label}: db size per 1M executed", size / n * 1e6, "MiB"),
            row(f"{label}: peak RSS ({max(rss, key=lambda k: rss[k])})", max(rss.values()), "MB", "< 300 MB",
                max(rss.values()) < 300),
        ]  # fmt: skip
    finally:
        _finish(srv, dsn, "drill")


# -- 2. sustained load ---------------------------------------------------------------------

PERIODS = (1, 2, 5, 10)  # seconds; each period carries a quarter of the rate


def _fires_in(anchor: datetime, expr: str, start: datetime, end: datetime) -> int:
    """How many instants anchor + k·period (k ≥ 1) fall in [start, end)."""
    period = parse_duration(expr)

    def upto(t: datetime) -> int:  # count of k ≥ 1 with anchor + k·period < t
        return max(0, math.ceil((t - anchor) / period) - 1)

    return upto(end) - upto(start)


@dataclass(frozen=True, slots=True)
class Load:
    """What one sustained run at ``rate`` measured over its window."""

    rate: int
    span: float  # seconds of the window
    due: float  # instants due per second in the window (from the definitions)
    missing: int  # instants due in the window and not materialized by end + 3 s
    executed: float  # attempts finished per second in the window
    p50: float
    p99: float  # lag of the window's instants (started − due; never materialized: late)
    backlog: tuple[int, int]  # due rows in queue + outbox at the start, at the end
    behind: tuple[float, float, float]  # oldest due cursor's age: start, end, max over the window
    db_per_run: float  # µs of database execution time per finished attempt
    cpu: dict[str, float]  # CPU seconds of each clockd process in the window
    rss: dict[str, float]  # peak RSS (MB) of each process
    opened_after: float = float("nan")  # seconds from ready to the window: warm-up + catch-up
    server_cpu: float | None = None  # CPU seconds of the whole PostgreSQL server in the window
    busy: float = float("nan")  # share of the machine's cores busy in the window (0–1)
    waits: Counter[str] = field(default_factory=Counter)  # active backends by wait event, sampled
    # Lag p99 and max of the instants due from the schedules' first instants to the window
    # (the start-up: the processes starting, then the materializer planning its horizon).
    startup: tuple[float, float] = (float("nan"), float("nan"))

    @property
    def server_cpu_per_run(self) -> float:
        """µs of PostgreSQL server CPU per finished attempt."""
        return self.server_cpu / self.finished * 1e6 if self.server_cpu is not None and self.finished else float("nan")

    @property
    def finished(self) -> int:
        return round(self.executed * self.span)

    @property
    def cpu_per_run(self) -> float:
        """µs of CPU of every clockd process together per finished attempt."""
        return sum(self.cpu.values()) / self.finished * 1e6 if self.finished else float("nan")

    @property
    def steady(self) -> bool:
        """The backlog did not grow (by more than half a second of load)."""
        return self.backlog[1] - self.backlog[0] <= max(self.rate // 2, 100)

    @property
    def never_behind(self) -> bool:
        """No active schedule's cursor was more than a second in the past at any sample:
        every instant was materialized by the time it was due (1 s: the sampling and
        the materializer's poll)."""
        return self.behind[2] <= 1.0

    @property
    def meets(self) -> bool:
        """The issue's bar for a rate: p99 ≤ 2 s with every due instant materialized and
        98 % of them executed within the window."""
        return self.p99 <= 2.0 and self.missing <= 0 and self.executed >= 0.98 * self.due


def _shares(counts: Counter[str], top: int) -> str:
    """The ``top`` most common keys with their share of all counts: "CPU 81%, IO:WALSync 3%"."""
    total = max(1, sum(counts.values()))
    return ", ".join(f"{k} {v / total:.0%}" for k, v in counts.most_common(top))


def _direct() -> bool:
    """The processes write the queue from the materializer (``CLOCKD_DIRECT_DISPATCH``,
    unset: the default, on)."""
    return os.environ.get("CLOCKD_DIRECT_DISPATCH", "true").lower() in ("1", "true", "yes", "on")


# The runs queued or leased: the queue's rows and, since schema 0022 (a claimed run leaves
# the queue; its batch row counts it while it is open), the claimed batches' open runs. A
# drain is over when this is 0. (The bare-SQL baseline leases its rows in place: for it
# the second term is 0.)
_LEASED_SQL = "(SELECT coalesce(sum(open), 0) FROM claim_batches)"
_IN_QUEUE_SQL = f"((SELECT count(*) FROM dispatch) + {_LEASED_SQL})"


# Cursor age of the most overdue active schedule (> 0: an instant is due and not yet
# materialized). Marked so the database time per execution leaves the bench's own
# queries out (pg_stat_statements keeps comments in its query text).
_BEHIND_SQL = (
    "SELECT /* bench */ greatest(0, extract(epoch FROM %(now)s - (SELECT min(next_run_at) FROM schedules "
    "WHERE state = 'active')))::float8"
)


# The queue's and the occurrences' state at the window's edges: dead row versions and
# sizes of the tables the claim reads (dispatch grows between vacuums: the leader's every
# queue_vacuum_every, autovacuum's at most once per autovacuum_naptime, a minute).
# occurrences is partitioned (schema 0017): its figures are its partitions' sums.
_TABLES_SQL = (
    "SELECT /* bench */ t.name, sum(s.n_live_tup)::bigint, sum(s.n_dead_tup)::bigint, "
    "sum(s.autovacuum_count)::bigint, sum(pg_relation_size(s.relid)) / 1048576.0, "
    "sum(pg_indexes_size(s.relid)) / 1048576.0, sum(s.n_tup_upd)::bigint, sum(s.n_tup_hot_upd)::bigint "
    "FROM unnest(ARRAY['dispatch', 'occurrences']) AS t(name) "
    "JOIN pg_stat_user_tables AS s ON s.relid = t.name::regclass "
    "OR s.relid IN (SELECT relid FROM pg_partition_tree(t.name::regclass)) GROUP BY t.name ORDER BY t.name"
)


def _tables(conn: psycopg.Connection[tuple[Any, ...]]) -> str:
    return "; ".join(
        f"{name} live {live:,} dead {dead:,} autovacuums {vacuums} heap {heap:.0f} MiB indexes {idx:.0f} MiB "
        f"updates {updates:,} ({hot / updates if updates else 0:.0%} HOT)"
        for name, live, dead, vacuums, heap, idx, updates, hot in conn.execute(_TABLES_SQL).fetchall()
    )


# The claim's two walks from the head of the ready indexes (its tenant probe and its
# pick, without the lock), EXPLAIN ANALYZE'd at the window's end: the pages they read
# say how many dead entries lie ahead of the first claimable row.
_HEAD_PROBES = {
    "tenant probe": "SELECT /* bench */ tenant FROM dispatch WHERE lease_token IS NULL AND queue = %(queue)s "
    "ORDER BY tenant LIMIT 1",
    "pick of 500": "SELECT /* bench */ id FROM dispatch WHERE lease_token IS NULL AND queue = %(queue)s "
    "AND visible_at <= now() ORDER BY visible_at, id LIMIT 500",
}


def _head_probes(conn: psycopg.Connection[tuple[Any, ...]]) -> str:
    found = conn.execute("SELECT /* bench */ queue FROM dispatch LIMIT 1").fetchone()
    if found is None:
        return "queue empty"
    shown = []
    for name, query in _HEAD_PROBES.items():
        (plan,) = _one(conn, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, {"queue": found[0]})
        top = plan[0]
        node = top["Plan"]
        shown.append(f"{name} {top['Execution Time']:.2f} ms, {node['Actual Rows']} rows, "
                     f"{node['Shared Hit Blocks'] + node['Shared Read Blocks']:,} pages")  # fmt: skip
    return "; ".join(shown)


@dataclass(frozen=True)
class _Usage:
    """CPU seconds so far: of each clockd process, of the whole PostgreSQL server and of
    each of its live backends, and the machine's busy jiffies. ``since`` an earlier
    reading gives the interval's share of each."""

    procs: dict[str, float]
    server: float | None
    backends: dict[int, tuple[str, float]]
    busy: tuple[float, float]

    @classmethod
    def read(cls, srv: Servers, cluster: Cluster) -> _Usage:
        procs = {name: p.cpu() for name, p in cluster.procs.items()}
        return cls(procs, srv.server_cpu_seconds(), srv.backend_cpu(), machine_busy())

    def since(self, before: _Usage) -> tuple[dict[str, float], float | None, dict[str, float], float]:
        """(CPU seconds per clockd process, of the server, per backend label, share of the
        machine's cores busy) between ``before`` and this reading."""
        procs = {name: seconds - before.procs[name] for name, seconds in self.procs.items()}
        server = self.server - before.server if self.server is not None and before.server is not None else None
        by_label: dict[str, float] = {}
        if server is not None:
            for pid, (name, seconds) in self.backends.items():
                by_label[name] = by_label.get(name, 0.0) + seconds - before.backends.get(pid, (name, 0.0))[1]
            by_label["exited backends (autovacuum workers…)"] = server - sum(by_label.values())
        busy = (self.busy[0] - before.busy[0]) / max(1.0, self.busy[1] - before.busy[1])
        return procs, server, by_label, busy


def _log_usage(
    label: str, procs: dict[str, float], server: float | None, by_label: dict[str, float], what: str
) -> None:
    log(
        f"{label}: CPU seconds {what}: "
        + ", ".join(f"{k} {v:.1f}" for k, v in procs.items())
        + (f", PostgreSQL server {server:.1f}" if server is not None else "")
    )
    if server is not None:
        log(
            f"{label}: PostgreSQL CPU seconds {what} by client/backend: "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(by_label.items(), key=lambda kv: -kv[1]) if abs(v) >= 0.05)
        )


def _log_statements(label: str, statements: list[tuple[int, float, int, str]] | None, what: str) -> None:
    log(
        f"{label}: top statements {what} (calls, ms, rows): "
        + " | ".join(f"{c:,} {ms:,.0f} {n:,} {q[:70]}" for c, ms, n, q in statements or [])
    )


def _run_load(srv: Servers, rate: int, window: float, warmup: float, label: str) -> Load:
    """``every`` schedules firing ``rate`` times a second on a fresh database with its own
    processes; after ``warmup`` seconds, a window of ``window`` seconds is measured."""
    dsn = srv.new_database("sustained")
    cluster = Cluster(dsn, srv.etcd, "sustained")
    try:
        with cluster:
            cluster.migrate()
            # Anchors in the past (spread over the period in 100 ms steps), cursors at the
            # first instant after now: every period group fires at its full rate from the start.
            now = datetime.now(UTC).replace(microsecond=0)
            base = now - timedelta(seconds=max(PERIODS))
            rows: list[bulk.Row] = []
            templates = {
                p: bulk.Template.of(ScheduleDef(name="t", kind=ScheduleKind.EVERY, expr=f"{p}s", tz="UTC",
                                                target=NoopTarget()))
                for p in PERIODS
            }  # fmt: skip
            for p in PERIODS:
                count = rate * p // len(PERIODS)
                slots = p * 10
                for i in range(count):
                    sid = str(uuid.uuid4())
                    anchor = base + timedelta(milliseconds=100 * (i % slots))
                    first = compile_spec(ScheduleKind.EVERY, f"{p}s", "UTC", anchor).next_after(now)
                    assert first is not None
                    rows.append(bulk.Row(sid, f"every{p}-{i:06d}", templates[p], shard_of(sid, SHARDS), first, anchor))
            created = bulk.copy_schedules(dsn, rows)
            log(f"{label}: {len(rows):,} every-schedules ({'/'.join(f'{p}s' for p in PERIODS)}) COPYed in "
                f"{created:.1f}s")  # fmt: skip
            ready = _start_all(cluster, horizon="20s")
            log(f"{label}: processes ready in {ready:.1f}s; warm-up {warmup:g}s, window {window:g}s")
            # Backlog: due rows in the queue, the runs claimed (_LEASED_SQL), the outbox's, and schedules
            # whose cursor is already due (at least one instant not even materialized).
            depth_sql = (
                "SELECT /* bench */ (SELECT count(*) FROM dispatch WHERE visible_at <= %(now)s)"
                f" + {_LEASED_SQL}, "
                "(SELECT count(*) FROM outbox WHERE available_at <= %(now)s), "
                "(SELECT count(*) FROM schedules WHERE state = 'active' AND next_run_at <= %(now)s), "
                "greatest(0, extract(epoch FROM %(now)s - (SELECT min(next_run_at) FROM schedules "
                "WHERE state = 'active')))::float8"
            )
            with psycopg.connect(dsn, autocommit=True) as conn:
                time.sleep(warmup)
                # Steady state before the window: at start the materializer plans a whole
                # horizon (rate × 20 s) at once, a start-up transient and not the sustained
                # load. The window opens once no due instant is left unmaterialized (or at
                # the cap: a materializer that never catches up is measured behind).
                caught_up = warmup
                cap = time.monotonic() + CATCH_UP_CAP
                while float(_one(conn, _BEHIND_SQL, {"now": datetime.now(UTC)})[0]) > 0 and time.monotonic() < cap:
                    time.sleep(0.5)
                caught_up += CATCH_UP_CAP - max(0.0, cap - time.monotonic())
                log(f"{label}: the window opens {caught_up:.1f}s after the processes were ready")
                srv.db_time_ms(dsn, reset=True)
                start = datetime.now(UTC)
                depth0 = _one(conn, depth_sql, {"now": start})
                tables0 = _tables(conn)
                usage0 = _Usage.read(srv, cluster)
                waits: Counter[str] = Counter()
                behind = [float(depth0[3])]
                next_probe = time.monotonic() + 2.0
                while (datetime.now(UTC) - start).total_seconds() < window:
                    cluster.sample()
                    waits.update(srv.wait_events(dsn))
                    if time.monotonic() >= next_probe:  # every 2 s: a scan of the active schedules
                        behind.append(float(_one(conn, _BEHIND_SQL, {"now": datetime.now(UTC)})[0]))
                        next_probe = time.monotonic() + 2.0
                    time.sleep(0.5)
                behind_max = max(behind)
                end = datetime.now(UTC)
                db_ms = srv.db_time_ms(dsn)
                depth1 = _one(conn, depth_sql, {"now": end})
                tables1 = _tables(conn)
                heads = _head_probes(conn)
                cpu, server_cpu, by_label, busy = _Usage.read(srv, cluster).since(usage0)
                statements = srv.top_statements(dsn)
                time.sleep(3)  # let the last instants of the window start
                history = _history(conn)
                rows_lag = conn.execute(
                    # A running attempt has no row yet (its lease is its record): o.started_at.
                    # From the first instants on: the start-up's and the window's, one read.
                    "SELECT extract(epoch FROM coalesce(a.started_at, o.started_at, now()) - o.scheduled_for)::float8, "
                    "o.state, o.scheduled_for >= %(start)s "
                    f"FROM occurrences o LEFT JOIN {history} a ON a.occurrence_id = o.id AND a.attempt = 1 "
                    "WHERE o.scheduled_for >= %(first)s AND o.scheduled_for < %(end)s",
                    {"first": now, "start": start, "end": end},
                ).fetchall()
                found = [r for r in rows_lag if r[2]]
                lags = [float(r[0]) for r in found]
                states = Counter(str(r[1]) for r in found)
                startup = [float(r[0]) for r in rows_lag if not r[2]]
                (finished,) = _one(
                    conn,
                    f"SELECT count(*) FROM {history} WHERE finished_at >= %(start)s AND finished_at < %(end)s",
                    {"start": start, "end": end},
                )
            rss = cluster.peak_rss_mb()
    finally:
        _finish(srv, dsn, "sustained")
    span = (end - start).total_seconds()
    db_per_run = db_ms * 1000 / int(finished) if db_ms is not None and int(finished) else float("nan")
    log(f"{label}: {'direct dispatch' if _direct() else 'outbox → relay'}; database time per execution "
        f"{db_per_run:.0f} µs; load {os.getloadavg()[0]:.1f}")  # fmt: skip
    log(f"{label}: due rows (queued, outbox), schedules behind, oldest cursor age: "
        f"{tuple(depth0)} → {tuple(depth1)}; oldest cursor age every 2 s: "
        f"{' '.join(f'{b:.1f}' for b in behind)}")  # fmt: skip
    log(f"{label}: tables at the window's start: {tables0}")
    log(f"{label}: tables at the window's end: {tables1}")
    log(f"{label}: the claim's walks from the index heads at the window's end: {heads}")
    _log_usage(label, cpu, server_cpu, by_label, "in the window")
    _log_statements(label, statements, "in the window")
    log(f"{label}: active backends by wait event ({sum(waits.values()):,} sampled, every ~0.5 s): {_shares(waits, 8)}")
    # Instants due in the window, from the definitions (anchor + k·period).
    expected = sum(_fires_in(r.created_at, r.template.definition.expr, start, end) for r in rows)
    missing = expected - len(lags)
    log(f"{label}: window {span:.1f}s: {expected:,} instants due, {len(lags):,} materialized "
        f"({dict(states)})")  # fmt: skip
    lags += [(datetime.now(UTC) - end).total_seconds()] * max(0, missing)  # never materialized: late
    return Load(
        rate=rate, span=span, due=expected / span, missing=missing, executed=int(finished) / span,
        p50=percentile(lags, 0.5), p99=percentile(lags, 0.99),
        backlog=(int(depth0[0]) + int(depth0[1]), int(depth1[0]) + int(depth1[1])),
        behind=(float(depth0[3]), float(depth1[3]), max(behind_max, float(depth1[3]))),
        db_per_run=db_per_run, cpu=cpu, rss=rss, opened_after=caught_up,
        server_cpu=server_cpu,
        busy=busy, waits=waits,
        startup=(percentile(startup, 0.99), max(startup)) if startup else (float("nan"), float("nan")),
    )  # fmt: skip


def sustained(
    srv: Servers, rate: int, window: float, warmup: float, found: list[Load] | None = None, bare_db: float | None = None
) -> list[Row]:
    """Issue 18's sustained figures at ``rate`` (the run is appended to ``found``, for the
    knee search to start from); ``bare_db``: the bare-SQL drill's database time per row,
    the denominator of the database time's ratio."""
    label = f"sustained {rate:,}/s"
    r = _run_load(srv, rate, window, warmup, label)
    if found is not None:
        found.append(r)
    direct = " (direct dispatch)" if _direct() else ""
    workers = sum(v for k, v in r.cpu.items() if k.startswith("worker"))
    top = max(r.rss, key=lambda k: r.rss[k])
    return [
        row(f"{label}: window opened after (warm-up + start-up catch-up)", r.opened_after, "s",
            f"≤ {warmup + CATCH_UP_CAP:g} s (cap)", None),
        row(f"{label}: start-up lag p99 / max (instants due before the window)",
            f"{r.startup[0]:.2f} / {r.startup[1]:.2f} s", ""),
        row(f"{label}: due in window", r.due, "/s", f"≈ {rate:,}/s", None),
        row(f"{label}: not materialized by end+3s", r.missing, "", "= 0", r.missing <= 0),
        row(f"{label}: executions/s", r.executed, "/s", f"≥ {0.98 * r.due:,.0f}/s (98 % of due)",
            r.executed >= 0.98 * r.due),
        row(f"{label}: lag p50", r.p50, "s"),
        row(f"{label}: lag p99", r.p99, "s", "≤ 2 s", r.p99 <= 2.0),
        row(f"{label}: database time per execution{direct}", r.db_per_run, "µs", "≤ 80 µs", r.db_per_run <= 80,
            r.db_per_run / bare_db if bare_db else None),
        row(f"{label}: CPU per execution, all clockd processes", r.cpu_per_run, "µs", "≤ 60 µs",
            r.cpu_per_run <= 60),
        row(f"{label}: PostgreSQL server CPU per execution", r.server_cpu_per_run, "µs",
            "(the database's share of the cores)"),
        row(f"{label}: machine CPU busy in window", r.busy * 100, "%", f"of {os.cpu_count()} cores"),
        row(f"{label}: active backends waiting, top", _shares(r.waits, 3), ""),
        row(f"{label}: backlog start→end", f"{r.backlog[0]:,}→{r.backlog[1]:,} rows", "", "no growth", r.steady),
        row(f"{label}: materializer behind, max in window", r.behind[2], "s", "never (≤ 1 s)", r.never_behind),
        row(f"{label}: worker CPU", workers / r.span * 100, "%", "of one core, 2 workers"),
        row(f"{label}: materializer CPU", r.cpu["materializer"] / r.span * 100, "%", "of one core"),
        row(f"{label}: peak RSS ({top})", r.rss[top], "MB", "< 300 MB", r.rss[top] < 300),
    ]  # fmt: skip


# -- 2b. the knee --------------------------------------------------------------------------


KNEE_GOAL = 12_000  # executions/s (issue 18)


def knee(srv: Servers, first: Load | None, start_rate: int, steps: int, window: float, warmup: float) -> list[Row]:
    """The highest rate that still meets p99 ≤ 2 s (``Load.meets``): from the sustained
    run (``first``, or a run at ``start_rate``), up by 25 % while it holds (down by 25 %
    while it does not) until the two sides are bracketed, then bisection, ``steps`` runs
    in all (besides ``first``), to a resolution of 250/s; and one run at the goal when it
    lies between the highest rate that met it and the lowest that did not."""
    tried: dict[int, Load] = {}
    if first is not None:
        tried[first.rate] = first
    else:
        tried[start_rate] = _run_load(srv, start_rate, window, warmup, f"knee {start_rate:,}/s")
        steps -= 1

    def attempt(rate: int) -> None:
        tried[rate] = _run_load(srv, rate, window, warmup, f"knee {rate:,}/s")
        log(f"knee: {rate:,}/s → p99 {tried[rate].p99:.2f}s, {tried[rate].executed:,.0f}/s executed: "
            f"{'meets' if tried[rate].meets else 'misses'}")  # fmt: skip

    def bracket() -> tuple[int | None, int | None]:
        ok = [r for r, v in tried.items() if v.meets]
        bad = [r for r, v in tried.items() if not v.meets]
        return (max(ok) if ok else None), (min((r for r in bad if not ok or r > max(ok)), default=None))

    for _ in range(max(0, steps)):
        lo, hi = bracket()
        if lo is not None and hi is not None:
            if hi - lo <= 250:
                break
            rate = (lo + hi) // 2
        elif lo is not None:
            rate = int(lo * 1.25)
        else:
            assert hi is not None
            rate = max(100, int(hi * 0.75))
            if rate in tried:
                break
        attempt(rate)
    lo, hi = bracket()
    if lo is not None and hi is not None and lo < KNEE_GOAL < hi:
        # The bisection stopped with the goal between the two rates: one run at the goal
        # itself decides the verdict (left open otherwise, as in run AA2).
        attempt(KNEE_GOAL)
        lo, hi = bracket()
    # Conclusive only if a rate at the goal or above met it, or one at or below it missed.
    verdict: bool | None = None
    if (lo or 0) >= KNEE_GOAL:
        verdict = True
    elif hi is not None and hi <= KNEE_GOAL:
        verdict = False
    bound = "" if hi is not None else " (a lower bound: every rate tried met it)"
    runs = " ".join(f"{r:,}{'✓' if v.meets else '✗'}" for r, v in sorted(tried.items()))
    return [
        row(f"knee: highest rate with p99 ≤ 2 s{bound}", lo or 0, "/s", f"≥ {KNEE_GOAL:,}/s", verdict),
        row("knee: rates tried (p99 ≤ 2 s ✓/✗)", runs, "", f"{window:g} s windows"),
    ]


# -- 3. scale ------------------------------------------------------------------------------

ZONES = ("UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo", "Australia/Sydney", "Asia/Kolkata",
         "America/Los_Angeles", "Europe/London")  # fmt: skip


def _mix(rng: random.Random) -> tuple[str, str]:
    """(cron expression, zone): 10 % every minute; the rest hourly, daily, weekdays, monthly."""
    zone = rng.choice(ZONES)
    m, h, d = rng.randrange(60), rng.randrange(24), rng.randrange(1, 29)
    x = rng.random()
    if x < 0.10:
        return "* * * * *", zone
    if x < 0.45:
        return f"{m} * * * *", zone
    if x < 0.75:
        return f"{m} {h} * * *", zone
    if x < 0.90:
        return f"{m} {h} * * 1-5", zone
    return f"{m} {h} {d} * *", zone


def _scale_rows(n: int, now: datetime, rng: random.Random, created: datetime | None = None) -> list[bulk.Row]:
    """``n`` schedules of the mix, cursors at their first fire after ``now``, created at
    ``created`` (default ``now``)."""
    created = created or now
    templates: dict[tuple[str, str], tuple[bulk.Template, datetime]] = {}
    out = []
    for i in range(n):
        key = _mix(rng)
        found = templates.get(key)
        if found is None:
            t = bulk.Template.of(ScheduleDef(name="t", kind=ScheduleKind.CRON, expr=key[0], tz=key[1],
                                             target=NoopTarget()))  # fmt: skip
            first = compile_spec(ScheduleKind.CRON, key[0], key[1]).next_after(now)
            assert first is not None
            found = templates[key] = (t, first)
        sid = str(uuid.uuid4())
        out.append(bulk.Row(sid, f"s-{i:07d}", found[0], shard_of(sid, SHARDS), found[1], created))
    return out


def _bare_create_rate(dsn: str, n: int) -> float:
    """Schedules/s of the set-based SQL a batched ``apply_schedules`` could use: per batch
    of 5000, one ``INSERT … SELECT FROM unnest`` into ``schedules`` and one into
    ``schedule_versions``, one transaction, no clockd code (tenant ``bare``)."""
    now = datetime.now(UTC)
    rng = random.Random(7)
    rows = _scale_rows(n, now, rng)
    began = time.perf_counter()
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        for i in range(0, n, 5000):
            part = rows[i : i + 5000]
            ids = [r.schedule_id for r in part]
            names = [f"bare-{r.name}" for r in part]
            conn.execute(
                "INSERT INTO schedules (id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, "
                "shard, created_at, updated_at, spec) "
                "SELECT id, 'bare', name, 'cron', expr, tz, 'default', 'active', 1, nra, shard, %(now)s, %(now)s, "
                "spec::jsonb FROM unnest(%(ids)b::text[], %(names)b::text[], %(exprs)b::text[], %(tzs)b::text[], "
                "%(nras)b::timestamptz[], %(shards)b::int[], %(specs)b::text[]) "
                "AS u(id, name, expr, tz, nra, shard, spec)",
                {"now": now, "ids": ids, "names": names, "exprs": [r.template.definition.expr for r in part],
                 "tzs": [r.template.definition.tz for r in part], "nras": [r.next_run_at for r in part],
                 "shards": [r.shard for r in part], "specs": [r.template.spec for r in part]},
            )  # fmt: skip
            conn.execute(
                "INSERT INTO schedule_versions (schedule_id, version, state, valid_from, definition, reason) "
                "SELECT id, 1, 'active', %(now)s, doc::jsonb, 'created' "
                "FROM unnest(%(ids)b::text[], %(docs)b::text[]) AS u(id, doc)",
                {"now": now, "ids": ids, "docs": [r.template.document(nm) for r, nm in zip(part, names, strict=True)]},
            )
            conn.commit()
        conn.execute(
            "DELETE FROM schedule_versions WHERE schedule_id IN (SELECT id FROM schedules WHERE tenant = 'bare')"
        )
        conn.execute("DELETE FROM schedules WHERE tenant = 'bare'")
        conn.commit()
    return n / (time.perf_counter() - began)


def scale(srv: Servers, n: int, sample: int, run_for: float) -> list[Row]:
    dsn = srv.new_database("scale")
    cluster = Cluster(dsn, srv.etcd, "scale")
    label = f"scale {n // 1000}k"
    try:
        with cluster:
            cluster.migrate()
            rng = random.Random(42)
            now = datetime.now(UTC).replace(microsecond=0)
            # 1. the clockctl apply path on a sample (a fresh tenant, as a first apply).
            definitions = []
            for i in range(sample):
                expr, zone = _mix(rng)
                definitions.append(ScheduleDef(name=f"apply-{i:06d}", kind=ScheduleKind.CRON, expr=expr, tz=zone,
                                               target=NoopTarget()))  # fmt: skip
            apply_rate = sample / bulk.create_via_apply(dsn, definitions, "default", now)
            log(f"{label}: clockctl apply path (Ops.apply), {sample:,} schedules: {apply_rate:,.0f}/s")
            bare_rate = _bare_create_rate(dsn, min(sample, 20_000))
            # 2. the rest with COPY, created two hours ago: schedules that already exist when
            # the processes start, as in production (the leader's reconciler reads them).
            rows = _scale_rows(n - sample, now, rng, now - timedelta(hours=2))
            copied = bulk.copy_schedules(dsn, rows)
            copy_rate = len(rows) / copied if rows else float("nan")
            del rows
            with psycopg.connect(dsn, autocommit=True) as conn:
                (active,) = _one(conn, "SELECT count(*) FROM schedules WHERE state = 'active'")
            log(f"{label}: {active:,} active schedules ({n - sample:,} COPYed at {copy_rate:,.0f}/s)")
            rows_out = [
                row(f"{label}: active schedules", int(active), "", f"= {n:,}", int(active) == n),
                row(f"{label}: create via clockctl apply path", apply_rate, "/s", "≥ 20,000/s",
                    apply_rate >= 20_000, apply_rate / bare_rate),
                row(f"{label}: create, bare set-based SQL", bare_rate, "/s"),
                row(f"{label}: create, COPY (bulk load)", copy_rate, "/s"),
            ]  # fmt: skip
            # 3. all modes, default horizon; a process that dies is reported, the others
            # are still measured.
            ready = _start_all(cluster, horizon="2m")
            mat = cluster.procs["materializer"]
            with psycopg.connect(dsn, autocommit=True) as conn:
                (occ0,) = _one(conn, "SELECT count(*) FROM occurrences")
                cpu0 = mat.cpu()
                log(f"{label}: processes ready in {ready:.1f}s ({occ0:,} occurrences already); running "
                    f"{run_for:g}s")  # fmt: skip
                began = time.monotonic()
                while time.monotonic() - began < run_for:
                    cluster.sample(strict=False)
                    time.sleep(1.0)
                cpu = mat.cpu() - cpu0
                died = cluster.died()
                (occ1,) = _one(conn, "SELECT count(*) FROM occurrences")
                (due_left,) = _one(
                    conn,
                    "SELECT count(*) FROM schedules WHERE state = 'active' AND next_run_at <= %(t)s",
                    {"t": datetime.now(UTC) + timedelta(minutes=1)},
                )
                (executed,) = _one(conn, "SELECT count(*) FROM occurrences WHERE state = 'SUCCEEDED'")
                size = _size_mib(conn)
                (total_occ,) = _one(conn, "SELECT count(*) FROM occurrences")
            rss = cluster.peak_rss_mb()
        made = int(occ1) - int(occ0)
        log(f"{label}: {made:,} occurrences materialized in {run_for:g}s, {executed:,} executed; "
            f"{due_left:,} schedules due within 1 min not yet materialized")  # fmt: skip
        for name, why in died.items():
            log(f"{label}: {name} died: {why}")
            rows_out.append(row(f"{label}: {name} died", why.split(":", 1)[0], "", why.split(":", 1)[1][-60:], False))
        rows_out += [
            row(f"{label}: materializer CPU/occurrence", cpu / made * 1e6 if made else float("nan"), "µs"),
            row(f"{label}: occurrences materialized", made, "", f"in {run_for:g}s"),
            row(f"{label}: db size per 1M occurrences", size / int(total_occ) * 1e6 if total_occ else float("nan"),
                "MiB"),
        ]  # fmt: skip
        for name, mib in rss.items():
            rows_out.append(row(f"{label}: peak RSS {name}", mib, "MB", "< 300 MB", mib < 300))
        return rows_out
    finally:
        _finish(srv, dsn, "scale")


# -- 4. real commands ----------------------------------------------------------------------


def commands(srv: Servers, n: int) -> list[Row]:
    dsn = srv.new_database("commands")
    cluster = Cluster(dsn, srv.etcd, "commands")
    label = f"commands {n:,}"
    try:
        with cluster:
            cluster.migrate()
            ready = _start_all(cluster, horizon="2m", concurrency=16)
            now = datetime.now(UTC).replace(microsecond=0)
            due = now + timedelta(seconds=5)
            rows = _once_rows(n, due, now, "true", CommandTarget(argv=("/bin/true",)))
            _create(dsn, rows, now, n)
            log(f"{label}: processes ready in {ready:.1f}s; /bin/true x {n:,} due in "
                f"{(due - datetime.now(UTC)).total_seconds():.1f}s")  # fmt: skip
            with psycopg.connect(dsn, autocommit=True) as conn:
                _sleep_until(due)
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    cluster.sample()
                    (left,) = _one(
                        conn, "SELECT count(*) FROM occurrences WHERE state NOT IN ('SUCCEEDED', 'DEAD', 'CANCELED')"
                    )
                    if int(left) == 0:
                        break
                    time.sleep(0.25)
                lags = conn.execute(
                    "SELECT extract(epoch FROM a.started_at - o.scheduled_for)::float8, "
                    "extract(epoch FROM a.finished_at - o.scheduled_for)::float8, a.outcome "
                    f"FROM {_history(conn)} a JOIN occurrences o ON o.id = a.occurrence_id WHERE a.attempt = 1"
                ).fetchall()
        claim = [float(r[0]) for r in lags]
        done = [float(r[1]) for r in lags if r[1] is not None]
        ok = sum(1 for r in lags if r[2] == "succeeded")
        span = max(done, default=0.0)
        return [
            row(f"{label}: executions/s (2×16)", len(done) / span if span else float("nan"), "/s"),
            row(f"{label}: lag p50", percentile(claim, 0.5), "s"),
            row(f"{label}: lag p99", percentile(claim, 0.99), "s"),
            row(f"{label}: succeeded", ok, "", f"= {n:,}", ok == n),
        ]
    finally:
        _finish(srv, dsn, "commands")


# -- the suite -----------------------------------------------------------------------------


def _guard(name: str, fn: Callable[[], list[Row]]) -> list[Row]:
    """A scenario that fails is reported as a failed row; the others still run."""
    began = time.monotonic()
    try:
        rows = fn()
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return [row(f"{name}: error", type(exc).__name__, "", str(exc).splitlines()[0][:60] if str(exc) else "",
                    False)]  # fmt: skip
    log(f"{name} took {time.monotonic() - began:.1f}s")
    return rows


def run(quick: bool) -> list[Row]:
    factor = float(os.environ.get("BENCH_SCALE") or 1.0)
    only = {s for s in (os.environ.get("BENCH_SCENARIOS") or "").split(",") if s}
    sizes = Sizes.of(quick, factor)
    rows: list[Row] = []
    with servers() as srv:
        log(f"servers: {srv.describe()}; sizes: {sizes}")
        plan: list[tuple[str, Callable[[], list[Row]]]] = []
        bare_db: list[float] = []  # database µs per row of each bare drill, for the sustained ratio
        for n in sizes.drills:
            # Each drill with the bare-SQL drill of its size, run just before it.
            bares: list[BareResult] = []

            def do_bare(n: int = n, bares: list[BareResult] = bares) -> list[Row]:
                result, db_per_row, out = bare(srv, n)
                bares.append(result)
                if db_per_row == db_per_row:
                    bare_db.append(db_per_row)
                return out

            def do_drill(n: int = n, bares: list[BareResult] = bares) -> list[Row]:
                return drill(srv, n, quick, bares[0] if bares else None)

            if not only or "drill" in only or "bare" in only:
                plan.append(("bare", do_bare))
            if not only or "drill" in only:
                plan.append(("drill", do_drill))
        loads: list[Load] = []
        plan += [
            ("sustained", lambda: sustained(srv, sizes.sustained_rate, sizes.sustained_window,
                                            sizes.sustained_warmup, loads, min(bare_db, default=None))),
            ("knee", lambda: knee(srv, loads[0] if loads else None, sizes.sustained_rate, sizes.knee_steps,
                                  sizes.knee_window, sizes.knee_warmup)),
            ("scale", lambda: scale(srv, sizes.scale, sizes.scale_sample, sizes.scale_run)),
            ("commands", lambda: commands(srv, sizes.commands)),
        ]  # fmt: skip
        for name, fn in plan:
            if only and name not in only and not (name == "bare" and "drill" in only):
                continue
            rows += _guard(name, fn)
    return rows


if __name__ == "__main__":
    for r in run("--quick" in sys.argv):
        sys.stdout.write(f"{r}\n")
