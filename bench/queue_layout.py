"""Which ``dispatch`` layout costs the database least over a queue row's life (issue 18,
"a claim that does not rewrite indexed columns")? Measured with ``pg_stat_statements`` on
a durable PostgreSQL, every layout in its own schema of one database, A/B interleaved:
the layouts take turns (in a rotated order) through the same life — insert a batch of
rows, then claim 100 at a time (``FOR UPDATE SKIP LOCKED`` on the ready index,
oldest first) and finish each claimed batch (delete) — until the queue is empty.

Layouts (the statements are the shape of clockd's, not clockd's own; not product code):

* ``0009``: schema 0001–0009, as before 0010. The claim UPDATEs ``lease_token``,
  ``lease_until``, ``worker_id``, ``leased_at``; ``lease_token`` is named by the partial
  indexes' predicates, so the update is not HOT and writes a new entry into every index whose
  predicate holds for the leased row (primary key, ``occurrence_id`` UNIQUE,
  ``dispatch_leased``, ``dispatch_lease_token``).
* ``0009, occurrence index not UNIQUE`` and ``0009, no occurrence index``: (c). The
  index serves more than the uniqueness (cancel, ``attempts_list``, the slot waiter's
  write-back and the status views look queue rows up by occurrence), so the first is
  what dropping only the constraint would save (its inserts then have no ``ON
  CONFLICT``: no unique key to conflict on), the second the bound.
* ``0010: no dispatch_leased`` (what clockd runs now): the reaper's index (``lease_until,
  id`` of the leased rows) dropped; the reaper reads the leased rows through
  ``dispatch_lease_token``, whose price is the reaper-pass figure.
* ``0009, one ready index``: (b)'s upper bound — ``dispatch_ready_tenant`` dropped.
* ``0010, UNLOGGED``: 0010's layout in an ``UNLOGGED`` table — the queue writes no WAL
  (it would be rebuilt from the ENQUEUED and RUNNING occurrences after a crash or a
  failover, which truncate it). Measured to see what the queue's WAL costs the hot path.
* ``leases table``: (a) — the claim DELETEs the ready row and INSERTs a ``leases`` row
  (key ``lease_token``, index ``lease_until`` for the reaper); finish deletes the lease.
  The ready indexes need no predicate. Keeping the ready row and inserting a lease row
  beside it is not measured: the ready scan would then have to skip leased rows by an
  anti-join, or a flag on the row would again be an indexed column the claim rewrites.

Figure: database µs per queue row over its whole life (total_exec_time of the layout's
statements / its rows), and in the ``× bare`` column the median over the rounds of each
layout's ratio to ``0009`` in that round (the per-round ratios are logged).
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.cluster import row
from bench.servers import STATS_SETTINGS, log
from bench.servers import load_average as _load
from tests.harness.postgres import PostgresServer

CLAIM = 100
INSERT = 500
LIFE = 1_000  # queue rows inserted, then claimed and finished, per life
TENANTS = 4

_DISPATCH = """
CREATE TABLE {s}.dispatch (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    occurrence_id text COLLATE "C" NOT NULL {unique},
    queue         text COLLATE "C" NOT NULL,
    tenant        text COLLATE "C" NOT NULL,
    visible_at    timestamptz NOT NULL,
    lease_token   text COLLATE "C",
    lease_until   timestamptz,
    worker_id     text,
    leased_at     timestamptz
)"""

_LEASED_INDEXES = (
    "CREATE INDEX ON {s}.dispatch (queue, visible_at, id) WHERE lease_token IS NULL",
    "CREATE INDEX ON {s}.dispatch (lease_until, id) WHERE lease_token IS NOT NULL",
    "CREATE UNIQUE INDEX ON {s}.dispatch (lease_token) WHERE lease_token IS NOT NULL",
)
_TENANT_INDEX = "CREATE INDEX ON {s}.dispatch (queue, tenant, visible_at, id) WHERE lease_token IS NULL"

_INSERT = """/* ql:{s} */ INSERT INTO {s}.dispatch (occurrence_id, queue, tenant, visible_at)
SELECT o, 'default', 't' || (n %% {tenants}), %(at)s::timestamptz + n * interval '1 microsecond'
FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS u(o, n){conflict}"""

_CLAIM_UPDATE = """/* ql:{s} */ WITH picked AS (
    SELECT id FROM {s}.dispatch
    WHERE lease_token IS NULL AND queue = 'default' AND visible_at <= %(now)s
    ORDER BY visible_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
)
UPDATE {s}.dispatch AS d SET lease_token = gen_random_uuid()::text, lease_until = %(until)s,
       worker_id = 'bench', leased_at = %(now)s
