"""Pure planning: what the materializer writes for a schedule, and what follows an attempt.

Misfire (DESIGN.md §4) is decided here, at materialization, from the instant's
lateness ``now - scheduled_for``:

* ``skip``: every instant later than ``max_lateness`` becomes MISSED.
* ``fire_once`` (default): of the instants later than ``max_lateness``, only the
  latest runs, and only if no on-time instant is planned in the same pass;
  the others become MISSED. So an outage of any length costs at most one run.
* ``catch_up``: late instants run oldest first, at most ``catch_up_limit`` of
  them (the most recent ones); older ones become MISSED. The ones that run are
  flagged ``catch_up`` so the materializer can pace them (a tenant's catch-up rate).

Every MISSED occurrence is written with its reason: nothing disappears silently.

The same policy applies twice more, with the same rules:

* on resume ``--from paused-at``, the cursor goes back to the pause, and the
  paused period is planned through this function like any outage;
* to queued rows no worker reached in time: the leader's misfire sweep
  (``Store.sweep_misfires``) marks ENQUEUED/RETRY_WAIT occurrences claimable for
  longer than ``max_lateness`` MISSED — skip: all of them; fire_once: all but the
  latest of each schedule, and that one too when a newer instant is already due;
  catch_up: all but the ``catch_up_limit`` latest. :func:`sweep_verdict` is that rule.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from clockd.core import capabilities
from clockd.core.ids import occurrence_id, stable_fraction
from clockd.core.model import (
    AttemptOutcome,
    MisfirePolicy,
    OccurrenceState,
    OverlapPolicy,
    RetryPolicy,
    Schedule,
    ScheduleKind,
)

CATCH_UP_LIMIT = 10  # the default of ScheduleDef.catch_up_limit
MAX_WINDOW = timedelta(minutes=5)  # a flexible window spreads starts over at most this
MIN_LATENESS = timedelta(seconds=1)  # the leader's misfire sweep does not look closer


class DueSchedule(NamedTuple):
    """A schedule as the materializer plans it: exactly what :func:`plan_schedule`, the
    capability hold and the occurrence rows read, and nothing more.

    ``Store.due_schedules`` selects these fields (jsonb paths, ``json_extract``) instead
    of decoding whole definitions: the target, labels, retry backoff and notification
    addresses are not planning inputs. ``requires`` is
    ``capabilities.required(definition)``; ``notify`` tells whether the definition asks
    for notifications (the materializer then looks the whole schedule up, only for the
    rare MISSED it reports). :meth:`of` derives it from a whole :class:`Schedule`; both
    paths give equal values for the same schedule (a contract test holds them to it).
    ``overlap`` is not a planning input: the occurrence rows carry it (schema 0018), so
    the claim need not read the schedule.
    A NamedTuple, as :class:`PlannedOccurrence`: one per schedule the materializer reads."""

    id: str
    version: int
    next_run_at: datetime | None  # the cursor
    created_at: datetime  # the anchor of ``every`` schedules
    name: str
    kind: ScheduleKind
    expr: str
    tz: str
    queue: str
    tenant: str
    misfire: MisfirePolicy
    max_lateness: timedelta
    window: timedelta
    catch_up_limit: int
    max_attempts: int
    requires: frozenset[str]
    notify: bool
    overlap: OverlapPolicy

    @classmethod
    def of(cls, schedule: Schedule) -> DueSchedule:
        d = schedule.definition
        return cls(
            id=schedule.id,
            version=schedule.version,
            next_run_at=schedule.next_run_at,
            created_at=schedule.created_at,
            name=d.name,
            kind=d.kind,
            expr=d.expr,
            tz=d.tz,
            queue=d.queue,
            tenant=d.tenant,
            misfire=d.misfire,
            max_lateness=d.max_lateness,
            window=d.window,
            catch_up_limit=d.catch_up_limit,
            max_attempts=d.retry.max_attempts,
            requires=capabilities.required(d),
            notify=bool(d.notify),
            overlap=d.overlap,
        )


class PlannedOccurrence(NamedTuple):
    """One planned instant. A NamedTuple, not a frozen dataclass: the materializer makes
    one per occurrence, and a frozen dataclass's ``__init__`` (``object.__setattr__`` per
    field) cost ~1 µs of its ~20 µs of CPU per occurrence; a NamedTuple's is one
    ``tuple.__new__``."""

    id: str
    scheduled_for: datetime
    available_at: datetime
    state: OccurrenceState  # SCHEDULED or MISSED
    reason: str | None = None
    catch_up: bool = False  # late (past max_lateness) but run by misfire catch_up / fire_once


class SchedulePlan(NamedTuple):
    occurrences: tuple[PlannedOccurrence, ...]
    next_run_at: datetime | None  # the new cursor (None: the schedule will never fire again)


_NO_WINDOW = timedelta(0)


def available_at(occ_id: str, scheduled_for: datetime, window: timedelta) -> datetime:
    """Deterministic spread inside a flexible window: every node, every retry, same instant."""
    if window <= _NO_WINDOW:
        return scheduled_for
    offset = int(stable_fraction(occ_id) * window.total_seconds() * 1000)
    return scheduled_for + timedelta(milliseconds=offset)


def plan_schedule(
    schedule: DueSchedule,
    next_after: Callable[[datetime], datetime | None],
    until: datetime,
    now: datetime,
    max_instants: int,
) -> SchedulePlan:
    """Occurrences for ``schedule`` from its cursor up to ``until`` (inclusive), at most
    ``max_instants`` of them, with misfire policy applied; and the cursor after them.

    ``next_after(t)`` is the schedule's timeline (strictly after ``t``)."""
    instants: list[datetime] = []
    cursor = schedule.next_run_at
    while cursor is not None and cursor <= until and len(instants) < max_instants:
        instants.append(cursor)
        cursor = next_after(cursor)

    late_before = now - schedule.max_lateness
    if not instants or instants[0] >= late_before:  # none late (ascending): the steady state
        return _on_time(schedule, instants, cursor)
    late = [t for t in instants if t < late_before]
    runs_late: set[datetime]
    if not late:
        runs_late = set()
    elif schedule.misfire is MisfirePolicy.SKIP:
        runs_late = set()
    elif schedule.misfire is MisfirePolicy.FIRE_ONCE:
        on_time_due = any(late_before <= t <= now for t in instants)
        runs_late = set() if on_time_due else {late[-1]}
    else:
        limit = max(0, schedule.catch_up_limit)
        runs_late = set(late[-limit:]) if limit else set()

    planned: list[PlannedOccurrence] = []
    for t in instants:
        occ_id = occurrence_id(schedule.id, schedule.version, t)
        if t < late_before and t not in runs_late:
            lateness = now - t
            planned.append(
                PlannedOccurrence(
                    id=occ_id,
                    scheduled_for=t,
                    available_at=t,
                    state=OccurrenceState.MISSED,
                    reason=missed_reason(lateness, schedule.max_lateness, schedule.misfire),
                )
            )
        else:
            planned.append(
                PlannedOccurrence(
                    id=occ_id,
                    scheduled_for=t,
                    available_at=available_at(occ_id, t, schedule.window),
                    state=OccurrenceState.SCHEDULED,
                    catch_up=t < late_before,
                )
            )
    return SchedulePlan(tuple(planned), cursor)


