"""Embedded store drill: N ``once`` schedules due at the same second, no-op target, one real
``clockd run`` process on SQLite. Reports claim lag (claimed − scheduled) p50/p99 and
executions/s. Goal (issue "clockd on one machine"): p99 ≤ 2 s and ≥ 3,000 executions/s."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from clockd.core.clock import SystemClock
from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.services.ops import Ops
from clockd.store.sqlite.store import SqliteStore

BIN = Path(sys.executable).parent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def _create(db: Path, n: int, due: datetime) -> float:
    store = SqliteStore(db)
    await store.open()
    ops = Ops(store, SystemClock())
    started = time.monotonic()
    for i in range(n):
        await ops.add(
            ScheduleDef(
                name=f"once-{i:06d}",
                kind=ScheduleKind.ONCE,
                expr=due.isoformat(),
                tz="UTC",
                target=NoopTarget(),
            )
        )
    elapsed = time.monotonic() - started
    await store.close()
    return n / elapsed


def drill(n: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="clockd-bench-") as tmp:
        home = Path(tmp)
        db = home / "clockd.db"
        # Due far enough ahead that creation finishes and the materializer and relay stage
        # everything before the instant (as in production, where the horizon is minutes).
        due = (datetime.now(UTC) + timedelta(seconds=15 + n / 1500)).replace(microsecond=0)
        create_rate = asyncio.run(_create(db, n, due))
        env = {
            **os.environ,
            "CLOCKD_HOME": str(home),
            "CLOCKD_METRICS_ADDR": "off",
            "CLOCKD_API_ADDR": "127.0.0.1:0",  # an ephemeral port: processes never collide
            "CLOCKD_LOG_LEVEL": "warning",
        }
        env.pop("CLOCKD_STORE", None)
        proc = subprocess.Popen(
            [str(BIN / "clockd"), "run", "--concurrency", "1000", "--log-format", "text"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(home / "clockd.log").open("wb"),
        )
        try:
            conn = sqlite3.connect(db, timeout=30)
            deadline = time.monotonic() + 120 + (due - datetime.now(UTC)).total_seconds()
            done = 0
            while time.monotonic() < deadline:
                done = conn.execute("SELECT count(*) FROM occurrences WHERE state = 'SUCCEEDED'").fetchone()[0]
                if done >= n:
                    break
                time.sleep(0.25)
            rows = conn.execute(
                "SELECT a.started_at - o.scheduled_for, a.finished_at FROM attempts a "
                "JOIN occurrences o ON o.id = a.occurrence_id WHERE a.attempt = 1"
            ).fetchall()
            conn.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    lags = [r[0] / 1e6 for r in rows]
    due_us = int(due.timestamp() * 1e6)
    last_finish = max((r[1] for r in rows if r[1] is not None), default=due_us)
    span = max(1e-3, (last_finish - due_us) / 1e6)
    p99 = percentile(lags, 0.99)
    rate = done / span
    return [
        {
            "name": f"schedules created ({n:,}, one by one)",
            "value": create_rate,
            "unit": "/s",
            "target": "",
            "ok": None,
        },
        {"name": "claim lag p50", "value": percentile(lags, 0.5), "unit": "s", "target": "", "ok": None},
        {"name": "claim lag p99", "value": p99, "unit": "s", "target": "≤ 2 s", "ok": p99 <= 2.0},
        {"name": "executions/s (noop)", "value": rate, "unit": "/s", "target": "≥ 3,000/s", "ok": rate >= 3000},
        {"name": "succeeded", "value": done, "unit": "", "target": f"= {n:,}", "ok": done == n},
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    return drill(10_000)


if __name__ == "__main__":
    for row in run("--quick" in sys.argv):
        print(row)
