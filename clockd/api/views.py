"""The JSON forms the API reads and writes, and the one call into the schedule-file validator.

A schedule's body is ONE job of the schedule-file format (``man clockd-schedules``) as
JSON: :func:`definition_from_body` is the only place the API validates one, with the
loader ``clockctl apply`` uses (:func:`clockd.formats.schedfile.job_from_mapping`), so the API,
``apply`` and the JSON schema share one model and one validator. Responses carry the
job in the same form (:func:`clockd.formats.schedfile.job_document`): secret references such as
``${file:…}`` are written back as given, never resolved.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from clockd.api.problems import FieldError, Problem, pointer
from clockd.core.cron import parse_cron
from clockd.core.instants import format_instant
from clockd.core.limits import check_schedule_name
from clockd.core.model import (
    Attempt,
    CommandTarget,
    NoopTarget,
    Occurrence,
    Schedule,
    ScheduleDef,
    ScheduleKind,
    ScheduleState,
)
from clockd.core.spec import compile_spec
from clockd.core.timeline import CronTimeline, Skip
from clockd.core.zones import get_zone
from clockd.errors import InvalidInput
from clockd.formats.schedfile import Location, job_document, job_from_mapping
from clockd.formats.validate import MANAGED_BY
from clockd.store import AuditEntry, Replanned, RunSummary

NEXT_RUNS = 5


def definition_from_body(data: Any, tenant: str, where: str = "") -> ScheduleDef:
    """A job document (parsed JSON) as a validated definition of ``tenant``; 422 with
    one JSON pointer per refused field (``where`` prefixes them, e.g. ``/jobs/3``)."""
    if not isinstance(data, Mapping):
        raise Problem("invalid-input", "a schedule is a JSON object of schedule-file fields (man clockd-schedules)")
    shape = _shape(data)
    known = _DEFINITIONS.get(shape) if shape is not None else None
    if known is not None and _valid_name(data["name"]):
        return dataclasses.replace(known, name=data["name"], tenant=tenant)
    job, errors = job_from_mapping(data, Location("body", 1))
    if errors or job is None:
        fields = [FieldError(where + (pointer(e.field) if e.field else ""), e.message) for e in errors]
        first = errors[0] if errors else None
        detail = (f"{first.field}: {first.message}" if first.field else first.message) if first else "invalid job"
        if len(errors) > 1:
            detail += f" (and {len(errors) - 1} more problem(s): see errors)"
        raise Problem("invalid-input", detail, fields)
    if shape is not None and _pure(job.definition):
        if len(_DEFINITIONS) >= 1024:
            _DEFINITIONS.clear()
        _DEFINITIONS[shape] = job.definition
    return dataclasses.replace(job.definition, tenant=tenant)


# Validated definitions by the body they came from, its name left out: creates that differ
# only by name (a client scheduling many jobs of one kind) validate the name alone, not
# the whole job again (~60 µs of the loader). Invariant: a body hits only when the loader
# gave that definition for the same body with another name, and its own name passes the
# loader's checks of a name (``check_name``: neither blank nor too long, no control or
# invisible character; NUL is a control character); anything else goes through the
# loader, errors included. Only definitions whose validation is a pure function of the
# body are kept: no ``at`` (read relative to now), no ``user`` (looked up in the system's
# users), no HTTP target (the egress policy may change).
_DEFINITIONS: dict[str, ScheduleDef] = {}


def _shape(data: Mapping[str, Any]) -> str | None:
    """The body without its name, as a key (None: a name that is not text, or a body
    that is not plain JSON)."""
    if not isinstance(data.get("name"), str):
        return None
    try:
        return json.dumps({k: v for k, v in data.items() if k != "name"}, separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def _valid_name(name: str) -> bool:
    try:
        check_schedule_name(name)  # the validator's own rule (the fast path must not skip it)
    except InvalidInput:
        return False
    return True


def _pure(definition: ScheduleDef) -> bool:
    if definition.kind is ScheduleKind.ONCE:
        return False
    target = definition.target
    return isinstance(target, NoopTarget) or (isinstance(target, CommandTarget) and target.user is None)


def next_runs(
    definition: ScheduleDef, after: datetime, anchor: datetime, count: int = NEXT_RUNS
) -> list[dict[str, Any]]:
    """The next ``count`` runs strictly after ``after``: ``at`` (UTC), ``local`` (with its
    offset in the schedule's zone) and ``note`` (DST: a repeated hour, or the wall times
    a gap skipped since the previous run; None otherwise)."""
    if definition.kind is ScheduleKind.CRON:
        # Cron instants fall on whole seconds (zone offsets are whole seconds), so the runs
        # strictly after ``after`` are those after its second: one walk of the timeline
        # (~0.5 ms, the most expensive part of a create) serves every answer of that second.
        runs = _cron_runs(definition.expr, definition.tz, after.replace(microsecond=0), count)
        return [dict(run) for run in runs]  # copies: the cached ones are shared
    zone = get_zone(definition.tz)
    out: list[dict[str, Any]] = []
    spec = compile_spec(definition.kind, definition.expr, definition.tz, anchor)
    t: datetime | None = after
    while len(out) < count:
        t = spec.next_after(t) if t is not None else None
        if t is None:
            break
        out.append({"at": format_instant(t), "local": t.astimezone(zone).isoformat(), "note": None})
    return out


@functools.lru_cache(maxsize=1024)
def _cron_runs(expr: str, tz: str, after: datetime, count: int) -> tuple[dict[str, Any], ...]:
    out: list[dict[str, Any]] = []
    skipped: list[Skip] = []
    for event in CronTimeline(parse_cron(expr), get_zone(tz)).events_after(after):
        if isinstance(event, Skip):
            skipped.append(event)
            continue
        notes = [s.note for s in skipped[:3]] + ([event.note] if event.note else [])
        note = "; ".join(notes) or None
        out.append({"at": format_instant(event.utc), "local": event.local.isoformat(), "note": note})
        skipped = []
        if len(out) >= count:
            break
    return tuple(out)


_SHAPE_FIELDS = tuple(f.name for f in dataclasses.fields(ScheduleDef) if f.name != "name")
_JOBS: dict[tuple[Any, ...], dict[str, Any]] = {}


def job_view(definition: ScheduleDef) -> dict[str, Any]:
    """``job_document(definition)``, cached by everything but the name: a page of
    schedules that share their shape (most do) costs one export, not one each. The
    cached dicts are shared between answers and never mutated (merge patches copy)."""
    key = tuple(getattr(definition, f) for f in _SHAPE_FIELDS)
    unnamed = _JOBS.get(key)
    if unnamed is None:
        if len(_JOBS) >= 4096:
            _JOBS.clear()
        unnamed = _JOBS[key] = {k: v for k, v in job_document(definition).items() if k != "name"}
    return {"name": definition.name, **unnamed}


def _opt(instant: datetime | None) -> str | None:
    return None if instant is None else format_instant(instant)


def etag(schedule: Schedule) -> str:
    return f'"{schedule.version}"'


def schedule_view(schedule: Schedule, now: datetime, *, runs: bool = True) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": schedule.name,
        "id": schedule.id,
        "tenant": schedule.definition.tenant,
        "version": schedule.version,
        "state": schedule.state.value,
        "job": job_view(schedule.definition),
        # The planning cursor of an active schedule; a paused one plans nothing, and a
        # cursor shown for it read as a run to come (resume moves it anyway).
        "next_run_at": _opt(schedule.next_run_at) if schedule.state is ScheduleState.ACTIVE else None,
        "created_at": format_instant(schedule.created_at),
        "updated_at": format_instant(schedule.updated_at),
        "paused_at": _opt(schedule.paused_at),
        # The job document leaves the reserved apply label out; clients that plan an apply
        # (clockctl apply --server) need to know which schedules apply owns.
        "managed_by": dict(schedule.definition.labels).get(MANAGED_BY),
    }
    if runs:
        active = schedule.state.value == "active"
        doc["next_runs"] = next_runs(schedule.definition, now, schedule.created_at) if active else []
    return doc


def summary_view(summary: RunSummary | None) -> dict[str, Any] | None:
    """A schedule's runs as ``clockctl list`` shows them (``Store.run_summaries``)."""
    if summary is None:
        return None
    return {
        "next_start": _opt(summary.next_start),
        "last_scheduled_for": _opt(summary.last_scheduled_for),
        "last_started_at": _opt(summary.last_started_at),
        "last_state": None if summary.last_state is None else summary.last_state.value,
        "last_exit_code": summary.last_exit_code,
    }


