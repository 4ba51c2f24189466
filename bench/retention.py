"""Retention on PostgreSQL: what retiring a million occurrences costs (issue 18, "History
that does not slow the hot path").

At 200 M occurrences a day, a million arrive every 432 s; retention that is to stay out
of the hot path's way gets a small share of that. The goal printed is the issue's:
retire a million in well under 0.43 s of database time (0.1 % of the day's wall time).

On a fresh database of a durable PostgreSQL (``bench.servers``), N terminal occurrences
(SUCCEEDED, one attempt each; 1,000,000, ``--quick`` 20,000), spread over ten days of
``scheduled_for``, are loaded with set-based inserts, then:

* **row delete (today)**: ``Store.prune`` as the leader calls it (``prune_batch`` 10,000
  per transaction) until nothing is left: wall time, database time (pg_stat_statements,
  the ``prune`` statement) and WAL written (``pg_current_wal_lsn``), per million, and
  the same of the ``VACUUM`` that gives the deleted rows' space back;
* **partition retirement (design probe)**: the same rows copied into a prototype of
  ``occurrences`` and ``attempts`` range-partitioned on the occurrence id, which since
  schema 0016 leads with its instant's Unix milliseconds (``clockd.core.ids``), so a
  range of ids is a range of time: weekly partitions over 35 days and a DEFAULT one
  (``BENCH_RETENTION_WIDTH=1``: daily). The primary keys stay ``(id)`` and
  ``(occurrence_id, attempt)`` and no statement needs another column: the partition key
  is the key every hot statement already looks up by. Retirement is a scan that finds
  every row of a partition terminal, then ``DETACH PARTITION`` and ``DROP TABLE`` of
  each partition older than the cutoff, the same three figures per million for each;
* **the hot path's lookup by id**: the finish's ``UPDATE … WHERE id = $1`` (a HOT
  update of 2,000 rows a round, one statement per row and, the hot path's shape, one
  per batch of 100 ids in an array; rounds interleaved) on the flat table and on the
  partitioned prototype (with the generic plan a prepared statement gets, which prunes
  at executor start, and with custom plans, which prune while planning): database and
  client wall time per occurrence (the "× bare" column of these rows: the ratio to the
  flat table). Until schema 0016 the ids were uuid5s, the prototype was partitioned on
  ``scheduled_for``, and the hot path would have had to carry the instant beside every
  id (docs/store.md, "Retention and partitioned history").

The prototype is not the schema: it measures what a partitioned schema would buy and
cost (docs/store.md, "Retention and partitioned history").
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.cluster import row
from bench.servers import Servers, log, servers
from clockd.core.ids import new_schedule_id
from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.store import NewSchedule
from clockd.store.postgres.store import PostgresStore, Q

Row = dict[str, Any]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAYS = 10  # the loaded rows' span of scheduled_for
# A 30-day retention window and the days ahead, in partitions of WIDTH days (7: weekly;
# BENCH_RETENTION_WIDTH=1 measures daily ones).
WIDTH = int(os.environ.get("BENCH_RETENTION_WIDTH", "7"))
PARTITIONS = -(-32 // WIDTH)
GOAL_DB_S = 0.43  # database seconds per million retired (issue 18)
LOOKUPS = 2_000  # rows updated per variant and round
ROUNDS = 3
TERMINAL = "'SUCCEEDED', 'DEAD', 'MISSED', 'SKIPPED_OVERLAP', 'CANCELED'"


def _scalar(conn: psycopg.Connection[tuple[Any, ...]], query: str, params: dict[str, Any] | None = None) -> Any:
    found = conn.execute(query, params).fetchone()
    return None if found is None else found[0]


def _wal(conn: psycopg.Connection[tuple[Any, ...]]) -> str:
    return str(_scalar(conn, "SELECT pg_current_wal_lsn()::text /* bench */"))


def _wal_since(conn: psycopg.Connection[tuple[Any, ...]], lsn: str) -> int:
    return int(_scalar(conn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %(lsn)s::pg_lsn) /* bench */", {"lsn": lsn}))


def _stat_ms(conn: psycopg.Connection[tuple[Any, ...]], like: str) -> float:
    """Execution time (ms) so far of this database's statements ``LIKE like``."""
    return float(
        _scalar(
            conn,
            "SELECT coalesce(sum(total_exec_time), 0) FROM pg_stat_statements /* bench */ "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND query NOT LIKE '%%/* bench */%%' AND query LIKE %(like)s",
            {"like": like},
        )
    )