def _on_time(schedule: DueSchedule, instants: list[datetime], cursor: datetime | None) -> SchedulePlan:
    """:func:`plan_schedule` when no instant is late: each one SCHEDULED, in its window.
    The materializer's common case, once per due schedule, kept to the bare steps."""
    sid, version, window, scheduled = schedule.id, schedule.version, schedule.window, OccurrenceState.SCHEDULED
    planned = []
    for t in instants:
        occ_id = occurrence_id(sid, version, t)
        planned.append(PlannedOccurrence(occ_id, t, available_at(occ_id, t, window), scheduled))
    return SchedulePlan(tuple(planned), cursor)


def plan_instants(schedule: DueSchedule, instants: Iterable[datetime], now: datetime) -> tuple[PlannedOccurrence, ...]:
    """:func:`plan_schedule` over the given ``instants`` (fires of ``schedule``'s current
    definition) instead of its timeline: ids under ``schedule.version``, the window's
    ``available_at``, and the misfire policy applied to them as one pass at ``now``.

    What an update re-plans: the instants the old version had planned and no worker
    started, which the new definition still fires at, so they run under the new version
    exactly as if the materializer had planned them (``Store.change_schedule``)."""
    ordered = sorted(set(instants))
    if not ordered:
        return ()
    following = dict(itertools.pairwise(ordered))
    start = schedule._replace(next_run_at=ordered[0])
    return plan_schedule(start, following.get, ordered[-1], now, len(ordered)).occurrences


@dataclass(frozen=True, slots=True)
class AfterAttempt:
    next_state: OccurrenceState  # SUCCEEDED, RETRY_WAIT or DEAD
    retry_at: datetime | None
    reason: str | None


_ENDED = AfterAttempt(OccurrenceState.SUCCEEDED, None, None)  # frozen: every success shares it


def after_attempt(
    outcome: AttemptOutcome,
    attempt: int,
    max_attempts: int,
    retry: RetryPolicy,
    exit_code: int | None,
    permanent: bool,
    now: datetime,
    jitter: float,
) -> AfterAttempt:
    """What an attempt's outcome means for its occurrence.

    Success ends it. A permanent failure (could not start, or an exit code listed in
    ``permanent_exit_codes``) goes straight to DEAD. Anything else retries with
    exponential backoff and full jitter while attempts remain, then DEAD."""
    if outcome is AttemptOutcome.SUCCEEDED:
        return _ENDED
    if permanent or (exit_code is not None and exit_code in retry.permanent_exit_codes):
        return AfterAttempt(OccurrenceState.DEAD, None, "permanent failure: not retried")
    if attempt >= max_attempts:
        return AfterAttempt(OccurrenceState.DEAD, None, f"dead after {attempt} attempt{'s' if attempt > 1 else ''}")
    return AfterAttempt(OccurrenceState.RETRY_WAIT, now + retry.delay(attempt, jitter), None)


def missed_reason(lateness: timedelta, max_lateness: timedelta, policy: MisfirePolicy) -> str:
    """The reason written on an occurrence the misfire policy turned MISSED."""
    return f"missed: {_fmt(lateness)} late, past max_lateness {_fmt(max_lateness)} (misfire policy {policy})"


def sweep_verdict(
    policy: MisfirePolicy,
    newest_rank: int,
    catch_up_limit: int,
    newer_due: bool,
) -> bool:
    """Whether the leader's sweep marks a late queued occurrence MISSED (True) or lets it run.

    ``newest_rank`` is 1 for the schedule's latest late queued occurrence, 2 for the one
    before, …; ``newer_due`` tells whether a newer instant of the schedule is already due
    (and not itself missed). The SQL of both stores (``misfire_pick``) states this same rule;
    the contract tests hold them to it."""
    if policy is MisfirePolicy.SKIP:
        return True
    if policy is MisfirePolicy.FIRE_ONCE:
        return newest_rank > 1 or newer_due
    return newest_rank > max(0, catch_up_limit)


def _fmt(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