FROM picked WHERE d.id = picked.id
RETURNING d.lease_token"""

_FINISH_UPDATE = "/* ql:{s} */ DELETE FROM {s}.dispatch WHERE lease_token = ANY(%(tokens)s::text[])"

_LEASES = """
CREATE TABLE {s}.leases (
    lease_token   text COLLATE "C" PRIMARY KEY,
    dispatch_id   bigint NOT NULL,
    occurrence_id text COLLATE "C" NOT NULL,
    queue         text COLLATE "C" NOT NULL,
    tenant        text COLLATE "C" NOT NULL,
    visible_at    timestamptz NOT NULL,
    lease_until   timestamptz NOT NULL,
    worker_id     text NOT NULL,
    leased_at     timestamptz NOT NULL
)"""

_CLAIM_MOVE = """/* ql:{s} */ WITH picked AS (
    SELECT id FROM {s}.dispatch
    WHERE queue = 'default' AND visible_at <= %(now)s
    ORDER BY visible_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM {s}.dispatch AS d USING picked WHERE d.id = picked.id
    RETURNING d.id, d.occurrence_id, d.queue, d.tenant, d.visible_at
)
INSERT INTO {s}.leases (lease_token, dispatch_id, occurrence_id, queue, tenant, visible_at,
                        lease_until, worker_id, leased_at)