def replanned_view(item: Replanned) -> dict[str, Any]:
    """One instant an update took over from the older version (``occurrence_id`` and
    ``state`` null: the new version does not fire then, and it was canceled)."""
    return {
        "scheduled_for": format_instant(item.scheduled_for),
        "version": item.version,
        "replaces": item.replaced,
        "occurrence_id": item.occurrence_id,
        "state": None if item.state is None else item.state.value,
    }


def occurrence_view(occurrence: Occurrence) -> dict[str, Any]:
    return {
        "id": occurrence.id,
        "schedule": occurrence.schedule_name,
        "schedule_id": occurrence.schedule_id,
        "version": occurrence.version,
        "scheduled_for": format_instant(occurrence.scheduled_for),
        "available_at": format_instant(occurrence.available_at),
        "state": occurrence.state.value,
        "attempts": occurrence.attempts,
        "queue": occurrence.queue,
        "manual": occurrence.manual,
        "enqueued_at": _opt(occurrence.enqueued_at),
        "started_at": _opt(occurrence.started_at),
        "finished_at": _opt(occurrence.finished_at),
        "exit_code": occurrence.exit_code,
        "reason": occurrence.reason,
        "last_error": occurrence.last_error,
    }


def attempt_view(attempt: Attempt, *, output: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "attempt": attempt.number,
        "worker_id": attempt.worker_id,
        "started_at": format_instant(attempt.started_at),
        "finished_at": _opt(attempt.finished_at),
        "outcome": attempt.outcome.value,
        "exit_code": attempt.exit_code,
        "signal": attempt.signal,
        "error": attempt.error,
    }
    if output:
        doc["output"] = attempt.output
    return doc


def audit_view(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": format_instant(entry.at),
        "tenant": entry.tenant,
        "actor": entry.actor,
        "action": entry.action,
        "target": entry.target,
        "before_version": entry.before_version,
        "after_version": entry.after_version,
        "detail": dict(entry.detail),
    }


def page(items: Sequence[dict[str, Any]], next_cursor: str | None) -> dict[str, Any]:
    return {"items": list(items), "next_cursor": next_cursor}
