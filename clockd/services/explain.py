"""``clockctl explain NAME --at INSTANT``: why a schedule did (or did not) run at an instant.

Answered from the records only — the schedule's version history, the occurrence at
that instant and its attempts — read in one snapshot by ``Store.reconcile_rows``, and
the time contract (``compile_spec``). The answers, in the order they are tried:

* an occurrence exists: it ``succeeded`` (attempts, exit code, duration), is
  ``running``, ``queued`` (planned, waiting, or retrying), went ``dead`` after N
  attempts (last error), was ``missed`` (its reason: past max_lateness), ``skipped``
  by the overlap policy, or ``canceled`` by an update, pause or delete (which version);
  two or more: ``doubled`` (a bug: the reconciler reports it too);
* no occurrence, and the instant is not one the schedule's definition in force then
  names: ``dst_gap`` (a local time the clocks skip: the time contract skips it),
  ``repeated_hour`` (the second pass of a repeated local time: a fixed-hour job runs
  once, at the first), or ``not_an_instant`` (with the nearest instants before/after);
* no occurrence at one of its instants: ``before_creation``, ``paused`` or
  ``deleted`` at that time (version history), ``not_yet_due`` (beyond the cursor:
  materialized about one horizon before it is due), ``not_materialized`` (an update or
  pause took effect before the cursor reached it: the old version never planned it and
  the new one starts at the old cursor), or ``missing`` (should exist: a bug, a row
  deleted by hand, or pruned after the retention period).

Pure apart from :func:`explain_at`, which reads the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

from clockd.core.durations import format_duration
from clockd.core.instants import format_instant, parse_instant
from clockd.core.model import Attempt, Occurrence, OccurrenceState, Schedule, ScheduleState
from clockd.core.spec import Skip, Spec, compile_spec
from clockd.core.zones import get_zone
from clockd.errors import ClockdError, InvalidInput
from clockd.services.reconcile import Status, is_fire, reconcile_schedule
from clockd.store import ScheduleHistory, Store, VersionRecord

_EPSILON = timedelta(microseconds=1)
# How far back to look for the nearest earlier instant (wider each time).
_LOOKBACK = (timedelta(days=1), timedelta(days=32), timedelta(days=367), timedelta(days=5 * 366))


class Why(StrEnum):
    SUCCEEDED = "succeeded"
    RUNNING = "running"
    QUEUED = "queued"
    DEAD = "dead"
    MISSED = "missed"
    SKIPPED_OVERLAP = "skipped_overlap"
    CANCELED = "canceled"
    DOUBLED = "doubled"
    DST_GAP = "dst_gap"
    REPEATED_HOUR = "repeated_hour"
    NOT_AN_INSTANT = "not_an_instant"
    BEFORE_CREATION = "before_creation"
    PAUSED = "paused"
    DELETED = "deleted"
    NOT_YET_DUE = "not_yet_due"
    NOT_MATERIALIZED = "not_materialized"
    MISSING = "missing"


class Made(Protocol):
    def __call__(
        self,
        why: Why,
        summary: str,
        facts: list[tuple[str, str]] | None = None,
        *,
        version: int | None = None,
        occurrences: tuple[Occurrence, ...] = (),
        attempts: tuple[Attempt, ...] = (),
        before: datetime | None = None,
        after: datetime | None = None,
    ) -> Explanation: ...


@dataclass(frozen=True, slots=True)
class At:
    """The instant asked about. ``wall`` is set when it was given as a local time in the
    schedule's zone that does not exist there (a DST gap); ``instant`` is then the
    instant zoneinfo maps it to (fold 0), used only to find the neighbours."""

    instant: datetime
    wall: datetime | None = None


@dataclass(frozen=True, slots=True)
class Explanation:
    schedule: str
    schedule_id: str
    tz: str
    at: At
    why: Why
    summary: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    version: int | None = None
    occurrences: tuple[Occurrence, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    before: datetime | None = None  # nearest instants of the definition in force
    after: datetime | None = None


def resolve_at(text: str, tz: str, now: datetime) -> At:
    """``--at``: an ISO instant with ``Z`` or an offset, ``now±duration``, or a local time
    in ``tz``; a local time that does not exist there (DST gap) is kept as a wall time."""
    try:
        return At(parse_instant(text, tz, now))
    except InvalidInput:
        try:
            wall = datetime.fromisoformat(text.strip())
        except ValueError:
            raise InvalidInput(
                f"--at: not an instant: {text!r} (e.g. 2026-03-29T02:30 in the schedule's zone, "
                "2026-03-29T00:30:00Z, or now-1h)"
            ) from None
        if wall.tzinfo is not None:
            raise
        return At(wall.replace(tzinfo=get_zone(tz), fold=0).astimezone(UTC), wall)


def explain(
    history: ScheduleHistory,
    occurrences: Sequence[Occurrence],
    attempts: Sequence[Attempt],
    at: At,
    now: datetime,
) -> Explanation:
    """Why ``history``'s schedule did or did not run at ``at`` (see the module docstring).
    ``occurrences``: its planned occurrences at that instant; ``attempts``: the attempts
    of the occurrence when there is exactly one."""
    tz = history.versions[-1].definition.tz if history.versions else "UTC"
    rows = tuple(o for o in occurrences if o.scheduled_for == at.instant and not o.manual and at.wall is None)

    def made(
        why: Why,
        summary: str,
        facts: list[tuple[str, str]] | None = None,
        *,
        version: int | None = None,
        occurrences: tuple[Occurrence, ...] = (),
        attempts: tuple[Attempt, ...] = (),
        before: datetime | None = None,
        after: datetime | None = None,
    ) -> Explanation:
        return Explanation(
            history.name, history.schedule_id, tz, at, why, summary, facts or [],
            version, occurrences, attempts, before, after,
        )  # fmt: skip

    if len(rows) > 1:
        # Canceled occurrences the expecting version planned again are superseded, not doubled.
        entries, _ = reconcile_schedule(history, rows, at.instant, at.instant)
        if entries and entries[0].status is not Status.DOUBLED and len(entries[0].occurrences) == 1:
            found = _from_occurrence(history, entries[0].occurrences[0], tuple(attempts), at, now, made)
            found.facts.append(("superseded", entries[0].detail.removeprefix("supersedes ")))
            return found
    if len(rows) > 1:
        listed = ", ".join(f"{o.id} (version {o.version}, {o.state})" for o in rows)
        return made(
            Why.DOUBLED,
            f"{len(rows)} occurrences exist for this one instant: {listed} — the contract allows one "
            "(`clockctl reconcile` reports it)",
            occurrences=rows,
        )
    if rows:
        return _from_occurrence(history, rows[0], tuple(attempts), at, now, made)

    version = _in_force(history, at.instant)
    spec = _spec(history, version) if version is not None else _spec(history, history.versions[0])
    facts: list[tuple[str, str]] = []
    if version is not None:
        facts.append(("version", _describe_version(version)))
    before, after = _neighbours(spec, at.instant) if spec is not None else (None, None)

    if at.wall is not None:
        skip = _gap_skip(spec, at.wall, before) if spec is not None else None
        if skip is not None:
            return made(
                Why.DST_GAP,
                f"{at.wall:%Y-%m-%d %H:%M} does not exist in {tz} (the clocks skip it): the time contract "
                "skips this run, it is not moved",
                [*facts, ("time contract", skip.note)],
                version=version.version if version else None,
                before=before,
                after=after,
            )
        return made(
            Why.NOT_AN_INSTANT,
            f"{at.wall:%Y-%m-%d %H:%M} does not exist in {tz} (a DST gap), and the expression does not name it",
            facts,
            version=version.version if version else None,
            before=before,
            after=after,
        )
    if spec is None or not is_fire(spec, at.instant):
        first = _first_pass(spec, at.instant, tz) if spec is not None else None
        if first is not None:
            return made(
                Why.REPEATED_HOUR,
                f"{_local(at.instant, tz)} is the second pass of a repeated local time (the clocks went back): "
                f"a fixed-hour job runs once, at the first pass, {_local(first, tz)} ({format_instant(first)})",
                facts,
                version=version.version if version else None,
                before=before,
                after=after,
            )
        gaps = _gaps_between(spec, before, after) if spec is not None else []
        if gaps:
            facts.append(("time contract", "; ".join(g.note for g in gaps)))
        return made(
            Why.NOT_AN_INSTANT,
            f"{format_instant(at.instant)} ({_local(at.instant, tz)}) is not an instant of "
            f"{_definition_text(version or history.versions[0])}",
            facts,
            version=version.version if version else None,
            before=before,
            after=after,
        )
    # One of its instants, and nothing was recorded for it.
    first_version = history.versions[0]
    if version is None or at.instant < first_version.valid_from:
        return made(
            Why.BEFORE_CREATION,
            f"the schedule did not exist yet: it was created at {format_instant(first_version.valid_from)}",
            facts,
            before=before,
            after=after,
        )
    if version.state is ScheduleState.PAUSED:
        until = f"until {format_instant(version.valid_to)}" if version.valid_to else "and still is"
        return made(
            Why.PAUSED,
            f"the schedule was paused from {format_instant(version.valid_from)} {until} (version "
            f"{version.version}): a paused schedule plans nothing, and resuming does not replay the pause",
            facts,
            version=version.version,
            before=before,
            after=after,
        )
    if version.state is ScheduleState.DELETED:
        return made(
            Why.DELETED,
            f"the schedule was deleted at {format_instant(version.valid_from)}",
            facts,
            version=version.version,
            before=before,
            after=after,
        )
    entries, _ = reconcile_schedule(history, (), at.instant, at.instant)
    entry = entries[0] if entries else None
    if entry is not None and entry.status is Status.NOT_YET_DUE:
        due = "in the future" if at.instant > now else "due, but the materializer has not reached it"
        return made(
            Why.NOT_YET_DUE,
            f"not yet materialized: it is {due}; the schedule's cursor is at "
            f"{format_instant(history.next_run_at) if history.next_run_at else '-'} and the materializer "
            "writes occurrences about one horizon before they are due",
            facts,
            version=version.version,
            before=before,
            after=after,
        )
    if entry is not None and entry.status is Status.MISSING:
        return made(
            Why.MISSING,
            "expected, but there is no record of it: it was deleted by hand, pruned after the retention "
            "period, or lost to a bug (`clockctl reconcile` reports it)",
            facts,
            version=version.version,
            before=before,
            after=after,
        )
    start = version.next_run_at
    return made(
        Why.NOT_MATERIALIZED,
        f"version {version.version} took effect at {format_instant(version.valid_from)} and starts at the "
        f"old cursor {format_instant(start) if start else '-'} (an instant is never planned twice); the "
        f"version before it had not planned this instant yet",
        facts,
        version=version.version,
        before=before,
        after=after,
    )


def _from_occurrence(
    history: ScheduleHistory,
    occ: Occurrence,
    attempts: tuple[Attempt, ...],
    at: At,
    now: datetime,
    made: Made,
) -> Explanation:
    facts: list[tuple[str, str]] = [("occurrence", occ.id), ("version", str(occ.version))]

    def about(why: Why, summary: str) -> Explanation:
        """The explanation of this occurrence, with the facts gathered by then."""
        return made(why, summary, facts, version=occ.version, occurrences=(occ,), attempts=attempts)

    last = attempts[-1] if attempts else None
    owner = next((v for v in history.versions if v.version == occ.version), None)
    spec = _spec(history, owner) if owner is not None else None
    if spec is not None:
        fire = next(spec.fires_after(occ.scheduled_for - _EPSILON), None)
        if fire is not None and fire.utc == occ.scheduled_for and fire.note:
            facts.append(("time contract", fire.note))
    state = occ.state
    if state is OccurrenceState.SUCCEEDED:
        took = last.finished_at - last.started_at if last and last.finished_at else None
        # "started", "finished" and "duration" are one attempt's, the one that succeeded:
        # the occurrence's own started_at is its first attempt's, which after a retry or a
        # redelivery would pair attempt 1's start with the last attempt's duration.
        started = last.started_at if last is not None else occ.started_at
        facts += [
            ("attempts", str(occ.attempts)),
            ("exit code", "-" if occ.exit_code is None else str(occ.exit_code)),
        ]
        if occ.started_at is not None and started != occ.started_at:
            facts.append(("first started", format_instant(occ.started_at)))
        facts += [("started", _opt(started)), ("finished", _opt(occ.finished_at))]
        if took is not None:
            facts.append(("duration", _seconds(took)))
        if last is not None:
            facts.append(("worker", last.worker_id))
        tries = f"{occ.attempts} attempt{'s' if occ.attempts != 1 else ''}"
        code = f", exit code {occ.exit_code}" if occ.exit_code is not None else ""
        return about(
            Why.SUCCEEDED,
            f"it ran and succeeded ({tries}{code}" + (f", {_seconds(took)}" if took else "") + ")",
        )
    if state is OccurrenceState.RUNNING:
        if last is not None:
            facts += [
                ("attempt", str(last.number)),
                ("started", format_instant(last.started_at)),
                ("worker", last.worker_id),
            ]
        since = f" since {format_instant(last.started_at)}" if last else ""
        return about(
            Why.RUNNING,
            f"it is running (attempt {occ.attempts}{since})",
        )
    if state in (OccurrenceState.SCHEDULED, OccurrenceState.ENQUEUED, OccurrenceState.RETRY_WAIT):
        facts.append(("available at", format_instant(occ.available_at)))
        if occ.reason:
            facts.append(("reason", occ.reason))
        if state is OccurrenceState.RETRY_WAIT:
            what = f"attempt {occ.attempts} failed; it waits to be retried"
        elif occ.available_at > now:
            what = f"planned: due at {format_instant(occ.available_at)}"
        else:
            what = "due and waiting in the queue for a worker"
        return about(Why.QUEUED, f"{what} ({state})")
    if state is OccurrenceState.DEAD:
        error = occ.last_error or (last.error if last else None)
        if error is None and occ.exit_code is not None:
            error = f"exit code {occ.exit_code}"
        facts += [("attempts", str(occ.attempts)), ("last error", error or "-")]
        if occ.reason:
            facts.append(("reason", occ.reason))
        return about(
            Why.DEAD,
            f"it went DEAD after {occ.attempts} attempt{'s' if occ.attempts != 1 else ''}: "
            f"{error or occ.reason or '?'} (in the dead-letter queue: clockctl dlq)",
        )
    if state is OccurrenceState.MISSED:
        facts.append(("reason", occ.reason or "-"))
        return about(
            Why.MISSED,
            f"it was missed: {occ.reason or 'no reason recorded'}",
        )
    if state is OccurrenceState.SKIPPED_OVERLAP:
        facts.append(("reason", occ.reason or "-"))
        return about(
            Why.SKIPPED_OVERLAP,
            f"it was skipped by the overlap policy: {occ.reason or '-'}",
        )
    # CANCELED: by the change that wrote the next version (update, pause, delete).
    successor = _successor(history, occ)
    by = ""
    if successor is not None:
        facts.append(("canceled by", _describe_version(successor)))
        by = (
            f" when version {successor.version} ({successor.state}) was written at "
            f"{format_instant(successor.valid_from)}"
        )
    facts.append(("reason", occ.reason or "-"))
    return about(
        Why.CANCELED,
        f"it was canceled before it ran{by}: {occ.reason or 'no reason recorded'}",
    )


def _successor(history: ScheduleHistory, occ: Occurrence) -> VersionRecord | None:
    later = [v for v in history.versions if v.version > occ.version]
    if occ.finished_at is not None:
        at_cancel = [v for v in later if v.valid_from == occ.finished_at]
        if at_cancel:
            return at_cancel[0]
    return later[0] if later else None


def _in_force(history: ScheduleHistory, instant: datetime) -> VersionRecord | None:
    for v in history.versions:
        if v.valid_from <= instant and (v.valid_to is None or instant < v.valid_to):
            return v
    return None


def _spec(history: ScheduleHistory, version: VersionRecord) -> Spec | None:
    d = version.definition
    try:
        return compile_spec(d.kind, d.expr, d.tz, history.created_at)
    except ClockdError:
        return None


def _neighbours(spec: Spec, instant: datetime) -> tuple[datetime | None, datetime | None]:
    after = spec.next_after(instant)
    before: datetime | None = None
    for lookback in _LOOKBACK:
        t = spec.next_after(instant - lookback)
        while t is not None and t < instant:
            before = t
            t = spec.next_after(t)
        if before is not None:
            break
    return before, after


def _gap_skip(spec: Spec, wall: datetime, before: datetime | None) -> Skip | None:
    start = before if before is not None else wall.replace(tzinfo=UTC) - timedelta(days=2)
    for event in spec.events_after(start):
        if isinstance(event, Skip):
            if event.wall == wall:
                return event
            if event.wall > wall:
                return None
        elif event.local.replace(tzinfo=None) > wall + timedelta(days=1):
            return None
    return None


def _gaps_between(spec: Spec, before: datetime | None, after: datetime | None) -> list[Skip]:
    if before is None or after is None:
        return []
    out: list[Skip] = []
    for event in spec.events_after(before):
        if not isinstance(event, Skip):
            break
        out.append(event)
    return out


def _first_pass(spec: Spec, instant: datetime, tz: str) -> datetime | None:
    """The first pass of ``instant``'s local wall time, if ``instant`` is the second pass
    of a repeated one and that first pass is an instant of ``spec``."""
    zone = get_zone(tz)
    local = instant.astimezone(zone)
    if not local.fold:
        return None
    first = local.replace(fold=0).astimezone(UTC)
    return first if first != instant and is_fire(spec, first) else None


def _local(instant: datetime, tz: str) -> str:
    return instant.astimezone(get_zone(tz)).isoformat(timespec="seconds")


def _definition_text(version: VersionRecord) -> str:
    d = version.definition
    what = {"cron": d.expr, "once": f"at {d.expr}", "every": f"every {d.expr}"}[str(d.kind)]
    return f"{what} ({d.tz}), version {version.version}"


def _describe_version(version: VersionRecord) -> str:
    until = f" to {format_instant(version.valid_to)}" if version.valid_to else ""
    start = f", starting at {format_instant(version.next_run_at)}" if version.next_run_at else ""
    return (
        f"{version.version} ({version.state}) from {format_instant(version.valid_from)}{until}: "
        f"{_definition_text(version)}{start}"
    )


def _opt(instant: datetime | None) -> str:
    return format_instant(instant) if instant is not None else "-"


def _seconds(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    return f"{seconds:.3f}s" if seconds < 60 else format_duration(timedelta(seconds=round(seconds)))


async def explain_at(store: Store, schedule: Schedule, text: str, now: datetime) -> Explanation:
    """Read what ``explain`` needs about ``schedule`` at ``--at text`` and explain it."""
    at = resolve_at(text, schedule.definition.tz, now)
    rows = await store.reconcile_rows(at.instant, at.instant, schedule.id)
    history = next((h for h in rows.schedules if h.schedule_id == schedule.id), None)
    if history is None:  # pragma: no cover - a live schedule always has its versions
        raise InvalidInput(f"schedule {schedule.name!r} has no version history")
    occurrences = [o for o in rows.occurrences if o.scheduled_for == at.instant]
    live = [o for o in occurrences if o.state is not OccurrenceState.CANCELED] or occurrences
    attempts = await store.list_attempts(live[0].id) if len(live) == 1 else []
    return explain(history, occurrences, attempts, at, now)