SELECT gen_random_uuid()::text, id, occurrence_id, queue, tenant, visible_at, %(until)s, 'bench', %(now)s
FROM moved
RETURNING lease_token"""

_FINISH_MOVE = "/* ql:{s} */ DELETE FROM {s}.leases WHERE lease_token = ANY(%(tokens)s::text[])"

# name -> (schema, occurrence_id index: "unique" / "plain" / "none", tenant index, leases table)
LAYOUTS: dict[str, tuple[str, str, bool, bool]] = {
    "0009": ("ql_today", "unique", True, False),
    "0010: no dispatch_leased": ("ql_noleased", "unique", True, False),
    "0010, UNLOGGED": ("ql_unlogged", "unique", True, False),
    "0009, occurrence index not UNIQUE": ("ql_plain", "plain", True, False),
    "0009, no occurrence index": ("ql_nouniq", "none", True, False),
    "0009, one ready index": ("ql_oneready", "unique", False, False),
    "leases table": ("ql_leases", "unique", True, True),
    "leases table, no occurrence index": ("ql_leases_nouniq", "none", True, True),
}
_NO_LEASED = ("ql_noleased", "ql_unlogged")  # 0010's layout: no dispatch_leased
_UNLOGGED = ("ql_unlogged",)


def _create(conn: psycopg.Connection[Any], schema: str, occurrence: str, tenant: bool, leases: bool) -> None:
    conn.execute(f"CREATE SCHEMA {schema}")
    table = _DISPATCH.format(s=schema, unique="UNIQUE" if occurrence == "unique" else "")
    conn.execute(table.replace("CREATE TABLE", "CREATE UNLOGGED TABLE") if schema in _UNLOGGED else table)
    if occurrence == "plain":
        conn.execute(f"CREATE INDEX ON {schema}.dispatch (occurrence_id)")
    if leases:
        conn.execute(f"CREATE INDEX ON {schema}.dispatch (queue, visible_at, id)")
        if tenant:
            conn.execute(f"CREATE INDEX ON {schema}.dispatch (queue, tenant, visible_at, id)")
        conn.execute(_LEASES.format(s=schema))
        conn.execute(f"CREATE INDEX ON {schema}.leases (lease_until)")
        return
    for ddl in _LEASED_INDEXES + ((_TENANT_INDEX,) if tenant else ()):
        if schema not in _NO_LEASED or "lease_until" not in ddl:
            conn.execute(ddl.format(s=schema))


def _life(conn: psycopg.Connection[Any], schema: str, occurrence: str, leases: bool, rows: int, serial: int) -> None:
    """Insert ``rows`` queue rows, then claim and finish them ``CLAIM`` at a time."""
    conflict = " ON CONFLICT (occurrence_id) DO NOTHING" if occurrence == "unique" else ""
    insert = _INSERT.format(s=schema, tenants=TENANTS, conflict=conflict)
    claim = (_CLAIM_MOVE if leases else _CLAIM_UPDATE).format(s=schema)
    finish = (_FINISH_MOVE if leases else _FINISH_UPDATE).format(s=schema)
    at = datetime.now(UTC) - timedelta(minutes=1)
    for start in range(0, rows, INSERT):
        ids = [f"{serial:04d}-{start + i:08d}" for i in range(min(INSERT, rows - start))]
        conn.execute(insert, {"ids": ids, "at": at})
    while True:
        now = datetime.now(UTC)
        params = {"now": now, "until": now + timedelta(minutes=5), "limit": CLAIM}
        tokens = [r[0] for r in conn.execute(claim, params).fetchall()]
        if not tokens:
            return
        conn.execute(finish, {"tokens": tokens})


_REAP = """/* qr:{s} */ SELECT id FROM {s}.dispatch
WHERE lease_token IS NOT NULL AND lease_until < %(now)s
ORDER BY lease_until, id LIMIT 100 FOR UPDATE SKIP LOCKED"""


def _reap_probe(conn: psycopg.Connection[Any], schema: str, held: int, probes: int) -> float:
    """µs of one reaper pass (``reap_pick``'s shape, nothing expired) over ``held`` live leases."""
    _life(conn, schema, "unique", False, 0, 0)  # nothing: the queue is empty after the rounds
    at = datetime.now(UTC) - timedelta(minutes=1)
    insert = _INSERT.format(s=schema, tenants=TENANTS, conflict=" ON CONFLICT (occurrence_id) DO NOTHING")
    claim = _CLAIM_UPDATE.format(s=schema)
    for start in range(0, held, INSERT):
        conn.execute(insert, {"ids": [f"reap-{start + i:08d}" for i in range(INSERT)], "at": at})
    now = datetime.now(UTC)
    while conn.execute(claim, {"now": now, "until": now + timedelta(minutes=5), "limit": 1000}).fetchall():
        pass
    conn.execute(f"ANALYZE {schema}.dispatch")
    reap = _REAP.format(s=schema)
    plan = conn.execute("EXPLAIN " + reap, {"now": now}).fetchall()
    log(f"queue_layout: reap pass, {schema}: " + " / ".join(str(r[0]).strip() for r in plan[:3]))
    for _ in range(probes):
        conn.execute(reap, {"now": now})
    (total,) = conn.execute(
        "SELECT coalesce(sum(total_exec_time), 0) FROM pg_stat_statements WHERE query LIKE %s", (f"/* qr:{schema} */%",)
    ).fetchone() or (0.0,)
    return float(total) * 1000 / probes


def _totals(conn: psycopg.Connection[Any]) -> dict[str, float]:
    """Each layout's total statement time so far, ms."""
    out = {}
    for name, (schema, *_rest) in LAYOUTS.items():
        (total,) = conn.execute(
            "SELECT coalesce(sum(total_exec_time), 0) FROM pg_stat_statements WHERE query LIKE %s",
            (f"/* ql:{schema} */%",),
        ).fetchone() or (0.0,)
        out[name] = float(total)
    return out


def run(quick: bool) -> list[dict[str, object]]:
    # A round is LIVES lives of LIFE rows per layout, the layouts taking turns life by
    # life (the order rotating), so a burst of the neighbours' load falls on all of them.
    rounds, lives = (3, 2) if quick else (6, 8)
    rows = rounds * lives * LIFE
    pg = PostgresServer(durable=True, settings=STATS_SETTINGS).start()
    try:
        with psycopg.connect(pg.dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            for schema, occurrence, tenant, leases in LAYOUTS.values():
                _create(conn, schema, occurrence, tenant, leases)
                _life(conn, schema, occurrence, leases, LIFE, 9999)  # warm the server's caches
            conn.execute("SELECT pg_stat_statements_reset()")
            began = time.perf_counter()
            order = list(LAYOUTS.values())
            ratios: dict[str, list[float]] = {name: [] for name in LAYOUTS}
            before = _totals(conn)
            for i in range(rounds):
                for j in range(lives):
                    turn = (i * lives + j) % len(order)
                    for schema, occurrence, _tenant, leases in order[turn:] + order[:turn]:
                        _life(conn, schema, occurrence, leases, LIFE, i * lives + j)
                after = _totals(conn)
                spent = {name: after[name] - before[name] for name in LAYOUTS}
                for name in LAYOUTS:
                    ratios[name].append(spent[name] / spent["0009"] if spent["0009"] else float("nan"))
                before = after
            log(f"queue_layout: {rounds} rounds × {lives} lives × {len(LAYOUTS)} layouts × {LIFE:,} rows "
                f"in {time.perf_counter() - began:.1f}s; {_load()}")  # fmt: skip
            totals = _totals(conn)
            for name, (schema, *_rest) in LAYOUTS.items():
                phases = conn.execute(
                    "SELECT split_part(ltrim(substr(query, length(%s) + 1)), ' ', 1), sum(total_exec_time) "
                    "FROM pg_stat_statements WHERE query LIKE %s GROUP BY 1 ORDER BY 1",
                    (f"/* ql:{schema} */", f"/* ql:{schema} */%"),
                ).fetchall()
                (wal,) = conn.execute(
                    "SELECT coalesce(sum(wal_bytes), 0) FROM pg_stat_statements WHERE query LIKE %s",
                    (f"/* ql:{schema} */%",),
                ).fetchone() or (0,)
                log(f"queue_layout: {name}: " + ", ".join(
                    f"{verb} {ms * 1000 / rows:.1f}" for verb, ms in phases)
                    + f" µs per row; WAL {float(wal) / rows:,.0f} bytes per row; × 0009 by round: "
                    + ", ".join(f"{r:.2f}" for r in ratios[name]))  # fmt: skip
            # What dropping dispatch_leased costs the reaper: each pass reads every live lease.
            held = 2_000 if quick else 5_000
            reap = {schema: _reap_probe(conn, schema, held, 50) for schema in ("ql_today", "ql_noleased")}
        out = [
            row(f"queue row life db time, {name}", totals[name] * 1000 / rows, "µs", "per row (issue 18: ≤ 80/exec)",
                None, statistics.median(ratios[name]) if name != "0009" else None)
            for name in LAYOUTS
        ]  # fmt: skip
        out.append(row(f"reaper pass over {held:,} live leases, 0009", reap["ql_today"], "µs", "per pass"))
        out.append(row(f"reaper pass over {held:,} live leases, 0010 (no dispatch_leased)", reap["ql_noleased"], "µs",
                       "per pass (one per leader tick)", None,
                       reap["ql_noleased"] / reap["ql_today"] if reap["ql_today"] else None))  # fmt: skip
        out.append(row("machine load after the queue-layout figures", _load(), ""))
        return out
    finally:
        pg.stop()


if __name__ == "__main__":
    for figure in run(quick=bool(os.environ.get("BENCH_QUICK"))):
        print(figure)
