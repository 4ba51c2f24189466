"""The occurrence table's keys, measured: the database time of the materializer's insert
of occurrences (``materialize_insert_enqueued``, the statement ``direct_dispatch`` runs;
it also writes the queue rows, so each side has its own ``dispatch``) into today's
``occurrences`` (schema 0012) against copies of the table as schemas 0011 and 0010 had
it: 0011 with the foreign key to ``schedules`` (each row's check locks its schedule row),
0010 with that key and ``occurrences_planned`` too (the unique (schedule, version,
instant) index the primary key made redundant). One durable PostgreSQL with
``pg_stat_statements``, interleaved batch by batch, the order rotating. Each batch plans
one instant of 1,000 schedules drawn from 50,000 (the sustained scenario's shape: many
schedules, one occurrence each per batch); the schedules exist, so every key check passes.

Figure: database µs per occurrence of each, the ratio to the schema before, and the load
average beside them.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench import bulk
from bench.cluster import row
from bench.servers import STATS_SETTINGS, log, url_dsn
from bench.servers import load_average as _load
from bench.staging import statement_stats
from clockd.core.ids import occurrence_id
from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.store.postgres.store import PostgresStore, Q
from tests.harness.postgres import PostgresServer

BATCH = 1000
SCHEDULES = 50_000
SIDES = ("public", "s0010", "s0011")  # today (schema 0012) and the copies


def _copy_of_today(schema: str) -> tuple[str, ...]:
    """Today's two tables in ``schema`` (LIKE copies no foreign key), with the foreign key
    to ``schedules`` that schema 0012 dropped; the statement chains the queue rows' insert
    (since 2026-12-03), so each side has its own dispatch."""
    return (
        f"CREATE SCHEMA {schema}",
        f"CREATE TABLE {schema}.occurrences (LIKE public.occurrences INCLUDING ALL)",
        f"CREATE TABLE {schema}.dispatch (LIKE public.dispatch INCLUDING ALL)",
        f"ALTER TABLE {schema}.occurrences ADD FOREIGN KEY (schedule_id) REFERENCES public.schedules (id)",
    )


# The tables as schemas 0011 and 0010 had them: 0010 also had the index 0011 dropped.
OLDER_SCHEMAS = (
    *_copy_of_today("s0011"),
    *_copy_of_today("s0010"),
    "CREATE UNIQUE INDEX occurrences_planned ON s0010.occurrences "
    "(schedule_id, schedule_version, scheduled_for) WHERE NOT manual",
)


def _params(schedules: list[str], at: datetime) -> dict[str, Any]:
    n = len(schedules)
    return {
        "ids": [occurrence_id(s, 1, at) for s in schedules], "schedule_ids": schedules, "versions": [1] * n,
        "tenants": ["default"] * n, "queues": ["default"] * n, "scheduled_for": [at] * n, "available_at": [at] * n,
        "states": ["SCHEDULED"] * n, "max_attempts": [1] * n, "reasons": [None] * n, "finished_at": [None] * n,
        "now": datetime.now(UTC), "scheduled": "SCHEDULED", "enqueued": "ENQUEUED",
    }  # fmt: skip


async def _migrate(dsn: str) -> None:
    store = PostgresStore(dsn, max_size=1)
    await store.migrate()
    await store.close()


def run(quick: bool) -> list[dict[str, object]]:
    rounds = 60 if quick else 400
    pg = PostgresServer(durable=True, settings=STATS_SETTINGS).start()
    try:
        with psycopg.connect(pg.dsn("postgres"), autocommit=True) as admin:
            admin.execute("CREATE DATABASE keys")
        dsn = url_dsn(pg.dsn("postgres"), "keys")
        asyncio.run(_migrate(dsn))
        insert = Q["materialize_insert_enqueued"]
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in OLDER_SCHEMAS:
                conn.execute(statement)
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            t0 = datetime.now(UTC).replace(microsecond=0)
            # The schedules the batches plan exist (the foreign key's checks find them).
            schedules = [str(uuid.uuid4()) for _ in range(SCHEDULES)]
            template = bulk.Template.of(
                ScheduleDef(name="t", kind=ScheduleKind.EVERY, expr="1s", tz="UTC", target=NoopTarget())
            )
            bulk.copy_schedules(dsn, [bulk.Row(sid, f"k-{sid}", template, 0, t0, t0) for sid in schedules])
            conn.execute("VACUUM ANALYZE public.schedules")
            warm = rounds // 5
            began = time.perf_counter()
            for r in range(rounds):
                if r == warm:
                    conn.execute("SELECT pg_stat_statements_reset()")
                params = _params(random.sample(schedules, BATCH), t0 + timedelta(seconds=r))
                turn = r % len(SIDES)
                for schema in SIDES[turn:] + SIDES[:turn]:
                    conn.execute(f"SET search_path = {schema}, public")  # the copies: their own two tables
                    conn.execute(f"/* {schema} */ " + insert, params)
            log(f"occurrence_keys: {len(SIDES) * rounds * BATCH:,} occurrences in "
                f"{time.perf_counter() - began:.1f}s; {_load()}")  # fmt: skip
            per_row: dict[str, float] = {}
            for schema in SIDES:
                ms, rows = statement_stats(conn, f"/* {schema} */")
                per_row[schema] = ms / max(rows, 1) * 1000
        s10, s11, s12 = per_row["s0010"], per_row["s0011"], per_row["public"]
        return [
            row("occurrence insert db time, schema 0010", s10, "µs", "per occurrence"),
            row("occurrence insert db time, schema 0011 (no occurrences_planned)", s11, "µs", "per occurrence",
                None, s11 / s10 if s10 else None),
            row("occurrence insert db time, schema 0012 (no schedules key check)", s12, "µs", "per occurrence",
                None, s12 / s11 if s11 else None),
            row("machine load after the occurrence-key figures", _load(), ""),
        ]  # fmt: skip
    finally:
        pg.stop()
