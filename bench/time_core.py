"""Time core benchmark: next-fire computations per second through the full wrapper.

For each case it measures, in the same run, raw cronsim iteration (naive wall
times, one ``CronSim`` iterator) and ``CronTimeline.next_after`` chained
(``t = next_after(t)``, as the materializer calls it), and compares them with
the goal: the wrapper keeps at least 60% of raw cronsim's speed. It also shows,
for information, ``next_after`` from unrelated instants (no chain to resume).

Both cases are plain expressions, which clockd walks without cronsim since issue 18
(``clockd.core.cron._plain_walls``): their ratio is now that walk, through the DST
wrapper, against raw cronsim (~6-16 × on this VM), no longer cronsim's own cost under the
wrapper. An expression cronsim still enumerates (``L``, ``W``, ``#``, a month list) pays
the wrapper as before (``tests/unit/test_timeline_*`` cover both paths' answers).

Run: ``python -m bench.time_core [--quick]`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from cronsim import CronSim

from clockd.core.cron import parse_cron
from clockd.core.timeline import CronTimeline
from clockd.core.zones import get_zone

GOAL = 0.60
CASES = (("0 9 * * *", "Europe/Paris"), ("*/5 * * * *", "America/New_York"))
START = datetime(2026, 1, 1, tzinfo=UTC)
NAIVE_START = datetime(2026, 1, 1)  # noqa: DTZ001  raw cronsim takes naive wall times


def _rate(step: Callable[[int], None], n: int, rounds: int) -> float:
    """Best of ``rounds`` runs of ``step(n)``, in operations per second."""
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        step(n)
        best = min(best, time.perf_counter() - began)
    return n / best


def _raw(expr: str) -> Callable[[int], None]:
    def step(n: int) -> None:
        it = CronSim(expr, NAIVE_START)
        for _ in range(n):
            next(it)

    return step


def _wrapped(expr: str, tz: str) -> Callable[[int], None]:
    timeline = CronTimeline(parse_cron(expr), get_zone(tz))

    def step(n: int) -> None:
        t: datetime | None = START
        for _ in range(n):
            assert t is not None
            t = timeline.next_after(t)

    return step


def _fresh(expr: str, tz: str, n: int) -> Callable[[int], None]:
    """next_after from unrelated instants: no resumable cursor, the full start-up path."""
    timeline = CronTimeline(parse_cron(expr), get_zone(tz))
    starts = [START + timedelta(minutes=433 * k, seconds=k % 60) for k in range(n)]

    def step(count: int) -> None:
        for t in starts[:count]:
            timeline.next_after(t)

    return step


def run(quick: bool) -> list[dict[str, Any]]:
    """Figures as ``{name, value, unit, target, ok}`` rows (see ``bench/__main__.py``)."""
    rounds = 3 if quick else 5
    rows: list[dict[str, Any]] = []
    for expr, tz in CASES:
        # ~0.1-0.5 s per measurement; the daily case covers years (both DST changes).
        n = 2_000 if quick else (8_000 if expr.startswith("0 9") else 30_000)
        raw = _rate(_raw(expr), n, rounds)
        ours = _rate(_wrapped(expr, tz), n, rounds)
        fresh = _rate(_fresh(expr, tz, n), n, rounds)
        ratio = ours / raw
        rows += [
            {"name": f"cronsim raw '{expr}'", "value": raw, "unit": "/s", "target": "", "ok": None},
            {
                "name": f"next_after '{expr}' {tz}",
                "value": ours,
                "unit": "/s",
                "target": "",
                "ok": None,
            },
            {
                "name": f"next_after '{expr}' unchained",
                "value": fresh,
                "unit": "/s",
                "target": "(information)",
                "ok": None,
            },
            {
                "name": f"wrapper/raw '{expr}'",
                "value": round(ratio * 100, 1),
                "unit": "%",
                "target": f">= {GOAL:.0%} of raw cronsim",
                "ok": ratio >= GOAL,
            },
        ]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.time_core", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    rows = run(args.quick)
    failed = 0
    for row in rows:
        verdict = "" if row["ok"] is None else ("PASS" if row["ok"] else "FAIL")
        failed += row["ok"] is False
        print(f"{row['name']:<46} {row['value']:>12,.1f} {row['unit']:<3} {row['target']:<26} {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
