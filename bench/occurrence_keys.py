"""Schema 0011's index drop, measured: the database time of the materializer's insert of
occurrences (``materialize_insert_enqueued``, the statement ``direct_dispatch`` runs;
since 2026-12-03 it also writes the queue rows, so each side has its own ``dispatch``)
into today's ``occurrences`` against a copy that still has ``occurrences_planned`` (the
unique (schedule, version, instant) index the primary key made redundant), on one
durable PostgreSQL with ``pg_stat_statements``, interleaved batch by batch, the order
alternating. Each batch plans one instant of 1,000 schedules drawn from 50,000 (the
sustained scenario's shape: many schedules, one occurrence each per batch).

Figure: database µs per occurrence of each, the ratio, and the load average beside them.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.cluster import row
from bench.servers import STATS_SETTINGS, log, url_dsn
from bench.servers import load_average as _load
from bench.staging import statement_stats
from clockd.core.ids import occurrence_id
from clockd.store.postgres.store import PostgresStore, Q
from tests.harness.postgres import PostgresServer

BATCH = 1000
SCHEDULES = 50_000
# Schema 0010's occurrences index set: today's copy plus the index 0011 dropped.
WITH_PLANNED = (
    "CREATE SCHEMA s0010",
    "CREATE TABLE s0010.occurrences (LIKE public.occurrences INCLUDING ALL)",
    # The statement chains the queue rows' insert (since 2026-12-03): each side its own.
    "CREATE TABLE s0010.dispatch (LIKE public.dispatch INCLUDING ALL)",
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
            for statement in WITH_PLANNED:
                conn.execute(statement)
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            # The copy has no foreign key (LIKE copies none): drop today's too, so the
            # index is the only difference (the benchmark plans schedules it never created).
            conn.execute("ALTER TABLE public.occurrences DROP CONSTRAINT occurrences_schedule_id_fkey")
            schedules = [str(uuid.uuid4()) for _ in range(SCHEDULES)]
            t0 = datetime.now(UTC).replace(microsecond=0)
            warm = rounds // 5
            began = time.perf_counter()
            for r in range(rounds):
                if r == warm:
                    conn.execute("SELECT pg_stat_statements_reset()")
                params = _params(random.sample(schedules, BATCH), t0 + timedelta(seconds=r))
                sides = (("today", "public"), ("s0010", "s0010"))
                for tag, schema in sides if r % 2 == 0 else sides[::-1]:
                    conn.execute(f"SET search_path = {schema}")
                    conn.execute(f"/* {tag} */ " + insert, params)  # type: ignore[arg-type]  # trusted SQL
            log(f"occurrence_keys: {2 * rounds * BATCH:,} occurrences in {time.perf_counter() - began:.1f}s; {_load()}")
            today_ms, today_rows = statement_stats(conn, "/* today */")
            old_ms, old_rows = statement_stats(conn, "/* s0010 */")
        today = today_ms / max(today_rows, 1) * 1000
        old = old_ms / max(old_rows, 1) * 1000
        return [
            row("occurrence insert db time, schema 0010", old, "µs", "per occurrence"),
            row("occurrence insert db time, schema 0011", today, "µs", "per occurrence", None,
                today / old if old else None),
            row("machine load after the occurrence-key figures", _load(), ""),
        ]  # fmt: skip
    finally:
        pg.stop()