async def _schedule(dsn: str) -> str:
    """Migrate, and create the one schedule the loaded occurrences belong to."""
    store = PostgresStore(dsn, max_size=2)
    await store.migrate()
    await store.open()
    try:
        definition = ScheduleDef(name="history", kind=ScheduleKind.CRON, expr="* * * * *", tz="UTC",
                                 target=NoopTarget())  # fmt: skip
        created = await store.apply_schedules([NewSchedule(new_schedule_id(), definition, 0, T0)], [], T0)
        return created.created[0].id
    finally:
        await store.close()


# The id ``clockd.core.ids.occurrence_id`` gives, built in SQL: the instant's Unix
# milliseconds in 12 hex digits (the schema's ``clockd_id_bound``, schema 0017), the version
# digit 8, then hashed digits (md5 here).
_ID_SQL = (
    "(SELECT clockd_id_bound({at}) || '-8' || substr(h, 1, 3) || '-a' || substr(h, 4, 3) || '-' || substr(h, 7, 12) "
    "FROM md5({key}) AS h)"
)


def _load(conn: psycopg.Connection[tuple[Any, ...]], schedule_id: str, n: int) -> None:
    """N terminal occurrences with one attempt each, set-based, ``scheduled_for`` spread
    evenly over DAYS days from T0 (ids as the real ones: time-ordered text, unique)."""
    step = timedelta(days=DAYS) / n
    conn.execute(
        "INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for, available_at, "
        "state, attempts, max_attempts, enqueued_at, started_at, finished_at, exit_code) "
        f"SELECT {_ID_SQL.format(at='at', key='g::text')}, %(sid)s, 1, 'default', 'default', at, at, "
        "'SUCCEEDED', 1, 3, at, at, at + interval '1 s', 0 "
        "FROM generate_series(1, %(n)s) AS g, LATERAL (SELECT %(t0)s + g * %(step)s AS at) AS instant",
        {"sid": schedule_id, "t0": T0, "step": step, "n": n},
    )
    conn.execute(
        "INSERT INTO attempts (occurrence_id, attempt, lease_token, worker_id, started_at, finished_at, outcome, "
        "exit_code) SELECT id, 1, md5(id), 'w1', started_at, finished_at, 'succeeded', 0 FROM occurrences"
    )
    conn.execute("VACUUM ANALYZE occurrences")
    conn.execute("VACUUM ANALYZE attempts")


def _storage(table: str) -> str:
    return "WITH (fillfactor = 50)" if table == "p_occurrences" else ""


