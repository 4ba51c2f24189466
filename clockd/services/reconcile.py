"""The reconciler: is every instant the time contract expected accounted for, exactly once?

Pure logic over what ``Store.reconcile_rows`` reads (one snapshot): each schedule's
version history and the planned occurrences of a range. ``clockctl reconcile``, the
leader (every minute, exported as ``clockd_occurrences_unaccounted``), ``clockctl
status`` and ``clockctl explain`` all use it.

What a schedule expects, from its versions (``schedule_versions``) and the time
contract (``compile_spec(kind, expr, tz, created_at)``):

* an **active** version ``k`` expects the instants of its definition from its start
  cursor ``s_k`` (the schedule's ``next_run_at`` when the version was written: the new
  version starts at the old cursor, see ``clockd.services.ops.cursor_after_update``; the
  instants before it that the old version had planned are re-planned, below) up to,
  not including, the end of its validity ``u_k`` (``valid_to``). Versions written
  before schema 0003 have no recorded start: they start strictly after ``valid_from``;
* a **paused** or **deleted** version expects nothing;
* instants of an active version at or after ``u_k`` and before the next version's start
  ``s_{k+1}`` may have been materialized ahead of time (up to the horizon) before the
  change: they are *optional* — absent is fine, present once is accounted for
  (normally CANCELED by the change, with its reason);
* instants of the current active version at or after the schedule's cursor
  (``next_run_at``) are **not yet due** (not materialized yet), never missing;
* an update **re-plans** (``Store.change_schedule``): an occurrence of version ``k`` that
  the change to ``k + 1`` canceled before any attempt is expected again under ``k + 1``
  when that version fires then; its occurrence is accounted for (and the canceled one is
  history), its absence is **missing**. An occurrence of version ``k + 1`` at an instant
  version ``k`` expected or had materialized ahead is such a re-plan, not unexpected.

Every expected instant must have exactly one planned occurrence, in one of the
accounted states: SUCCEEDED, RUNNING, queued (SCHEDULED, ENQUEUED, RETRY_WAIT), DEAD,
MISSED, SKIPPED_OVERLAP, CANCELED — each with its reason where it has one. The
problems: **missing** (no occurrence), **doubled** (two or more occurrences at one
instant that ran or may still run, whatever their versions; rows that never ran — canceled
before any attempt, missed, skipped — are superseded history, not a double fire),
**unexpected** (an occurrence at an instant no
version expects, or of another version than the one that expects it). DST gap
instants are never expected (the contract skips them); a repeated wall time of a
fixed-hour job is expected once, at its first instant.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from clockd.core.instants import format_instant
from clockd.core.model import Occurrence, OccurrenceState, ScheduleState
from clockd.core.spec import Spec, compile_spec, fires_at
from clockd.errors import ClockdError
from clockd.store import ReconcileRows, ScheduleHistory, Store, VersionRecord

_EPSILON = timedelta(microseconds=1)
# Above this many live schedules, the periodic reconciliations (the leader's, the
# dashboard's health page) are skipped: one loads every live schedule's versions, on the
# embedded store on its only database thread (100,000 took 37 s there under load,
# stalling every other read and write). `clockctl reconcile NAME` or per tenant still works.
RECONCILE_MAX_SCHEDULES = 20_000


class Status(StrEnum):
    """How one instant is accounted for (the first eight), or what is wrong with it."""

    SUCCEEDED = "SUCCEEDED"
    RUNNING = "RUNNING"
    QUEUED = "queued"  # SCHEDULED, ENQUEUED, RETRY_WAIT
    DEAD = "DEAD"
    MISSED = "MISSED"
    SKIPPED_OVERLAP = "SKIPPED_OVERLAP"
    CANCELED = "CANCELED"
    NOT_YET_DUE = "not_yet_due"
    MISSING = "missing"
    DOUBLED = "doubled"
    UNEXPECTED = "unexpected"

    @property
    def problem(self) -> bool:
        return self in PROBLEMS


PROBLEMS = frozenset({Status.MISSING, Status.DOUBLED, Status.UNEXPECTED})

_BY_STATE = {
    OccurrenceState.SUCCEEDED: Status.SUCCEEDED,
    OccurrenceState.RUNNING: Status.RUNNING,
    OccurrenceState.SCHEDULED: Status.QUEUED,
    OccurrenceState.ENQUEUED: Status.QUEUED,
    OccurrenceState.RETRY_WAIT: Status.QUEUED,
    OccurrenceState.DEAD: Status.DEAD,
    OccurrenceState.MISSED: Status.MISSED,
    OccurrenceState.SKIPPED_OVERLAP: Status.SKIPPED_OVERLAP,
    OccurrenceState.CANCELED: Status.CANCELED,
}


@dataclass(frozen=True, slots=True)
class Entry:
    """One instant of one schedule and how it is accounted for."""

    schedule_id: str
    schedule: str  # name
    instant: datetime
    status: Status
    expected_version: int | None  # the version that expects it (None: optional or unexpected)
    occurrences: tuple[Occurrence, ...] = ()
    detail: str = ""

    @property
    def reason(self) -> str | None:
        return self.occurrences[0].reason if len(self.occurrences) == 1 else None


@dataclass(frozen=True, slots=True)
class Report:
    start: datetime
    end: datetime
    schedules: int
    expected: int  # instants some version expects in [start, end]
    counts: dict[Status, int]
    entries: list[Entry] = field(default_factory=list)  # every instant looked at (or only the problems)

    @property
    def problems(self) -> list[Entry]:
        return [e for e in self.entries if e.status.problem]

    @property
    def ok(self) -> bool:
        return not any(self.counts.get(s, 0) for s in PROBLEMS)

    @property
    def unaccounted(self) -> int:
        return sum(self.counts.get(s, 0) for s in PROBLEMS)


@dataclass(frozen=True, slots=True)
class Window:
    """What one version expects: its fires in (``after``, ``until``), and may have in
    [``until``, ``optional_until``)."""

    version: VersionRecord
    spec: Spec | None  # None: expects nothing (paused, deleted, or the definition no longer compiles)
    after: datetime  # exclusive
    until: datetime | None  # exclusive; None = open
    optional_until: datetime | None  # exclusive; None = open
    problem: str = ""  # why spec is None although the version is active

    def expects(self, instant: datetime) -> bool:
        return (
            self.spec is not None
            and self.after < instant
            and (self.until is None or instant < self.until)
            and is_fire(self.spec, instant)
        )

    def allows(self, instant: datetime) -> bool:
        """An instant materialized before the version ended (then canceled, normally)."""
        return (
            self.spec is not None
            and self.until is not None
            and instant >= self.until
            and (self.optional_until is None or instant < self.optional_until)
            and is_fire(self.spec, instant)
        )


def is_fire(spec: Spec, instant: datetime) -> bool:
    return fires_at(spec, instant)


def windows(history: ScheduleHistory) -> list[Window]:
    """Each version's expectations (see the module docstring), oldest first."""
    out: list[Window] = []
    versions = history.versions
    for v in versions:
        until = v.valid_to
        # Instants this version materialized ahead of its end lie before its cursor at the
        # change, which is not recorded: since an update starts the new version at its first
        # instant after the change (not at the old cursor), the next version's start no
        # longer bounds them. Open: a CANCELED row of this version's definition after its
        # end is history, whatever the next version does.
        optional_until = None
        after = v.next_run_at - _EPSILON if v.next_run_at is not None else v.valid_from
        spec: Spec | None = None
        problem = ""
        if v.state is ScheduleState.ACTIVE:
            d = v.definition
            try:
                spec = compile_spec(d.kind, d.expr, d.tz, history.created_at)
            except ClockdError as exc:
                problem = f"version {v.version} no longer compiles: {exc.message}"
        out.append(Window(v, spec, after, until, optional_until, problem))
    return out


