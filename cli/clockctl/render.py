"""Model values as JSON documents (a stable interface) and as short human strings.

Secrets: a target's documents show secret *references* (``${file:/etc/x}``) as
they are — resolving them is the worker's business, never the CLI's. A literal
value stored under a secret-looking name (``Authorization``, ``*TOKEN*``,
``*PASSWORD*``, …) is shown as ``***``, and so is a URL's password or secret-looking
query value: ``show`` and ``list`` output ends up in tickets and screenshots.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from clockd.core.durations import format_duration
from clockd.core.instants import iso_utc
from clockd.core.model import (
    Attempt,
    CommandTarget,
    HttpTarget,
    Occurrence,
    OccurrenceState,
    Schedule,
    ScheduleDef,
    ScheduleKind,
    ScheduleState,
    Target,
    redact_url,
)
from clockd.core.sizes import format_size
from clockd.runner import secrets

if TYPE_CHECKING:
    from clockd.store import Replanned

REDACTED = "***"
_SENSITIVE = re.compile(r"(?i)pass|secret|token|key|auth|cookie|credential|session|signature|private")


# Every JSON instant clockctl prints (the commands import it from here).
iso = iso_utc


def redact_value(name: str, value: str) -> str:
    """``value`` for display: kept if it references secrets or its name looks harmless."""
    if secrets.has_references(value) or not _SENSITIVE.search(name):
        return value
    return REDACTED if value else value


def target_doc(target: Target) -> dict[str, Any]:
    """The target's JSON document with literal secrets masked (see the module docstring)."""
    doc = target.to_json()
    if isinstance(target, CommandTarget):
        doc["env"] = {k: redact_value(k, v) for k, v in target.env}
    elif isinstance(target, HttpTarget):
        doc["url"] = redact_url(target.url)
        doc["headers"] = [[k, redact_value(k, v)] for k, v in target.headers]
    return doc


def target_rows(target: Target) -> list[tuple[str, str]]:
    """Extra ``show`` rows for what a target runs with (user, env, limits, headers)."""
    rows: list[tuple[str, str]] = []
    if isinstance(target, CommandTarget):
        if target.user:
            rows.append(("user", target.user + (f" (group {target.group})" if target.group else "")))
        if target.cwd:
            rows.append(("cwd", target.cwd))
        for key, value in target.env:
            rows.append(("env", f"{key}={redact_value(key, value)}"))
        if target.env_from_file:
            rows.append(("env file", target.env_from_file))
        if target.stdin is not None:
            rows.append(("stdin", f"{len(target.stdin.encode())} bytes"))
        limits = []
        if target.memory_limit is not None:
            limits.append(f"memory {format_size(target.memory_limit)}")
        if target.cpu_limit is not None:
            limits.append(f"cpu {target.cpu_limit}s")
        if target.nproc_limit is not None:
            limits.append(f"nproc {target.nproc_limit}")
        if limits:
            rows.append(("limits", ", ".join(limits)))
    elif isinstance(target, HttpTarget):
        for key, value in target.headers:
            rows.append(("header", f"{key}: {redact_value(key, value)}"))
        if target.body is not None:
            rows.append(("body", f"{len(target.body.encode())} bytes"))
        rows.append(("expect", ", ".join(str(s) for s in target.expect_status) or "2xx"))
        rows.append(("tls", "NOT verified (--insecure)" if target.insecure else "verified"))
    return rows


def stamp(dt: datetime | None) -> str:
    """An instant for people (tables, messages): UTC ISO 8601 to the second. JSON keeps
    :func:`iso`'s full precision; an instant to the microsecond is noise on a screen."""
    if dt is None:
        return "-"
    return dt.astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%M:%SZ")


def until(dt: datetime, now: datetime) -> str:
    """How far ``dt`` is from ``now``, the way ``systemctl list-timers`` says it:
    ``in 3h 12m``, ``in 45s``, ``2d 1h ago`` (two units at most)."""
    seconds = int((dt - now).total_seconds())
    ahead = seconds >= 0
    seconds = abs(seconds)
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    first = next(i for i, (_, size) in enumerate(units) if seconds >= size or size == 1)
    big, big_size = units[first]
    text = f"{seconds // big_size}{big}"
    if first + 1 < len(units):
        small, small_size = units[first + 1]
        rest = seconds % big_size // small_size
        if rest:
            text += f" {rest}{small}"
    return f"in {text}" if ahead else f"{text} ago"


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
    return describe_when(schedule.definition)


