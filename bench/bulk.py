"""Creating many schedules fast for the benchmarks, two ways:

* ``apply_schedules`` — the store port's batched create, the path ``clockctl apply``
  writes through (``create_via_store``, or ``create_via_apply`` for the whole
  ``Ops.plan_apply`` + ``Ops.apply_plan`` path);
* ``COPY`` straight into ``schedules`` and ``schedule_versions`` (``copy_schedules``),
  writing exactly the rows ``create_schedule`` writes (version 1, active, the first
  ``schedule_versions`` row with reason ``created``), from definitions validated once
  per template with ``Ops``' own ``normalize``. Used when the port's path is too slow
  for the scenario's size; the output says which path made the schedules.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import psycopg

from clockd.core.clock import ManualClock
from clockd.core.model import ScheduleDef
from clockd.formats.validate import normalize
from clockd.services.ops import Ops
from clockd.store import NewSchedule
from clockd.store.codec import definition_json, spec_json
from clockd.store.postgres.store import PostgresStore


@dataclass(frozen=True, slots=True)
class Template:
    """A normalized definition whose rows differ only by name."""

    definition: ScheduleDef
    spec: str
    head: str  # '{"name":'
    tail: str  # the definition document after the name

    @classmethod
    def of(cls, definition: ScheduleDef) -> Template:
        d = normalize(definition)
        doc = definition_json(d)
        head = '{"name":' + json.dumps(d.name, ensure_ascii=False)
        assert doc.startswith(head), doc
        return cls(d, spec_json(d), '{"name":', doc[len(head) :])

    def document(self, name: str) -> str:
        return self.head + json.dumps(name) + self.tail


@dataclass(frozen=True, slots=True)
class Row:
    """One schedule to create: its id, name, template, shard, cursor and creation time
    (also the anchor of ``every`` schedules)."""

    schedule_id: str
    name: str
    template: Template
    shard: int
    next_run_at: datetime
    created_at: datetime

    def new_schedule(self) -> NewSchedule:
        definition = dataclasses.replace(self.template.definition, name=self.name)
        return NewSchedule(self.schedule_id, definition, self.shard, self.next_run_at)


def _esc(text: str) -> str:
    """COPY text format escaping."""
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def _copy(dsn: str, rows: Sequence[Row], chunk: int) -> None:
    with psycopg.connect(dsn, connect_timeout=10) as conn, conn.cursor() as cur:  # one transaction
        for i in range(0, len(rows), chunk):
            lines, versions = [], []
            for r in rows[i : i + chunk]:
                d = r.template.definition
                created = r.created_at.isoformat()
                lines.append(
                    f"{r.schedule_id}\t{_esc(d.tenant)}\t{_esc(r.name)}\t{d.kind.value}\t{_esc(d.expr)}\t"
                    f"{_esc(d.tz)}\t{_esc(d.queue)}\tactive\t1\t{r.next_run_at.isoformat()}\t{r.shard}\t"
                    f"{created}\t{created}\t\\N\t{_esc(r.template.spec)}\n"
                )
                versions.append(f"{r.schedule_id}\t1\tactive\t{created}\t\\N\t{_esc(r.template.document(r.name))}"
                                "\tcreated\n")  # fmt: skip
            with cur.copy(
                "COPY schedules (id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, "
                "shard, created_at, updated_at, paused_at, spec) FROM STDIN"
            ) as copy:
                copy.write("".join(lines))
            with cur.copy(
                "COPY schedule_versions (schedule_id, version, state, valid_from, valid_to, definition, "
                "reason) FROM STDIN"
            ) as copy:
                copy.write("".join(versions))


def copy_schedules(dsn: str, rows: Sequence[Row], *, connections: int = 2, chunk: int = 20_000) -> float:
    """COPY ``rows`` into ``schedules`` and ``schedule_versions``, split over
    ``connections`` sessions (one transaction each; the server is the bottleneck and
    has one core per session), then ANALYZE both: what autovacuum does within a minute
    of a bulk load in production (the store itself never analyzes). Without it the
    planner guessed `state = 'active'` at 0.5 % of the schedules and the materializer's
    cursor move hashed every schedule, twice the time of its key probes, until the
    autovacuum launcher came by mid-scenario. Returns the seconds of the COPY, building
    the text included."""
    began = time.perf_counter()
    share = -(-len(rows) // connections) if rows else 0
    parts = [rows[i : i + share] for i in range(0, len(rows), share)] if share else []
    with ThreadPoolExecutor(max_workers=max(1, len(parts))) as pool:
        for future in [pool.submit(_copy, dsn, part, chunk) for part in parts]:
            future.result()
    seconds = time.perf_counter() - began
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE schedules")
        conn.execute("ANALYZE schedule_versions")
    return seconds


async def _create_via_store(dsn: str, rows: Sequence[Row], now: datetime, batch: int) -> float:
    store = PostgresStore(dsn, max_size=2)
    await store.open()
    try:
        news = [r.new_schedule() for r in rows]
        began = time.perf_counter()
        for i in range(0, len(news), batch):
            await store.apply_schedules(news[i : i + batch], [], now)
        return time.perf_counter() - began
    finally:
        await store.close()


def create_via_store(dsn: str, rows: Sequence[Row], now: datetime, batch: int = 5000) -> float:
    """``Store.apply_schedules`` in batches of ``batch`` creates; returns the seconds."""
    return asyncio.run(_create_via_store(dsn, rows, now, batch))


async def _create_via_apply(dsn: str, definitions: Sequence[ScheduleDef], tenant: str, now: datetime) -> float:
    store = PostgresStore(dsn, max_size=2)
    await store.open()
    try:
        ops = Ops(store, ManualClock(now))
        began = time.perf_counter()
        plan, result = await ops.apply(definitions, tenant)
        if plan.problems or result is None:
            raise RuntimeError(f"apply has problems: {plan.problems[:3]}")
        return time.perf_counter() - began
    finally:
        await store.close()


def create_via_apply(dsn: str, definitions: Sequence[ScheduleDef], tenant: str, now: datetime) -> float:
    """What ``clockctl apply`` does with parsed files on a local store: ``Ops.apply``, the
    plan and the one ``Store.apply_schedules`` transaction pipelined; returns the seconds.
    (The API's ``POST /v1/apply`` plans first, then writes: ``bench.apply`` prints that
    path's rate as "plan then write".)"""
    return asyncio.run(_create_via_apply(dsn, definitions, tenant, now))