def reconcile(
    rows: ReconcileRows,
    start: datetime,
    end: datetime,
    *,
    progress: Callable[[int], None] | None = None,
    keep_accounted: bool = True,
) -> Report:
    """Account for every instant in ``[start, end]`` of the schedules in ``rows``. With
    ``keep_accounted`` False the report's entries are the problems only (the counts are
    complete): what the leader keeps every minute."""
    by_schedule: dict[str, list[Occurrence]] = defaultdict(list)
    for occ in rows.occurrences:
        by_schedule[occ.schedule_id].append(occ)
    entries: list[Entry] = []
    counts: Counter[Status] = Counter()
    expected = 0
    for history in rows.schedules:
        found, count = reconcile_schedule(history, by_schedule.get(history.schedule_id, ()), start, end)
        counts.update(e.status for e in found)
        entries.extend(found if keep_accounted else [e for e in found if e.status.problem])
        expected += count
        if progress is not None:
            progress(1)
    return Report(start, end, len(rows.schedules), expected, dict(counts), entries)


def reconcile_schedule(
    history: ScheduleHistory, occurrences: Iterable[Occurrence], start: datetime, end: datetime
) -> tuple[list[Entry], int]:
    """The entries of one schedule over ``[start, end]``, and how many instants it expects."""
    wins = windows(history)
    expected: dict[datetime, int] = {}
    for w in wins:
        if w.spec is None:
            continue
        t = w.spec.next_after(max(w.after, start - _EPSILON))
        while t is not None and t <= end and (w.until is None or t < w.until):
            expected[t] = w.version.version
            t = w.spec.next_after(t)
    at: dict[datetime, list[Occurrence]] = defaultdict(list)
    for occ in occurrences:
        if start <= occ.scheduled_for <= end and not occ.manual:
            at[occ.scheduled_for].append(occ)
    replans = _replans_expected(wins, at)
    for instant, wanted in replans.items():
        if expected.get(instant, 0) < wanted:
            expected[instant] = wanted
    current = wins[-1] if wins else None
    cursor = history.next_run_at
    entries: list[Entry] = []
    for instant in sorted(set(expected) | set(at)):
        version = expected.get(instant)
        rows = tuple(sorted(at.get(instant, ()), key=lambda o: (o.version, o.id)))
        if version is not None and instant in replans and rows and all(o.version < version for o in rows):
            old = rows[-1]
            detail = (
                f"no occurrence of version {version}: the change to it canceled {old.id} (version "
                f"{old.version}) before it ran and did not re-plan it, although version {version} fires then"
            )
            entries.append(Entry(history.schedule_id, history.name, instant, Status.MISSING, version, rows, detail))
            continue
        entries.append(_account(history, wins, current, cursor, instant, version, rows))
    return entries, len(expected)


