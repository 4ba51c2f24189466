"""Model values as JSON documents (a stable interface) and as short human strings."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from clockd.core.durations import format_duration
from clockd.core.model import Attempt, Occurrence, Schedule, ScheduleKind


def iso(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    return (
        dt.astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%M:%S")
        + (f".{dt.microsecond:06d}".rstrip("0") if dt.microsecond else "")
        + "Z"
    )


def local(dt: datetime | None, tz: str) -> str:
    if dt is None:
        return "-"
    return dt.astimezone(ZoneInfo(tz)).isoformat(timespec="seconds")


def short(dt: datetime | None) -> str:
    if dt is None:
        return "-"
    return dt.astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%d %H:%M:%SZ")


def dur(td: timedelta | None) -> str | None:
    return format_duration(td) if td is not None else None


def when(schedule: Schedule) -> str:
    d = schedule.definition
    if d.kind is ScheduleKind.CRON:
        return d.expr
    if d.kind is ScheduleKind.ONCE:
        return f"at {d.expr}"
    return f"every {d.expr}"


def schedule_doc(s: Schedule) -> dict[str, Any]:
    d = s.definition
    return {
        "id": s.id,
        "name": d.name,
        "tenant": d.tenant,
        "kind": str(d.kind),
        "expr": d.expr,
        "tz": d.tz,
        "state": str(s.state),
        "version": s.version,
        "next_run_at": iso(s.next_run_at),
        "queue": d.queue,
        "target": d.target.to_json(),
        "timeout": dur(d.timeout),
        "retries": d.retry.retries,
        "backoff": dur(d.retry.backoff),
        "misfire": str(d.misfire),
        "max_lateness": dur(d.max_lateness),
        "overlap": str(d.overlap),
        "window": dur(d.window),
        "created_at": iso(s.created_at),
        "updated_at": iso(s.updated_at),
    }


def occurrence_doc(o: Occurrence) -> dict[str, Any]:
    return {
        "id": o.id,
        "schedule": o.schedule_name,
        "schedule_id": o.schedule_id,
        "version": o.version,
        "scheduled_for": iso(o.scheduled_for),
        "available_at": iso(o.available_at),
        "state": str(o.state),
        "attempts": o.attempts,
        "queue": o.queue,
        "manual": o.manual,
        "enqueued_at": iso(o.enqueued_at),
        "started_at": iso(o.started_at),
        "finished_at": iso(o.finished_at),
        "exit_code": o.exit_code,
        "reason": o.reason,
    }


def attempt_doc(a: Attempt) -> dict[str, Any]:
    return {
        "occurrence_id": a.occurrence_id,
        "attempt": a.number,
        "worker": a.worker_id,
        "started_at": iso(a.started_at),
        "finished_at": iso(a.finished_at),
        "outcome": str(a.outcome),
        "exit_code": a.exit_code,
        "signal": a.signal,
        "error": a.error,
        "output": a.output,
    }
