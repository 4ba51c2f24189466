"""The bare-SQL limit: the claim/complete pattern with no clockd code, on the same database.

N rows are pre-staged in a queue table, all visible at the same instant T. Then two
processes (``--processes``) claim them in batches of 1000 with

    UPDATE q SET state = 'running', claimed_at = $now, … WHERE id = ANY(ARRAY(
        SELECT id FROM q WHERE queue = $q AND state = 'ready' AND visible_at <= $now
        ORDER BY visible_at, id LIMIT 1000 FOR UPDATE SKIP LOCKED)) RETURNING id

and complete each batch in one statement (the rows move to a history table, as
clockd's dispatch rows are deleted and their history kept elsewhere). Every statement
is its own durable transaction, sessions use ``plan_cache_mode = force_custom_plan``
and ``jit = off`` as clockd's do, and the claim lag is measured as clockd's is: the
claimer's clock read just before the claim statement (``claimed_at``) minus the
instant the row was due. Reports claim lag p50/p99/max, completion p99 and rows/s.

Run alone: ``python -m bench.baseline DSN [N]``; the distributed suite runs it first
on its own database and divides its figures by these.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from bench.cluster import percentile

ROOT = Path(__file__).resolve().parent.parent
OPTIONS = "-c plan_cache_mode=force_custom_plan -c jit=off -c TimeZone=UTC"

SCHEMA = """
CREATE TABLE bench_queue (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue       text COLLATE "C" NOT NULL,
    payload     text COLLATE "C" NOT NULL,
    visible_at  timestamptz NOT NULL,
    state       text NOT NULL DEFAULT 'ready',
    claimed_at  timestamptz,
    lease_until timestamptz,
    worker      text
);
CREATE INDEX bench_queue_ready ON bench_queue (queue, visible_at, id) WHERE state = 'ready';
CREATE TABLE bench_done (
    id          bigint PRIMARY KEY,
    payload     text COLLATE "C" NOT NULL,
    visible_at  timestamptz NOT NULL,
    claimed_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    worker      text NOT NULL
);
"""

STAGE = """
INSERT INTO bench_queue (queue, payload, visible_at)
SELECT 'default', md5(i::text) || '-' || i, %(due)s FROM generate_series(1, %(n)s) AS i
"""

CLAIM = """
UPDATE bench_queue SET state = 'running', claimed_at = %(now)s, lease_until = %(lease_until)s,
                       worker = %(worker)s
WHERE id = ANY(ARRAY(
    SELECT id FROM bench_queue
    WHERE queue = 'default' AND state = 'ready' AND visible_at <= %(now)s
    ORDER BY visible_at, id LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED))
RETURNING id
"""

COMPLETE = """
WITH done AS (
    DELETE FROM bench_queue WHERE id = ANY(%(ids)b::bigint[])
    RETURNING id, payload, visible_at, claimed_at, worker
)
INSERT INTO bench_done (id, payload, visible_at, claimed_at, finished_at, worker)
SELECT id, payload, visible_at, claimed_at, clock_timestamp(), worker FROM done
"""

LEFT = "SELECT EXISTS (SELECT 1 FROM bench_queue)"


@dataclass(frozen=True, slots=True)
class BareResult:
    n: int
    stage_rate: float  # rows/s of the INSERT … SELECT that staged the queue
    lag_p50: float
    lag_p99: float
    lag_max: float
    done_p99: float  # finished_at − due, p99
    rate: float  # rows claimed and completed per second, from T to the last completion
    done: int


def connect(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(dsn, autocommit=True, options=OPTIONS, connect_timeout=10)


def worker(dsn: str, name: str, due: datetime, batch: int) -> int:
    """Claim and complete until the queue is empty (after ``due``). Returns rows done."""
    done = 0
    with connect(dsn) as conn:
        while True:
            now = datetime.now(UTC)
            ids = [
                r[0]
                for r in conn.execute(
                    CLAIM,
                    {"now": now, "lease_until": now + timedelta(seconds=30), "worker": name, "batch": batch},
                ).fetchall()
            ]
            if ids:
                conn.execute(COMPLETE, {"ids": ids})
                done += len(ids)
                continue
            if now >= due:
                row = conn.execute(LEFT).fetchone()
                if row is None or not row[0]:
                    return done
            time.sleep(0.01)


def drill(dsn: str, n: int, *, processes: int = 2, batch: int = 1000) -> BareResult:
    """Stage ``n`` rows due at one instant, claim/complete them with ``processes``
    processes; the database must be empty (the tables are created here)."""
    with connect(dsn) as conn:
        conn.execute(SCHEMA)
        # Rows are staged due at T, chosen far enough ahead that staging and the
        # workers' start finish before it (else staged again with a larger margin).
        margin = 2.5 + n / 80_000
        for _ in range(4):
            due = datetime.now(UTC) + timedelta(seconds=margin)
            began = time.perf_counter()
            conn.execute(STAGE, {"n": n, "due": due})
            stage_rate = n / (time.perf_counter() - began)
            conn.execute("ANALYZE bench_queue")
            if datetime.now(UTC) < due - timedelta(seconds=1):
                break
            conn.execute("TRUNCATE bench_queue")
            margin *= 2
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.baseline", "--worker", dsn, due.isoformat(), str(batch), f"bare-{i}"],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )
        for i in range(processes)
    ]
    try:
        for p in procs:
            p.wait(300 + n / 1000)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    with connect(dsn) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM claimed_at - visible_at)::float8, "
            "extract(epoch FROM finished_at - visible_at)::float8 FROM bench_done"
        ).fetchall()
    lags = [float(r[0]) for r in rows]  # type: ignore[arg-type]
    finished = [float(r[1]) for r in rows]  # type: ignore[arg-type]
    span = max(finished, default=0.0)
    return BareResult(
        n=n,
        stage_rate=stage_rate,
        lag_p50=percentile(lags, 0.50),
        lag_p99=percentile(lags, 0.99),
        lag_max=max(lags, default=float("nan")),
        done_p99=percentile(finished, 0.99),
        rate=len(rows) / span if span > 0 else float("nan"),
        done=len(rows),
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.baseline", description=__doc__)
    parser.add_argument("--worker", nargs=4, metavar=("DSN", "DUE", "BATCH", "NAME"), help=argparse.SUPPRESS)
    parser.add_argument("dsn", nargs="?", help="an empty database")
    parser.add_argument("n", nargs="?", type=int, default=100_000)
    args = parser.parse_args()
    if args.worker:
        dsn, due, batch, name = args.worker
        worker(dsn, name, datetime.fromisoformat(due), int(batch))
        return 0
    if not args.dsn:
        parser.error("a DSN is needed")
    sys.stdout.write(f"{drill(args.dsn, args.n)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