def _replans_expected(wins: list[Window], at: dict[datetime, list[Occurrence]]) -> dict[datetime, int]:
    """Instants a change must have re-planned: an occurrence of version ``j`` the change to
    ``j + 1`` canceled before any attempt, where version ``j + 1`` (active, with a recorded
    start) fires too, is expected again under ``j + 1`` (``Store.change_schedule``). The
    newest such version per instant."""
    by_version = {w.version.version: w for w in wins}
    out: dict[datetime, int] = {}
    for instant, rows in at.items():
        for occ in rows:
            if occ.state is not OccurrenceState.CANCELED or occ.attempts:
                continue
            nxt = by_version.get(occ.version + 1)
            if nxt is None or nxt.spec is None or nxt.version.next_run_at is None:
                continue
            if is_fire(nxt.spec, instant) and out.get(instant, 0) < occ.version + 1:
                out[instant] = occ.version + 1
    return out


def _replanned(wins: list[Window], occ: Occurrence, instant: datetime) -> bool:
    """``occ`` (version ``k``) was re-planned by an update: an older version ``j`` expected
    the instant or had materialized it ahead, and every version after ``j`` up to ``k`` is
    active and fires then (each change took the instant over from the one before)."""
    by_version = {w.version.version: w for w in wins}
    version = occ.version
    while True:
        w = by_version.get(version)
        if w is None or w.spec is None or not is_fire(w.spec, instant):
            return False
        before = by_version.get(version - 1)
        if before is None:
            return False
        if before.expects(instant) or before.allows(instant):
            return True
        version -= 1


