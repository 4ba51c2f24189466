"""Creation through ``clockctl apply``'s path on PostgreSQL, next to the bare SQL.

Goal (issue 18): ≥ 20,000 schedules/s through the apply path. N definitions of the
scale scenario's mix (cron expressions in eight zones: 10 % every minute, the rest
hourly, daily, weekdays, monthly) go, on a fresh database of a durable PostgreSQL,
through what ``clockctl apply`` does with parsed files:

* **apply path**: ``Ops.apply`` — the plan (validation, first runs, ids) and
  ``Store.apply_schedules`` in one transaction, the plan of each batch made while
  the database writes the previous one;
* **plan then write**: ``Ops.plan_apply`` then ``Ops.apply_plan`` (no pipeline), in a new tenant;
* **plan only**: ``Ops.plan_apply`` of the same definitions in a new tenant (CPU of
  this process; nothing written);
* **bare SQL**: the set-based ``INSERT … SELECT FROM unnest`` a batched create could be
  (``bench.distributed._bare_create_rate``, batches of 5,000, no clockd code).

The load average is printed beside the figures: the machine is shared, and a busy
core slows the plan and the database alike. Sizes: 20,000 (``--quick``) / 100,000.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from bench.cluster import row
from bench.distributed import _bare_create_rate, _mix
from bench.servers import load_average, log, servers
from clockd.core.clock import ManualClock
from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.services.ops import Ops
from clockd.store.postgres.store import PostgresStore

Row = dict[str, object]


def definitions(n: int, prefix: str, seed: int = 42) -> list[ScheduleDef]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        expr, zone = _mix(rng)
        out.append(ScheduleDef(name=f"{prefix}-{i:07d}", kind=ScheduleKind.CRON, expr=expr, tz=zone,
                               target=NoopTarget()))  # fmt: skip
    return out


async def _apply(dsn: str, desired: Sequence[ScheduleDef], tenant: str) -> tuple[float, float, float]:
    """Seconds of (Ops.apply; Ops.plan_apply then Ops.apply_plan, in another tenant;
    Ops.plan_apply alone, in a third)."""
    store = PostgresStore(dsn, max_size=2)
    await store.open()
    try:
        ops = Ops(store, ManualClock(datetime.now(UTC)))
        began = time.perf_counter()
        plan, result = await ops.apply(desired, tenant)
        pipelined = time.perf_counter() - began
        if plan.problems or result is None or len(result.created) != len(desired):
            raise RuntimeError(f"apply failed: {plan.problems[:3]}")
        began = time.perf_counter()
        await ops.apply_plan(await ops.plan_apply(desired, tenant + "-steps"))
        steps = time.perf_counter() - began
        began = time.perf_counter()
        await ops.plan_apply(desired, tenant + "-plan")
        return pipelined, steps, time.perf_counter() - began
    finally:
        await store.close()


def run(quick: bool) -> list[Row]:
    n = 20_000 if quick else 100_000
    rows: list[Row] = []
    with servers() as srv:
        dsn = srv.new_database("apply")
        try:
            asyncio.run(_migrate(dsn))
            # Interleaved, twice: bare, apply, bare, apply (the machine's load moves).
            bare: list[float] = []
            applied: list[tuple[float, float, float]] = []
            for round_ in range(2):
                bare.append(_bare_create_rate(dsn, n))
                applied.append(asyncio.run(_apply(dsn, definitions(n, f"r{round_}"), f"apply{round_}")))
                a, b, c = applied[-1]
                log(f"apply {n:,}: round {round_ + 1}: bare {bare[-1]:,.0f}/s, apply path (pipelined) {n / a:,.0f}/s, "
                    f"plan then write {n / b:,.0f}/s, plan alone {n / c:,.0f}/s; {load_average()}")  # fmt: skip
            rate = max(n / a for a, _, _ in applied)
            steps_rate = max(n / b for _, b, _ in applied)
            plan_rate = max(n / c for _, _, c in applied)
            bare_rate = max(bare)
            rows += [
                row(f"create via clockctl apply path, {n // 1000}k", rate, "/s", "≥ 20,000/s", rate >= 20_000,
                    rate / bare_rate),
                row(f"create, plan then write (no pipeline), {n // 1000}k", steps_rate, "/s", "", None,
                    steps_rate / bare_rate),
                row(f"plan alone (Ops.plan_apply), {n // 1000}k", plan_rate, "/s"),
                row(f"create, bare set-based SQL, {n // 1000}k", bare_rate, "/s"),
                row("machine load after the apply figures", load_average(), ""),
            ]  # fmt: skip
        finally:
            srv.drop_database(dsn)
    return rows


async def _migrate(dsn: str) -> None:
    await PostgresStore(dsn, max_size=1).migrate()  # works on a closed store