def _prototype(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    """Copies of occurrences and attempts partitioned on the occurrence id (a time key
    since schema 0016) with the same keys, indexes and storage, holding the same rows."""
    conn.execute(
        "CREATE TABLE p_occurrences (LIKE occurrences INCLUDING DEFAULTS INCLUDING GENERATED) PARTITION BY RANGE (id)"
    )
    # The schema's keys and indexes: the primary key holds the partition key as it is.
    for index in (
        "ALTER TABLE p_occurrences ADD PRIMARY KEY (id)",
        "CREATE INDEX ON p_occurrences (schedule_id, scheduled_for DESC)",
        "CREATE INDEX ON p_occurrences (scheduled_for DESC)",
        "CREATE INDEX ON p_occurrences (dead_at, id) WHERE dead_at IS NOT NULL",
        "CREATE INDEX ON p_occurrences (not_run_at) WHERE not_run_at IS NOT NULL",
    ):
        conn.execute(index)
    conn.execute("CREATE TABLE p_attempts (LIKE attempts INCLUDING DEFAULTS) PARTITION BY RANGE (occurrence_id)")
    conn.execute("ALTER TABLE p_attempts ADD PRIMARY KEY (occurrence_id, attempt)")
    for day in range(PARTITIONS):
        lo, hi = T0 + timedelta(days=day * WIDTH), T0 + timedelta(days=(day + 1) * WIDTH)
        for table in ("p_occurrences", "p_attempts"):
            # fillfactor as the flat table's (schema 0004): room for HOT updates.
            conn.execute(
                f"CREATE TABLE {table}_{day:02d} PARTITION OF {table} "
                f"FOR VALUES FROM (clockd_id_bound('{lo.isoformat()}')) TO (clockd_id_bound('{hi.isoformat()}')) "
                f"{_storage(table)}"
            )
    for table in ("p_occurrences", "p_attempts"):
        conn.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT {_storage(table)}")
    columns = ", ".join(
        str(name)
        for (name,) in conn.execute(
            "SELECT column_name FROM information_schema.columns /* bench */ "
            "WHERE table_name = 'occurrences' AND is_generated = 'NEVER' ORDER BY ordinal_position"
        )
    )
    conn.execute(f"INSERT INTO p_occurrences ({columns}) SELECT {columns} FROM occurrences")
    conn.execute("INSERT INTO p_attempts SELECT * FROM attempts")
    conn.execute("VACUUM ANALYZE p_occurrences")
    conn.execute("VACUUM ANALYZE p_attempts")


CUSTOM = "partitioned, custom plans"
# Each marked, so that the figures' LIKE finds each one's text.
UPDATES = {
    # The flat table: the loaded rows lie in the DEFAULT partition (older than every week
    # the schema made), a plain table with the schema's indexes, updated as itself.
    "flat": "UPDATE occurrences_default SET exit_code = 0 WHERE id = %(id)s /* probe flat */",
    "partitioned": "UPDATE p_occurrences SET exit_code = 0 WHERE id = %(id)s /* probe by id */",
    # A generic plan prunes at executor start but, on PostgreSQL 15, still locks every
    # partition and index in it; a custom plan prunes while planning, planning each time.
    # (pg_stat_statements keys a statement by its parse tree, comments left out: the
    # condition written otherwise makes this one a statement of its own.)
    CUSTOM: "UPDATE p_occurrences SET exit_code = 0 WHERE %(id)s = id /* probe custom */",
    # The hot path's own shape (finish_occurrences, the claim's joins): one statement
    # for a batch, the ids (and instants) as arrays.
    "flat, batches of 100": (
        "UPDATE occurrences_default AS o SET exit_code = 0 FROM unnest(%(ids)s::text[]) AS c(id) "
        "WHERE o.id = c.id /* probe flat batch */"
    ),
    "partitioned, batches of 100": (
        "UPDATE p_occurrences AS o SET exit_code = 0 FROM unnest(%(ids)s::text[]) AS c(id) "
        "WHERE o.id = c.id /* probe id batch */"
    ),
}
BATCH = 100


def _lookups(dsn: str, servers_: Servers, n: int) -> dict[str, tuple[float, float]]:
    """(µs of database time, µs of wall time at the client) per occurrence updated, per
    variant, rounds interleaved. The wall time holds what the database time leaves out:
    planning (pg_stat_statements counts execution only) and the round trip."""
    with servers_.connect(dsn) as conn:
        keys = conn.execute(
            "SELECT id FROM (SELECT id, row_number() OVER (ORDER BY id) AS k FROM occurrences) AS o "
            "WHERE k %% %(every)s = 0 LIMIT %(n)s /* bench */",
            {"every": max(1, n // LOOKUPS), "n": LOOKUPS},
        ).fetchall()
        spent = dict.fromkeys(UPDATES, 0.0)
        calls = dict.fromkeys(UPDATES, 0)
        wall = dict.fromkeys(UPDATES, 0.0)
        for round_ in range(ROUNDS):
            order = list(UPDATES) if round_ % 2 == 0 else list(reversed(UPDATES))
            for name in order:
                marker = "%" + UPDATES[name].rsplit("/*", 1)[1]
                before = _stat_ms(conn, marker)
                began = time.perf_counter()
                with conn.transaction():
                    if name == CUSTOM:
                        conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
                    if name.endswith(f"batches of {BATCH}"):
                        for k in range(0, len(keys), BATCH):
                            chunk = keys[k : k + BATCH]
                            conn.execute(UPDATES[name], {"ids": [i for (i,) in chunk]})
                    else:
                        for (occurrence_id,) in keys:
                            conn.execute(UPDATES[name], {"id": occurrence_id})
                wall[name] += time.perf_counter() - began
                spent[name] += _stat_ms(conn, marker) - before
                calls[name] += len(keys)
    return {name: (1000 * spent[name] / calls[name], 1e6 * wall[name] / calls[name]) for name in UPDATES}


def _prune(dsn: str, srv: Servers) -> int:
    """The row delete alone: ``prune``'s statement, 10,000 a transaction, until none is
    left. (``Store.prune`` would first make the weeks around its ``now`` and move the loaded
    rows of their ranges out of the DEFAULT partition, where they lie as the flat table's
    rows did: the loaded instants are older than any week the schema has made.)"""
    total, before = 0, T0 + timedelta(days=DAYS + 1)
    with srv.connect(dsn) as conn:
        while pruned := len(conn.execute(Q["prune"], {"before": before, "limit": 10_000}).fetchall()):
            total += pruned
    return total


def _vacuum(conn: psycopg.Connection[tuple[Any, ...]], deleted: int) -> int:
    conn.execute("VACUUM occurrences")
    conn.execute("VACUUM attempts")
    return deleted


def _retired_parts(table: str) -> list[str]:
    """The partitions of ``table`` holding the loaded rows (all before the cutoff)."""
    return [f"{table}_{k:02d}" for k in range(DAYS // WIDTH + 1)]


def _check_partitions(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
    """What retention must know before it drops a partition: every row terminal. No
    index names state (the finish stays HOT), so here it is a scan of each partition: an
    upper bound on the check. Returns the occurrences the partitions hold."""
    retired = 0
    for part in _retired_parts("p_occurrences"):
        live, count = conn.execute(
            f"SELECT count(*) FILTER (WHERE state NOT IN ({TERMINAL})), count(*) FROM {part}"
        ).fetchone() or (0, 0)
        if live:
            raise RuntimeError(f"{part} holds {live} live occurrences")
        retired += int(count)
    return retired


def _drop_partitions(conn: psycopg.Connection[tuple[Any, ...]], retired: int) -> int:
    """Detach and drop the checked partitions, attempts' and occurrences'."""
    for table in ("p_attempts", "p_occurrences"):
        for part in _retired_parts(table):
            conn.execute(f"ALTER TABLE {table} DETACH PARTITION {part}")
            conn.execute(f"DROP TABLE {part}")
    return retired


def _measure(srv: Servers, dsn: str, label: str, act: Any) -> tuple[int, float, float, int]:
    """(rows, wall s, database s, WAL bytes) of ``act()``."""
    with srv.connect(dsn) as conn:
        lsn, db_ms = _wal(conn), _stat_ms(conn, "%")
        began = time.perf_counter()
        count = int(act())
        wall = time.perf_counter() - began
        spent = (_stat_ms(conn, "%") - db_ms) / 1000
        wal = _wal_since(conn, lsn)
    log(
        f"retention, {label}: {count:,} occurrences in {wall:.2f} s wall, {spent:.2f} s database, "
        f"{wal / 1e6:.0f} MB WAL"
    )
    return count, wall, spent, wal


def run(quick: bool) -> list[Row]:
    n = 20_000 if quick else 1_000_000
    rows: list[Row] = []
    with servers() as srv:
        dsn = srv.new_database("retention")
        try:
            schedule_id = asyncio.run(_schedule(dsn))
            with srv.connect(dsn) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                began = time.perf_counter()
                _load(conn, schedule_id, n)
                loaded = time.perf_counter()
                _prototype(conn)
                copied = time.perf_counter() - loaded
                log(f"retention: {n:,} occurrences and attempts loaded in {loaded - began:.1f} s, "
                    f"copied into the partitioned prototype in {copied:.1f} s")  # fmt: skip
            per_update = _lookups(dsn, srv, n)
            for name, (us, wall_us) in per_update.items():
                log(f"hot path probe: update by id, {name}: {us:.1f} µs database, {wall_us:.1f} µs wall per occurrence")
            deleted = _measure(srv, dsn, "row delete (prune)", lambda: _prune(dsn, srv))
            # The deleted rows' space comes back only by vacuum (autovacuum would do it).
            with srv.connect(dsn) as conn:
                vacuumed = _measure(srv, dsn, "vacuum after the delete", lambda: _vacuum(conn, deleted[0]))
            with srv.connect(dsn) as conn:
                checked = _measure(srv, dsn, "live-row scan (prototype)", lambda: _check_partitions(conn))
                dropped = _measure(srv, dsn, "partition drop (prototype)", lambda: _drop_partitions(conn, checked[0]))
            # Before (delete + vacuum) and after (scan + drop) side by side, against the
            # goal; then their parts.
            parts = f"{PARTITIONS + 1} partitions"
            for label, steps in (("before: row delete + vacuum", (deleted, vacuumed)),
                                 (f"after: scan + drop, {parts}", (checked, dropped)),
                                 ("row delete", (deleted,)), ("vacuum", (vacuumed,)),
                                 ("live-row scan", (checked,)), ("partition drop", (dropped,))):  # fmt: skip
                per = 1_000_000 / max(deleted[0], 1)
                spent, wall, wal = (sum(step[i] for step in steps) * per for i in (2, 1, 3))
                # The goal is on what the schema does since 0017 (after); before is the
                # row delete it replaced, printed beside it.
                whole = label.startswith("after")
                rows += [
                    row(f"retire 1 M, {label}: database time", spent, "s", f"≤ {GOAL_DB_S} s" if whole else "",
                        spent <= GOAL_DB_S if whole else None),
                    row(f"retire 1 M, {label}: wall time", wall, "s"),
                    row(f"retire 1 M, {label}: WAL", wal / 1e6, "MB"),
                ]  # fmt: skip
            # What a migration copying the tables would take (under a lock); schema 0017
            # copies nothing: the old tables became the DEFAULT partitions.
            rows.append(
                row("copy 1 M occurrences + attempts into partitions (0017 copies none)", copied * 1e6 / n, "s")
            )
            # The goal: the hot path's cost must not grow (10 % is this machine's noise).
            for name, (us, wall_us) in per_update.items():
                batched = name.endswith(f"batches of {BATCH}")
                flat, flat_wall = per_update[f"flat, batches of {BATCH}" if batched else "flat"]
                # The goal is on the hot path's own shape, a statement per batch; one
                # statement a row (planning and locking each time) is printed beside it.
                goal = "≤ 1.1 × flat" if batched and name.startswith("partitioned") else ""
                name = name.replace("partitioned", f"partitioned ({parts})")
                rows += [
                    row(f"finish's update by id: {name}, database", us, "µs", goal,
                        None if not goal else us <= flat * 1.1, us / flat),
                    row(f"finish's update by id: {name}, wall", wall_us, "µs", goal,
                        None if not goal else wall_us <= flat_wall * 1.1, wall_us / flat_wall),
                ]  # fmt: skip
        finally:
            srv.drop_database(dsn)
    return rows


if __name__ == "__main__":
    import sys

    quick = "--quick" in sys.argv
    for r in run(quick):
        print(r)
