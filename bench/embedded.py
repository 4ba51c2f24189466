"""Embedded store drills: N ``once`` schedules due at the same second, one real ``clockd
run`` process on SQLite. Reports claim lag (claimed − scheduled) p50/p99 and executions/s.

* **noop**: 10,000 no-op jobs. Goal (issue 18, unchanged from "clockd on one machine"):
  p99 ≤ 2 s and ≥ 3,000 executions/s.
* **/bin/true**: 1,000 real commands (``--concurrency 16``). Issue 18 asks for the rate
  and whether spawning the child shows in the profile: with py-spy installed (a dev
  dependency, ``make install``) the process is sampled during the drill and the
  share of its samples inside ``subprocess``'s fork/exec (``_execute_child``,
  ``fork_exec``, ``posix_spawn``) is printed (``--profile DIR`` keeps the stacks as
  ``DIR/embedded-true.txt``); without py-spy the row says so.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import pyspy
from bench.cluster import percentile, row
from clockd.core.clock import SystemClock
from clockd.core.model import CommandTarget, NoopTarget, ScheduleDef, ScheduleKind, Target
from clockd.services.ops import Ops
from clockd.store.sqlite.store import SqliteStore

BIN = Path(sys.executable).parent


async def _create(db: Path, n: int, due: datetime, target: Target) -> float:
    store = SqliteStore(db)
    await store.open()
    ops = Ops(store, SystemClock())
    started = time.monotonic()
    # 256 adds in flight, as many clients would send them: the store's group commit makes
    # each batch one transaction and one fsync (synchronous = FULL); one add at a time
    # would be one fsync each, slower than the drill's lead time on a slow disk.
    for chunk in range(0, n, 256):
        await asyncio.gather(*(
            ops.add(ScheduleDef(name=f"once-{i:06d}", kind=ScheduleKind.ONCE, expr=due.isoformat(), tz="UTC",
                                target=target))
            for i in range(chunk, min(n, chunk + 256))
        ))  # fmt: skip
    elapsed = time.monotonic() - started
    await store.close()
    return n / elapsed


# Frames of starting a child process (asyncio's subprocess_exec goes through Popen).
# Frames as bench.pyspy shortens them ("subprocess.py:Popen._execute_child").
SPAWN_FRAMES = ("Popen.__init__", "Popen._execute_child", "fork_exec", "posix_spawn")


def _spy(pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    """``py-spy record`` of ``pid`` into ``out`` (raw folded stacks), if py-spy is installed."""
    spy = BIN / "py-spy"
    if not spy.exists():
        return None
    return subprocess.Popen(
        [str(spy), "record", "--format", "raw", "--rate", "100", "--nonblocking", "-o", str(out), "-p", str(pid)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _stop_spy(spy: subprocess.Popen[bytes]) -> None:
    """py-spy writes its file when the target exits or on SIGINT."""
    try:
        spy.wait(15)
    except subprocess.TimeoutExpired:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(10)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait(5)


def _drill(n: int, target: Target, concurrency: int, profile: bool) -> tuple[float, list[float], float, int, str]:
    """(creation rate, claim lags, seconds from due to the last finish, succeeded, the
    profile's spawn share as text — empty when not profiled)."""
    with tempfile.TemporaryDirectory(prefix="clockd-bench-") as tmp:
        home = Path(tmp)
        db = home / "clockd.db"
        # Due far enough ahead that creation finishes and the materializer and relay stage
        # everything before the instant (as in production, where the horizon is minutes).
        due = (datetime.now(UTC) + timedelta(seconds=15 + n / 1500)).replace(microsecond=0)
        create_rate = asyncio.run(_create(db, n, due, target))
        env = {
            **os.environ,
            "CLOCKD_HOME": str(home),
            "CLOCKD_METRICS_ADDR": "off",
            "CLOCKD_API_ADDR": "127.0.0.1:0",  # an ephemeral port: processes never collide
            "CLOCKD_LOG_LEVEL": "warning",
        }
        env.pop("CLOCKD_STORE", None)
        proc = subprocess.Popen(
            [str(BIN / "clockd"), "run", "--concurrency", str(concurrency), "--log-format", "text"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(home / "clockd.log").open("wb"),
        )
        spy = _spy(proc.pid, home / "profile.txt") if profile else None
        try:
            conn = sqlite3.connect(db, timeout=30)
            deadline = time.monotonic() + 120 + (due - datetime.now(UTC)).total_seconds()
            done = 0
            while time.monotonic() < deadline:
                done = conn.execute("SELECT count(*) FROM occurrences WHERE state = 'SUCCEEDED'").fetchone()[0]
                if done >= n:
                    break
                time.sleep(0.25)
            # Every ended attempt: the view since schema 0013 (a silent first success is kept on its occurrence).
            view = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'attempt_history'").fetchone()
            history = "attempt_history" if view else "attempts"
            rows = conn.execute(
                f"SELECT a.started_at - o.scheduled_for, a.finished_at FROM {history} a "
                "JOIN occurrences o ON o.id = a.occurrence_id WHERE a.attempt = 1"
            ).fetchall()
            conn.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            if spy is not None:
                _stop_spy(spy)
        shown = ""
        if profile:
            path = home / "profile.txt"
            if spy is None:
                shown = "py-spy not installed"
            elif path.exists():
                if keep := os.environ.get("BENCH_PROFILE"):  # kept for python -m bench.pyspy
                    Path(keep).mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, Path(keep) / "embedded-true.txt")
                share, total = pyspy.share(path, SPAWN_FRAMES)
                shown = f"{share * 100:.0f} % of {total:,} samples"  # the process's start-up included
            else:
                shown = "py-spy wrote no profile"
    lags = [r[0] / 1e6 for r in rows]
    due_us = int(due.timestamp() * 1e6)
    last_finish = max((r[1] for r in rows if r[1] is not None), default=due_us)
    span = max(1e-3, (last_finish - due_us) / 1e6)
    return create_rate, lags, span, done, shown


def drill(n: int) -> list[dict[str, Any]]:
    create_rate, lags, span, done, _ = _drill(n, NoopTarget(), 1000, profile=False)
    p99 = percentile(lags, 0.99)
    rate = done / span
    return [
        row(f"schedules created ({n:,}, one by one)", create_rate, "/s"),
        row("claim lag p50", percentile(lags, 0.5), "s"),
        row("claim lag p99", p99, "s", "≤ 2 s", p99 <= 2.0),
        row("executions/s (noop)", rate, "/s", "≥ 3,000/s", rate >= 3000),
        row("succeeded", done, "", f"= {n:,}", done == n),
    ]


def commands(n: int) -> list[dict[str, Any]]:
    _, lags, span, done, spawn = _drill(n, CommandTarget(argv=("/bin/true",)), 16, profile=True)
    label = f"/bin/true x {n:,}"
    return [
        row(f"{label}: executions/s (concurrency 16)", done / span, "/s", "reported"),
        row(f"{label}: claim lag p99", percentile(lags, 0.99), "s"),
        row(f"{label}: spawning in the profile", spawn, "", "fork/exec share of samples"),
        row(f"{label}: succeeded", done, "", f"= {n:,}", done == n),
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    return drill(10_000) + commands(1000)


if __name__ == "__main__":
    for figure in run("--quick" in sys.argv):
        print(figure)
