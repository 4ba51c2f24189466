"""The occurrence table's keys, measured: the database time of the materializer's insert
of occurrences (``materialize_insert_enqueued``, the statement ``direct_dispatch`` runs;
it also writes the queue rows, so each side has its own ``dispatch``) into copies of the
tables as schemas 0011 and 0010 had them: 0011 with the foreign key to ``schedules`` (each
row's check locks its schedule row), 0010 with that key and ``occurrences_planned`` too
(the unique (schedule, version, instant) index the primary key made redundant); and into
today's tables twice, with the uuid5 ids of the releases before schema 0016 (the copy
``s0012u``) and with today's time-ordered ids (``clockd.core.ids``: the instant's Unix
milliseconds lead, so inserts land at the right edge of ``occurrences_pkey`` and
``dispatch``'s occurrence key instead of at random leaves; since schema 0017 today's
``occurrences`` is partitioned by week on that id, so its side also carries what the
partitions cost an insert, while the copies are flat tables). One durable PostgreSQL with
``pg_stat_statements``, interleaved batch by batch, the order rotating. Each batch plans
one instant of 1,000 schedules drawn from 50,000 (the sustained scenario's shape: many
schedules, one occurrence each per batch); the schedules exist, so every key check passes.
The copies carry the table's storage options (``occurrences`` has fillfactor 50 since
schema 0004; ``LIKE … INCLUDING ALL`` does not copy it, and until 2026-12-03 the copies
were fuller, cheaper tables than the one they were compared with).

Every side also runs, 20 batches later, what the claim and the finish do by id: an
update of the batch's occurrences (``WHERE id = ANY``) and the delete of its queue rows
(``WHERE occurrence_id = ANY``).

Figures: database µs per occurrence of each, the ratio to the schema before (today's
time-ordered ids to the same tables with uuid5 ids), and the load average beside them.
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
from clockd.core.ids import legacy_occurrence_id, occurrence_id
from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.store.postgres.store import PostgresStore, Q
from tests.harness.postgres import PostgresServer

BATCH = 1000
SCHEDULES = 50_000
SIDES = ("public", "s0010", "s0011", "s0012u")  # today (time-ordered ids), the copies with uuid5 ids
LATER = 20  # the lookups by id touch the batch this many batches back


def _storage_of(table: str) -> str:
    """Where ``table``'s storage options are: occurrences is partitioned since schema 0017
    (a partitioned table has none; each partition has fillfactor 50, as its DEFAULT)."""
    return "public.occurrences_default" if table == "occurrences" else f"public.{table}"


def _copy_of_today(schema: str, *, schedule_key: bool = True) -> tuple[str, ...]:
    """Today's two tables in ``schema`` with their storage options (LIKE copies neither
    those nor a foreign key), with the foreign key to ``schedules`` that schema 0012
    dropped unless ``schedule_key`` is false; the statement chains the queue rows'
    insert (since 2026-12-03), so each side has its own dispatch."""
    statements = [f"CREATE SCHEMA {schema}"]
    for table in ("occurrences", "dispatch"):
        statements.append(f"CREATE TABLE {schema}.{table} (LIKE public.{table} INCLUDING ALL)")
        statements.append(
            f"DO $$ BEGIN EXECUTE coalesce((SELECT format('ALTER TABLE {schema}.{table} SET (%s)', "
            f"array_to_string(reloptions, ', ')) FROM pg_class WHERE oid = '{_storage_of(table)}'::regclass "
            f"AND reloptions IS NOT NULL), 'SELECT 1'); END $$"
        )
    if schedule_key:
        statements.append(
            f"ALTER TABLE {schema}.occurrences ADD FOREIGN KEY (schedule_id) REFERENCES public.schedules (id)"
        )
    return tuple(statements)


# The tables as schemas 0011 and 0010 had them: 0010 also had the index 0011 dropped;
# and today's, written with the uuid5 ids of the releases before schema 0016.
OTHER_SCHEMAS = (
    *_copy_of_today("s0011"),
    *_copy_of_today("s0010"),
    "CREATE UNIQUE INDEX occurrences_planned ON s0010.occurrences "
    "(schedule_id, schedule_version, scheduled_for) WHERE NOT manual",
    *_copy_of_today("s0012u", schedule_key=False),
)


def _ids(schema: str, schedules: list[str], at: datetime) -> list[str]:
    """Today's time-ordered ids for today's tables; the copies are written as the releases
    of their schemas wrote them, with uuid5 ids."""
    key = occurrence_id if schema == "public" else legacy_occurrence_id
    return [key(s, 1, at) for s in schedules]


def _params(schema: str, schedules: list[str], at: datetime) -> dict[str, Any]:
    n = len(schedules)
    return {
        "ids": _ids(schema, schedules, at), "schedule_ids": schedules, "versions": [1] * n,
        "tenants": ["default"] * n, "queues": ["default"] * n, "scheduled_for": [at] * n, "available_at": [at] * n,
        "states": ["SCHEDULED"] * n, "max_attempts": [1] * n, "reasons": [None] * n, "finished_at": [None] * n,
        "overlaps": ["allow"] * n,
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
            for statement in OTHER_SCHEMAS:
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
            batches: list[list[str]] = []
            for r in range(rounds):
                if r == warm:
                    conn.execute("SELECT pg_stat_statements_reset()")
                batches.append(random.sample(schedules, BATCH))
                turn = r % len(SIDES)
                for schema in SIDES[turn:] + SIDES[:turn]:
                    conn.execute(f"SET search_path = {schema}, public")  # the copies: their own two tables
                    conn.execute(f"/* {schema} */ " + insert, _params(schema, batches[r], t0 + timedelta(seconds=r)))
                    if r >= LATER:  # the claim's and the finish's writes by id, some batches on
                        back = _ids(schema, batches[r - LATER], t0 + timedelta(seconds=r - LATER))
                        conn.execute(f"/* {schema} by id */ UPDATE occurrences SET state = 'RUNNING', "
                                     "attempts = attempts + 1 WHERE id = ANY(%s::text[])", (back,))  # fmt: skip
                        conn.execute(f"/* {schema} by id */ DELETE FROM dispatch WHERE occurrence_id = ANY(%s::text[])",
                                     (back,))  # fmt: skip
            log(f"occurrence_keys: {len(SIDES) * rounds * BATCH:,} occurrences in "
                f"{time.perf_counter() - began:.1f}s; {_load()}")  # fmt: skip
            per_row: dict[str, float] = {}
            by_id: dict[str, float] = {}
            for schema in SIDES:
                ms, rows = statement_stats(conn, f"/* {schema} */")
                per_row[schema] = ms / max(rows, 1) * 1000
                ms, rows = statement_stats(conn, f"/* {schema} by id */")
                by_id[schema] = ms / max(rows // 2, 1) * 1000  # two statements per occurrence
        s10, s11, s12, t16 = per_row["s0010"], per_row["s0011"], per_row["s0012u"], per_row["public"]
        return [
            row("occurrence insert db time, schema 0010", s10, "µs", "per occurrence"),
            row("occurrence insert db time, schema 0011 (no occurrences_planned)", s11, "µs", "per occurrence",
                None, s11 / s10 if s10 else None),
            row("occurrence insert db time, schema 0012 (no schedules key check)", s12, "µs", "per occurrence",
                None, s12 / s11 if s11 else None),
            row("occurrence insert db time, schema 0016 (time-ordered ids)", t16, "µs", "per occurrence",
                None, t16 / s12 if s12 else None),
            row("update + queue delete by id, uuid5 ids (before schema 0016)", by_id["s0012u"], "µs",
                "per occurrence"),
            row("update + queue delete by id, schema 0016 (time-ordered ids)", by_id["public"], "µs",
                "per occurrence", None, by_id["public"] / by_id["s0012u"] if by_id["s0012u"] else None),
            row("machine load after the occurrence-key figures", _load(), ""),
        ]  # fmt: skip
    finally:
        pg.stop()
