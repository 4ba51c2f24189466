"""One hop fewer for the built-in queue? Database time of the two ways an occurrence can
reach ``dispatch`` (issue 18), measured with ``pg_stat_statements`` on a durable
PostgreSQL, A/B interleaved in the same run:

* **outbox → relay** (today): ``materialize_insert`` writes the occurrence and an outbox
  row in one statement; the relay's ``relay_dispatch`` deletes the outbox row, marks the
  occurrence ENQUEUED and inserts the ``dispatch`` row (``visible_at = available_at``).
* **direct** (``direct_dispatch``): the materializer's own transaction writes the
  occurrence already ENQUEUED and its ``dispatch`` row with ``visible_at`` — the built-in
  queue is a table of the same database, so that transaction *is* the transactional
  outbox. Measured as clockd runs it: ``materialize_insert_enqueued``, one PostgreSQL
  statement that chains the ``dispatch`` insert on the occurrences' RETURNING (until
  2026-12-03 it was two statements, the second reading each occurrence again by id).

Then the price of direct writes with a minutes-ahead horizon: the claim (through
``Store.claim``) with only due rows in ``dispatch``, and with the horizon's future
rows there too (``FUTURE`` rows, as 2 minutes at the sustained rate would leave).

Figures: database µs per occurrence of each path (total_exec_time / the occurrences: the
inserts' rows, the relay's own count), and claim µs
per claimed row in both queue shapes; the load average beside them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.cluster import row
from bench.servers import STATS_SETTINGS, log, statement_totals, url_dsn
from bench.servers import load_average as _load
from clockd.core.clock import ManualClock
from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.services.ops import Ops
from clockd.store.postgres.store import PostgresStore, Q
from tests.harness.postgres import PostgresServer

BATCH = 500


# The states the inserts name besides the rows (the engine passes them from core).
RULE: dict[str, Any] = {"scheduled": "SCHEDULED", "enqueued": "ENQUEUED"}


def _params(schedule_id: str, base: datetime, n: int, offset: int) -> dict[str, Any]:
    times = [base + timedelta(microseconds=offset + i) for i in range(n)]
    return {
        "ids": [f"{uuid.uuid4().hex}" for _ in range(n)], "schedule_ids": [schedule_id] * n, "versions": [1] * n,
        "tenants": ["default"] * n, "queues": ["default"] * n, "scheduled_for": times, "available_at": times,
        "states": ["SCHEDULED"] * n, "max_attempts": [1] * n, "reasons": [None] * n, "finished_at": [None] * n,
        "overlaps": ["allow"] * n,
        "now": datetime.now(UTC),
    }  # fmt: skip


def statement_stats(conn: psycopg.Connection[Any], needle: str) -> tuple[float, int]:
    """(total ms, rows) of the statements whose text contains ``needle``."""
    ms, rows, _ = statement_totals(conn, f"%{needle}%")
    return ms, rows


async def _schedule(dsn: str) -> str:
    store = PostgresStore(dsn, max_size=1)
    await store.migrate()
    await store.open()
    try:
        ops = Ops(store, ManualClock(datetime.now(UTC)))
        definition = ScheduleDef(name="staged", kind=ScheduleKind.EVERY, expr="1h", tz="UTC", target=NoopTarget())
        return (await ops.add(definition)).id
    finally:
        await store.close()


async def _claims(dsn: str, rounds: int) -> int:
    store = PostgresStore(dsn, max_size=1)
    await store.open()
    try:
        claimed = 0
        for _ in range(rounds):
            claimed += len(await store.claim(["default"], "bench", BATCH, timedelta(minutes=5), datetime.now(UTC)))
        return claimed
    finally:
        await store.close()


def run(quick: bool) -> list[dict[str, object]]:
    rounds = 10 if quick else 40
    future = 50_000 if quick else 200_000
    pg = PostgresServer(durable=True, settings=STATS_SETTINGS).start()
    try:
        with psycopg.connect(pg.dsn("postgres"), autocommit=True) as admin:
            admin.execute("CREATE DATABASE staging")
        dsn = url_dsn(pg.dsn("postgres"), "staging")
        schedule_id = asyncio.run(_schedule(dsn))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT pg_stat_statements_reset()")
            past = datetime.now(UTC) - timedelta(hours=1)
            relay = {"until": datetime.now(UTC) + timedelta(days=1), "limit": BATCH,
                     "expected": "SCHEDULED", "next": "ENQUEUED"}  # fmt: skip
            began = time.perf_counter()
            moved = 0  # the relay answers one row (its count), not a row per occurrence moved
            for i in range(rounds):  # interleaved: the two-step path, then direct as clockd runs it
                conn.execute(Q["materialize_insert"], {**_params(schedule_id, past, BATCH, 2 * i * BATCH), **RULE})
                answer = conn.execute(Q["relay_dispatch"], {**relay, "now": datetime.now(UTC)}).fetchone()
                moved += int(answer[0]) if answer else 0
                params = _params(schedule_id, past, BATCH, (2 * i + 1) * BATCH)
                conn.execute(Q["materialize_insert_enqueued"], {**params, **RULE})
            log(f"staging: {2 * rounds * BATCH:,} occurrences in {time.perf_counter() - began:.1f}s; {_load()}")
            mat_ms, mat_rows = statement_stats(conn, "INSERT INTO outbox")
            relay_ms, _ = statement_stats(conn, "DELETE FROM outbox")
            assert moved == rounds * BATCH, f"the relay moved {moved} of {rounds * BATCH} occurrences"
            direct_ms, direct_rows = statement_stats(conn, "ELSE u.state END")  # materialize_insert_enqueued
            two_step = (mat_ms / max(mat_rows, 1) + relay_ms / max(moved, 1)) * 1000
            direct = direct_ms / max(direct_rows, 1) * 1000
            # The claim: due rows only, then with the horizon's future rows in the queue.
            (queued,) = conn.execute("SELECT count(*) FROM dispatch").fetchone() or (0,)
            conn.execute("VACUUM ANALYZE dispatch")
            conn.execute("SELECT pg_stat_statements_reset()")
        half = max(1, rounds // 2)
        asyncio.run(_claims(dsn, half))
        with psycopg.connect(dsn, autocommit=True) as conn:
            due_ms, due_rows = statement_stats(conn, "lease_until")
            ahead = datetime.now(UTC) + timedelta(seconds=10)
            for i in range(0, future, 5000):
                conn.execute(Q["materialize_insert_enqueued"], {**_params(schedule_id, ahead, 5000, i), **RULE})
            conn.execute("VACUUM ANALYZE dispatch")
            conn.execute("SELECT pg_stat_statements_reset()")
        asyncio.run(_claims(dsn, half))
        with psycopg.connect(dsn, autocommit=True) as conn:
            fut_ms, fut_rows = statement_stats(conn, "lease_until")
        claim_due = due_ms / max(due_rows, 1) * 1000
        claim_future = fut_ms / max(fut_rows, 1) * 1000
        log(f"staging: {queued:,} due rows queued; claims {due_rows:,} rows (due only) then {fut_rows:,} "
            f"(with {future:,} future rows); {_load()}")  # fmt: skip
        return [
            row("db time to dispatch, outbox → relay (today)", two_step, "µs", "per occurrence"),
            row("db time to dispatch, direct_dispatch", direct, "µs", "per occurrence", None,
                direct / two_step if two_step else None),
            row("claim db time, due rows only", claim_due, "µs", "per claimed row"),
            row(f"claim db time, + {future // 1000}k future rows", claim_future, "µs", "per claimed row", None,
                claim_future / claim_due if claim_due else None),
            row("machine load after the staging figures", _load(), ""),
        ]  # fmt: skip
    finally:
        pg.stop()
