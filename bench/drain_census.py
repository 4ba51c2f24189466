"""Where a drain's database work goes, per execution, and how it grows with the queue
(issue 18: "where the time goes, to be measured rather than assumed").

For each size N: a fresh database on a durable PostgreSQL 15 with ``pg_stat_statements``
(``bench.servers``), N no-op occurrences of N distinct schedules (a top-of-hour burst:
every claim reads its schedules' definitions) staged into the queue as
``bench.worker`` stages them, then drained by one ``Worker`` or several at once
(``bench.worker.drain``).
Around the drain only, the server's own counters are read: per index, the scans started
(``idx_scan``: each is one descent from the root) and the buffers touched; per table,
the heap buffers and row writes (HOT and not); per statement, its execution and
planning time, its buffers and its WAL. Every figure is divided by the executions.
Nothing here is timed against a goal: it says which statement and which index a
drain's time is in, and which of them grow with the queue (the 500,000 drill spends
about twice the server CPU per execution of the 20,000 one).

    python -m bench.drain_census [--sizes 8000,40000,200000] [--workers 1,2]

With ``--workers 1,2`` each size is drained by one worker, then by two at once (each its
own store and sessions, in this one process): what two claimers cost each other.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping
from typing import Any

Row = tuple[float, ...]
Counters = dict[str, Row]

_INDEXES = """
SELECT s.relname || '.' || s.indexrelname, s.idx_scan, coalesce(io.idx_blks_hit, 0) + coalesce(io.idx_blks_read, 0)
FROM pg_stat_user_indexes AS s JOIN pg_statio_user_indexes AS io USING (indexrelid)
"""
_TABLES = """
SELECT s.relname, coalesce(io.heap_blks_hit, 0) + coalesce(io.heap_blks_read, 0),
       s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del