def describe_when(d: ScheduleDef) -> str:
    if d.kind is ScheduleKind.CRON:
        return d.expr
    if d.kind is ScheduleKind.ONCE:
        return f"at {d.expr}"
    return f"every {d.expr}"


def shown_state(s: Schedule) -> str:
    """The state people see: ``done`` for an ``--at`` schedule whose one run has been
    planned (nothing more will run; ``clockctl runs NAME`` has its outcome), else the
    stored state (active, paused, deleted)."""
    if s.state is ScheduleState.ACTIVE and s.definition.kind is ScheduleKind.ONCE and s.next_run_at is None:
        return "done"
    return str(s.state)


def notify_rows(d: ScheduleDef) -> list[tuple[str, str]]:
    """``show`` rows for the schedule's notifications (URLs with secrets masked)."""
    return [(n.event.field, redact_url(n.describe()) if n.url else n.describe()) for n in d.notify]


def notify_doc(d: ScheduleDef) -> dict[str, Any]:
    return {n.event.field: {**n.to_json(), **({"url": redact_url(n.url)} if n.url else {})} for n in d.notify}


def schedule_doc(s: Schedule) -> dict[str, Any]:
    d = s.definition
    return {
        "id": s.id,
        "name": d.name,
        "tenant": d.tenant,
        "kind": str(d.kind),
        "expr": d.expr,
        "tz": d.tz,
        "state": shown_state(s),
        "version": s.version,
        # As the API's view: no planning cursor for a schedule that plans nothing.
        "next_run_at": iso(s.next_run_at) if s.state is ScheduleState.ACTIVE else None,
        "queue": d.queue,
        "target": target_doc(d.target),
        "timeout": dur(d.timeout),
        "retries": d.retry.retries,
        "backoff": dur(d.retry.backoff),
        "misfire": str(d.misfire),
        "max_lateness": dur(d.max_lateness),
        "overlap": str(d.overlap),
        "window": dur(d.window),
        "catch_up_limit": d.catch_up_limit,
        "permanent_exit_codes": list(d.retry.permanent_exit_codes),
        "notify": notify_doc(d),
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
        "last_error": o.last_error,
    }


def version_doc(
    version: int, valid_from: datetime, valid_to: datetime | None, d: ScheduleDef, state: ScheduleState
) -> dict[str, Any]:
    """One ``schedule_versions`` row: when it was current and what it said."""
    return {
        "version": version,
        "valid_from": iso(valid_from),
        "valid_to": iso(valid_to),
        "state": str(state),
        "kind": str(d.kind),
        "expr": d.expr,
        "tz": d.tz,
        "target": target_doc(d.target),
        "misfire": str(d.misfire),
        "overlap": str(d.overlap),
        "window": dur(d.window),
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


# -- what an update or apply re-planned (Store.change_schedule) ----------------------------


def replanned_doc(items: Sequence[Replanned]) -> dict[str, list[dict[str, Any]]]:
    """``-o json``'s ``replanned`` (taken over by the new version) and ``dropped`` (the
    new version does not fire then: canceled) instants."""
    return {
        "replanned": [
            {
                "scheduled_for": iso(r.scheduled_for),
                "occurrence_id": r.occurrence_id,
                "version": r.version,
                "state": None if r.state is None else str(r.state),
                "replaces": r.replaced,
            }
            for r in items
            if r.kept
        ],
        "dropped": [{"scheduled_for": iso(r.scheduled_for), "occurrence_id": r.replaced} for r in items if not r.kept],
    }


def replanned_lines(items: Sequence[Replanned], name: str | None = None) -> list[str]:
    """What a change did with the pending instants it canceled, one line each for the
    re-planned and the dropped ones (none when it canceled nothing pending)."""
    of = f" of {name}" if name else ""
    kept = [r for r in items if r.kept]
    dropped = [r for r in items if not r.kept]
    lines = []
    if kept:
        missed = sum(1 for r in kept if r.state is OccurrenceState.MISSED)
        note = f" ({missed} of them MISSED: past max_lateness)" if missed else ""
        lines.append(
            f"re-planned {len(kept)} upcoming run{'s' if len(kept) != 1 else ''}{of} under version "
            f"{kept[0].version}{note}: {', '.join(stamp(r.scheduled_for) for r in kept[:5])}"
            + (", …" if len(kept) > 5 else "")
        )
    if dropped:
        lines.append(
            f"dropped {len(dropped)} run{'s' if len(dropped) != 1 else ''}{of}: version {dropped[0].version} "
            f"does not fire at {', '.join(stamp(r.scheduled_for) for r in dropped[:5])}"
            + (", …" if len(dropped) > 5 else "")
        )
    return lines
