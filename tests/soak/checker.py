"""The independent checker of the drills and the soak: not clockd's reconciler.

Where ``clockctl reconcile`` asks the store what it planned, this recomputes what
should have happened from first principles and compares it with what the jobs
themselves say they did:

* expected instants: from each schedule version's definition (``schedule_versions``),
  over the part of the window that version was in force, with the time core —
  ``CronTimeline`` for cron, ``anchor + k·interval`` for every (the anchor is the
  schedule's ``created_at``), the instant itself for once;
* executions: the job command (``job_argv``) appends one line per run to its own log
  file — occurrence id, instant, attempt, the wall time it started — outside clockd.

It then proves, and reports as problems when not: every expected instant has exactly
one planned occurrence (none doubled) that either ran (a log line) or is recorded with
its reason (MISSED, SKIPPED_OVERLAP, CANCELED, DEAD with a ``reason``); every log line
has an attempt record of the same attempt; no run started before its instant; no
attempt ran twice. It also counts executions, redeliveries (attempt > 1) and the start
lag (p50/p99) of first attempts, optionally outside given fault windows, with the number
of samples behind it: with none (a short run, or every instant inside a fault window)
the lag is unknown, printed ``n/a``, never 0.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg

from clockd.core.cron import parse_cron
from clockd.core.durations import parse_duration
from clockd.core.instants import parse_instant
from clockd.core.timeline import CronTimeline

# One line per execution, appended (O_APPEND, well under PIPE_BUF: atomic) by the job.
_LINE = (
    'printf "%s %s %s %s\\n" "$CLOCKD_OCCURRENCE_ID" "$CLOCKD_SCHEDULED_FOR" "$CLOCKD_ATTEMPT" "$(date +%s.%N)" >> "$0"'
)
RECORDED = frozenset({"MISSED", "SKIPPED_OVERLAP", "CANCELED", "DEAD"})


def job_argv(log: Path, *, sleep: float = 0.0, fail: bool = False) -> list[str]:
    """A job that writes its own execution record to ``log``, then sleeps/fails as asked."""
    script = _LINE
    if sleep:
        script += f"; sleep {sleep}"
    if fail:
        script += "; exit 3"
    return ["/bin/sh", "-c", script, str(log)]


@dataclass(frozen=True, slots=True)
class Execution:
    occurrence_id: str
    scheduled_for: datetime
    attempt: int
    started: datetime


@dataclass
class Report:
    expected: int = 0
    executions: int = 0
    redeliveries: int = 0
    # None when no first attempt started outside the fault windows: unknown, not 0.
    lag_p50: float | None = None
    lag_p99: float | None = None
    lag_samples: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    @property
    def unaccounted(self) -> int:
        return len(self.problems)

    def lag(self) -> str:
        """``start lag p50 …s p99 …s (N samples)``, or ``n/a`` for both without samples."""
        p50, p99 = (f"{v:.3f}s" if v is not None else "n/a" for v in (self.lag_p50, self.lag_p99))
        samples = "1 sample" if self.lag_samples == 1 else f"{self.lag_samples} samples"
        return f"start lag p50 {p50} p99 {p99} ({samples})"

    def summary(self) -> str:
        return (
            f"checker: {self.expected} instants checked, {self.executions} executions, "
            f"{self.redeliveries} later attempts (retries and redeliveries), {self.lag()}, "
            f"outcomes {dict(self.outcomes)}, {self.unaccounted} unaccounted"
        )


def read_log(path: Path) -> list[Execution]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue  # a run killed mid-write; its attempt is then redelivered
        oid, instant, attempt, started = parts
        out.append(
            Execution(
                oid,
                datetime.fromisoformat(instant.replace("Z", "+00:00")),
                int(attempt),
                datetime.fromtimestamp(float(started), UTC),
            )
        )
    return out


def expected_instants(kind: str, expr: str, tz: str, anchor: datetime, lo: datetime, hi: datetime) -> list[datetime]:
    """Instants in (lo, hi] of one definition, computed with the time core."""
    if kind == "cron":
        out = []
        for fire in CronTimeline(parse_cron(expr), ZoneInfo(tz)).fires_after(lo):
            if fire.utc > hi:
                break
            out.append(fire.utc)
        return out
    if kind == "every":
        step = parse_duration(expr)
        k = max(1, math.floor((lo - anchor) / step))
        while anchor + k * step <= lo:
            k += 1
        out = []
        while anchor + k * step <= hi:
            out.append(anchor + k * step)
            k += 1
        return out
    instant = parse_instant(expr, tz)
    return [instant] if lo < instant <= hi else []


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def check(
    dsn: str,
    logs: Sequence[Path],
    start: datetime,
    end: datetime,
    *,
    schedules: Sequence[str] | None = None,
    must_succeed: bool = True,
    fault_windows: Sequence[tuple[datetime, datetime]] = (),
) -> Report:
    """Check every instant in (start, end] of the named schedules (all when None).

    ``must_succeed``: an instant recorded MISSED/SKIPPED/DEAD with a reason counts as a
    problem too (the drills expect every instant to run; the soak accepts a reason)."""
    report = Report()
    with psycopg.connect(dsn, autocommit=True) as conn:
        sched_rows = conn.execute("SELECT id, name, created_at FROM schedules").fetchall()
        versions = conn.execute(
            "SELECT schedule_id, version, state, valid_from, valid_to, definition FROM schedule_versions"
        ).fetchall()
        occ_rows = conn.execute(
            "SELECT id, schedule_id, scheduled_for, state, reason FROM occurrences WHERE NOT manual"
        ).fetchall()
        attempt_rows = conn.execute("SELECT occurrence_id, attempt FROM attempt_history").fetchall()
    wanted = {sid for sid, name, _ in sched_rows if schedules is None or name in schedules}
    anchors = {sid: created for sid, _, created in sched_rows}
    names = {sid: name for sid, name, _ in sched_rows}

    occurrences: dict[tuple[str, datetime], list[tuple[str, str, str | None]]] = defaultdict(list)
    for oid, sid, instant, state, reason in occ_rows:
        occurrences[(sid, instant)].append((oid, state, reason))
    attempts = {(oid, n) for oid, n in attempt_rows}
    executions = [e for log in logs for e in read_log(log)]
    ran: dict[str, list[Execution]] = defaultdict(list)
    for e in executions:
        ran[e.occurrence_id].append(e)

    expected: set[tuple[str, datetime]] = set()
    for sid, _version, state, valid_from, valid_to, definition in versions:
        if sid not in wanted or state != "active":
            continue
        d: dict[str, Any] = definition if isinstance(definition, dict) else json.loads(definition)
        lo, hi = max(start, valid_from), min(end, valid_to or end)
        if hi <= lo:
            continue
        for instant in expected_instants(d["kind"], d["expr"], d["tz"], anchors[sid], lo, hi):
            expected.add((sid, instant))
    report.expected = len(expected)

    for key in sorted(expected):
        sid, instant = key
        rows = occurrences.get(key, [])
        what = f"{names[sid]} @ {instant.isoformat()}"
        if not rows:
            report.problems.append(f"missing: {what} has no occurrence")
            continue
        if len(rows) > 1:
            report.problems.append(f"doubled: {what} materialized {len(rows)} times")
        oid, state, reason = rows[0]
        report.outcomes[state] += 1
        if state in RECORDED:
            if must_succeed or not reason:
                report.problems.append(f"not run: {what} is {state} ({reason})")
        elif state == "SUCCEEDED":
            if not ran.get(oid):
                report.problems.append(f"no execution: {what} SUCCEEDED but its job never wrote a line")
        else:
            report.problems.append(f"unfinished: {what} is still {state}")

    checked = {
        oid
        for (sid, instant), rows in occurrences.items()
        if sid in wanted and start < instant <= end
        for oid, _, _ in rows
    }
    lags: list[float] = []
    for oid, runs in ran.items():
        if oid not in checked:
            continue
        seen = Counter(e.attempt for e in runs)
        for attempt, n in seen.items():
            if n > 1:
                report.problems.append(f"attempt {attempt} of {oid} ran {n} times")
        for e in runs:
            report.executions += 1
            if e.attempt > 1:
                report.redeliveries += 1
            if (oid, e.attempt) not in attempts and not _running(dsn, oid, e.attempt):
                report.problems.append(f"execution without an attempt record: {oid} attempt {e.attempt}")
            if e.started < e.scheduled_for:
                early = (e.scheduled_for - e.started).total_seconds()
                report.problems.append(f"early: {oid} started {early:.3f}s before its instant")
            if e.attempt == 1 and not any(a <= e.scheduled_for <= b + timedelta(seconds=5) for a, b in fault_windows):
                lags.append((e.started - e.scheduled_for).total_seconds())
    report.lag_p50, report.lag_p99, report.lag_samples = _percentile(lags, 0.5), _percentile(lags, 0.99), len(lags)
    return report


def _running(dsn: str, oid: str, attempt: int) -> bool:
    """An attempt still running has its lease in ``dispatch``; its row is written at the end."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT 1 FROM occurrences WHERE id = %s AND attempts = %s AND state = 'RUNNING'", (oid, attempt)
        ).fetchone()
    return row is not None