FROM pg_stat_user_tables AS s JOIN pg_statio_user_tables AS io USING (relid)
"""
# The statement's name: the store sends each block as `/* name */` and its code.
_STATEMENTS = """
SELECT substring(query FROM '^/\\* ([a-z_]+) \\*/'),
       sum(total_exec_time), sum(total_plan_time), sum(shared_blks_hit + shared_blks_read),
       sum(wal_bytes)
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query LIKE '/* %'
GROUP BY 1
"""


def _read(conn: Any, query: str) -> Counters:
    return {str(row[0]): tuple(float(v or 0) for v in row[1:]) for row in conn.execute(query)}


def _delta(after: Mapping[str, Row], before: Mapping[str, Row], per: float) -> dict[str, Row]:
    out: dict[str, Row] = {}
    for key, values in after.items():
        old = before.get(key, (0.0,) * len(values))
        moved = tuple((a - b) / per for a, b in zip(values, old, strict=True))
        if any(moved):
            out[key] = moved
    return out


async def _sessions_gone(conn: Any, deadline: float = 30.0) -> None:
    """Wait until no other session is connected to this database (then every one of them
    has flushed its counters), and start a fresh statistics snapshot."""
    give_up = time.monotonic() + deadline
    query = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    while conn.execute(query).fetchone()[0]:
        if time.monotonic() > give_up:
            raise RuntimeError(f"bench.drain_census: sessions still connected after {deadline:.0f} s")
        await asyncio.sleep(0.05)
    conn.execute("SELECT pg_stat_clear_snapshot()")


async def census(dsn: str, count: int, connect: Any, workers: int = 1) -> dict[str, Any]:
    """One size: stage ``count`` occurrences of as many schedules, drain them with
    ``workers`` workers at once (each its own store, so its own sessions), and return the
    counters' change per execution (and the drain's rate)."""

    from bench.servers import planning_tracked
    from bench.worker import drain, stage
    from clockd.store.postgres import PostgresStore

    with connect(dsn) as conn:  # planning time too, in the store's sessions (opened after this)
        conn.autocommit = True
        for statement in planning_tracked(dsn):
            conn.execute(statement)
    store = PostgresStore(dsn)
    await store.migrate()
    await store.open()
    try:
        total = await stage(store, count, count)
    finally:
        await store.close()
    with connect(dsn) as conn:
        conn.autocommit = True
        conn.execute("ANALYZE")
        conn.execute("SELECT pg_stat_statements_reset()")
        # A session's counters reach the views when it exits at the latest: read them once
        # the store's sessions are gone, before and after the drain.
        await _sessions_gone(conn)
        before = [_read(conn, q) for q in (_INDEXES, _TABLES, _STATEMENTS)]
        stores = [PostgresStore(dsn) for _ in range(workers)]
        try:
            for store in stores:
                await store.open()
            wall = await drain(stores, total)
        finally:
            for store in stores:
                await store.close()
        await _sessions_gone(conn)
        after = [_read(conn, q) for q in (_INDEXES, _TABLES, _STATEMENTS)]
    indexes, tables, statements = (_delta(a, b, total) for a, b in zip(after, before, strict=True))
    return {"executions": total, "rate": total / wall, "indexes": indexes, "tables": tables,
            "statements": statements}  # fmt: skip


def _report(sizes: list[str], found: list[dict[str, Any]]) -> None:
    """One table each for the statements, the indexes and the tables; a column per run
    (size × workers)."""
    out = sys.stdout
    head = " | ".join(sizes)
    rates = " | ".join(f"{r['rate']:,.0f}" for r in found)
    out.write(f"\ndrained at (executions/s): {rates}\n")
    out.write(f"\n| statement: µs (execution + planning), buffers, WAL bytes per execution | {head} |\n")
    out.write("|---|" + "---|" * len(sizes) + "\n")
    names = sorted(
        {k for r in found for k in r["statements"]}, key=lambda k: -found[-1]["statements"].get(k, (0.0,))[0]
    )
    for name in names:
        cells = []
        for r in found:
            ex, plan, blocks, wal = r["statements"].get(name, (0.0,) * 4)
            cells.append(f"{(ex + plan) * 1000:.1f} ({plan * 1000:.1f} planning), {blocks:.1f}, {wal:.0f}")
        if max(r["statements"].get(name, (0.0,))[0] for r in found) * 1000 >= 0.05:
            out.write(f"| {name} | " + " | ".join(cells) + " |\n")
    out.write(f"\n| index: descents (scans started), buffers per execution | {head} |\n")
    out.write("|---|" + "---|" * len(sizes) + "\n")
    for name in sorted({k for r in found for k in r["indexes"]}):
        values = [r["indexes"].get(name, (0.0, 0.0)) for r in found]
        if max(v[1] for v in values) >= 0.05:
            out.write(f"| {name} | " + " | ".join(f"{v[0]:.2f}, {v[1]:.2f}" for v in values) + " |\n")
    out.write(f"\n| table: heap buffers; rows inserted, updated (HOT), deleted per execution | {head} |\n")
    out.write("|---|" + "---|" * len(sizes) + "\n")
    for name in sorted({k for r in found for k in r["tables"]}):
        values = [r["tables"].get(name, (0.0,) * 5) for r in found]
        if max(v[0] for v in values) >= 0.05:
            out.write(
                f"| {name} | "
                + " | ".join(f"{v[0]:.2f}; {v[1]:.2f}, {v[2]:.2f} ({v[3]:.2f}), {v[4]:.2f}" for v in values)
                + " |\n"
            )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_census", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="8000,40000,200000", help="executions per drain, comma-separated")
    parser.add_argument(
        "--workers", default="1", help="workers draining at once, comma-separated (each size drained with each)"
    )
    args = parser.parse_args()
    runs: list[tuple[int, int]] = []
    for option, text in (("--sizes", args.sizes), ("--workers", args.workers)):
        try:
            numbers = [int(item) for item in text.split(",")]
        except ValueError:
            parser.error(f"{option} takes whole numbers separated by commas, not {text!r}")
        if min(numbers) < 1:
            parser.error(f"{option} takes numbers of at least 1, not {text!r}")
        runs = [(n, 1) for n in numbers] if option == "--sizes" else [(n, k) for n, _ in runs for k in numbers]
    from bench.servers import log, servers

    found: list[dict[str, Any]] = []
    with servers() as srv:
        for size, workers in runs:
            dsn = srv.new_database("census")
            try:
                found.append(asyncio.run(census(dsn, size, srv.connect, workers)))
            finally:
                srv.drop_database(dsn)
            log(f"census {size:,} × {workers} workers: drained at {found[-1]['rate']:,.0f}/s")
    _report([f"{size:,} × {workers}" for size, workers in runs], found)


if __name__ == "__main__":
    main()