def _account(
    history: ScheduleHistory,
    wins: list[Window],
    current: Window | None,
    cursor: datetime | None,
    instant: datetime,
    version: int | None,
    rows: tuple[Occurrence, ...],
) -> Entry:
    def entry(status: Status, detail: str = "") -> Entry:
        return Entry(history.schedule_id, history.name, instant, status, version, rows, detail)

    if len(rows) > 1:
        # Doubled means two occurrences of one instant that both ran, or could still run.
        # The others never ran (canceled by a pause, an update or a delete before any
        # attempt, or ended MISSED / SKIPPED_OVERLAP): they are history, superseded by the
        # one that counts — the live one, else the expecting version's, else the newest.
        live = [o for o in rows if _ran_or_may_run(o)]
        if len(live) > 1:
            listed = ", ".join(f"{o.id} (version {o.version}, {o.state})" for o in rows)
            return entry(Status.DOUBLED, f"{len(rows)} occurrences at one instant: {listed}")
        counted = live[0] if live else next((o for o in rows if o.version == version), rows[-1])
        found = _account(history, wins, current, cursor, instant, version, (counted,))
        if found.status.problem:
            return found
        others = [o for o in rows if o is not counted]
        kind = "canceled " if all(o.state is OccurrenceState.CANCELED for o in others) else ""
        superseded = ", ".join(f"{o.id} (version {o.version})" for o in others)
        return dataclasses.replace(found, detail=f"supersedes {kind}{superseded}")
    if rows:
        occ = rows[0]
        if version is not None:
            if occ.version == version or _legacy_cover(wins, version, occ, instant):
                return entry(_BY_STATE[occ.state])
            if occ.version > version and _replanned(wins, occ, instant):
                return entry(_BY_STATE[occ.state], f"re-planned under version {occ.version} by an update")
            return entry(
                Status.UNEXPECTED,
                f"version {version} expects this instant, but its occurrence {occ.id} is of version {occ.version}",
            )
        owner = next((w for w in wins if w.version.version == occ.version), None)
        if owner is not None and owner.allows(instant):
            return entry(_BY_STATE[occ.state])
        if _replanned(wins, occ, instant):
            return entry(_BY_STATE[occ.state], f"re-planned under version {occ.version} by an update")
        return entry(Status.UNEXPECTED, _why_unexpected(owner, occ))
    # No occurrence at an expected instant.
    if (
        current is not None
        and version == current.version.version
        and history.state is ScheduleState.ACTIVE
        and cursor is not None
        and instant >= cursor
    ):
        return entry(Status.NOT_YET_DUE, f"not materialized yet: the cursor is at {_iso(cursor)}")
    detail = "no occurrence"
    if current is not None and version == current.version.version and cursor is not None and instant >= cursor:
        detail = f"no occurrence (the schedule is {history.state}; its cursor is at {_iso(cursor)})"
    return entry(Status.MISSING, detail)


def _ran_or_may_run(occ: Occurrence) -> bool:
    """It ran (an attempt was made: a dropped dead letter is CANCELED after running) or it
    still may (queued, running, retrying)."""
    if occ.state in (OccurrenceState.MISSED, OccurrenceState.SKIPPED_OVERLAP):
        return False
    return occ.state is not OccurrenceState.CANCELED or occ.attempts > 0


def _legacy_cover(wins: list[Window], version: int, occ: Occurrence, instant: datetime) -> bool:
    """A version written before schema 0003 has no recorded start: it is taken to start at
    ``valid_from``, so an instant an older version materialized ahead (and the update then
    canceled) covers it."""
    expecting = next((w for w in wins if w.version.version == version), None)
    if expecting is None or expecting.version.next_run_at is not None or occ.version >= version:
        return False
    owner = next((w for w in wins if w.version.version == occ.version), None)
    return owner is not None and owner.spec is not None and is_fire(owner.spec, instant)


def _why_unexpected(owner: Window | None, occ: Occurrence) -> str:
    if owner is None:
        return f"occurrence {occ.id} is of version {occ.version}, which the schedule never had"
    if owner.spec is None:
        what = owner.problem or f"version {occ.version} was {owner.version.state}"
        return f"occurrence {occ.id} ({occ.state}): {what}, so it expects nothing"
    if not is_fire(owner.spec, occ.scheduled_for):
        return f"occurrence {occ.id} ({occ.state}): not an instant of version {occ.version}'s definition"
    return f"occurrence {occ.id} ({occ.state}): outside the span of version {occ.version}"


def _iso(instant: datetime) -> str:
    return format_instant(instant)


async def run_reconcile(
    store: Store,
    start: datetime,
    end: datetime,
    schedule_id: str | None = None,
    *,
    tenant: str | None = None,
    progress: Callable[[int], None] | None = None,
    on_loaded: Callable[[int], None] | None = None,
    keep_accounted: bool = True,
) -> Report:
    """Read the rows (one snapshot) and reconcile them: one schedule's, ``tenant``'s
    schedules, or every schedule's. ``on_loaded(n)`` is called with the number of
    schedules before the work starts (a progress bar's total)."""
    rows = await store.reconcile_rows(start, end, schedule_id)
    if tenant is not None:
        # Filtered here, not in the store's read: an operator's check, not a hot path.
        kept = [h for h in rows.schedules if h.tenant == tenant]
        ids = {h.schedule_id for h in kept}
        rows = ReconcileRows(kept, [o for o in rows.occurrences if o.schedule_id in ids])
    if on_loaded is not None:
        on_loaded(len(rows.schedules))
    return reconcile(rows, start, end, progress=progress, keep_accounted=keep_accounted)
