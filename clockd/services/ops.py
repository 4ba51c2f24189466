"""Use cases behind ``clockctl``: validation, cursors and versions, over the store port.

Everything a user can change goes through here, so both stores and every
front end (CLI, YAML apply) get the same rules:

* a definition is validated and normalized (``clockd.formats.validate``) before anything is written, and a
  schedule that can never fire again is refused (``NeverFires``);
* a new schedule's cursor is the first instant strictly after ``now``; a resumed
  one's too by default (``--from now``: a long pause never bursts), or the first
  instant after the pause (``--from paused-at``: the paused period is planned
  through the misfire policy like any outage);
* ``add`` with an idempotency key is idempotent: the same key and definition give
  back the stored schedule, the same key with another definition is a ``Conflict``
  naming the key; tenant quotas are enforced by the store (``QuotaExceeded``);
* an update reports what it canceled, which of those instants it re-planned under the
  new version (or dropped: the new definition no longer fires then), and which
  older-version occurrences are still running (they finish under their version);
* pause, resume, update and delete bump the version in one transaction that
  cancels the not-yet-claimed occurrences of older versions;
* ``apply`` (declarative files) plans creates, updates and deletes against what
  is stored and writes them all in one store transaction; an update moves the
  cursor exactly as :meth:`Ops.update` does (:func:`cursor_after_update`), and
  only schedules carrying the ``clockd.managed-by=apply`` label are ever
  updated or pruned by it — a schedule added by hand is never taken over.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from types import MemberDescriptorType
from typing import TYPE_CHECKING, Any, Final, overload

from clockd.core.clock import Clock
from clockd.core.ids import manual_occurrence_id, new_schedule_id, new_schedule_ids, occurrence_id, shard_of
from clockd.core.limits import check_name, check_reason
from clockd.core.model import (
    WHEN_FIELD,
    Attempt,
    HttpTarget,
    Occurrence,
    Schedule,
    ScheduleDef,
    ScheduleKind,
    ScheduleState,
    TenantLimits,
    TenantUsage,
    redact_url,
)
from clockd.core.planning import available_at
from clockd.core.spec import Spec, compile_spec
from clockd.errors import Conflict, IdempotencyMismatch, InvalidInput, NeverFires, NotFound, VersionMismatch
from clockd.formats.validate import MANAGED_BY, MANAGED_BY_APPLY, normalize
from clockd.store import (
    ApiToken,
    AppliedSchedules,
    AuditEntry,
    NewSchedule,
    Replanned,
    RunSummary,
    ScheduleChange,
    Store,
)
from clockd.store.codec import definition_texts
from clockd.tokens import Issued, issue

if TYPE_CHECKING:
    from clockd.runner.egress import EgressPolicy
    from clockd.services.explain import Explanation
    from clockd.services.reconcile import Report

DEFAULT_SHARD_COUNT = 64
DLQ_DROP_REASON = "dropped from the dead-letter queue"


@dataclass(frozen=True, slots=True)
class Change:
    schedule: Schedule
    canceled: int
    # Occurrences of older versions still running: they finish under their own version.
    running: tuple[Occurrence, ...] = ()
    # Canceled instants the new version took over (or dropped): Store.change_schedule.
    replanned: tuple[Replanned, ...] = ()
    # Nothing was written: a pause of a paused schedule, a resume of an active one.
    unchanged: bool = False

    @property
    def kept(self) -> list[Replanned]:
        """The re-planned instants (the new definition still fires then)."""
        return [r for r in self.replanned if r.kept]

    @property
    def dropped(self) -> list[Replanned]:
        """Canceled instants the new definition no longer fires at."""
        return [r for r in self.replanned if not r.kept]


# (version, valid_from, valid_to, definition, state): one row of a schedule's history.
VersionRow = tuple[int, datetime, datetime | None, ScheduleDef, ScheduleState]


@dataclass(frozen=True, slots=True)
class Added:
    schedule: Schedule
    existed: bool  # an idempotent add that found the schedule already created


class ResumeFrom(StrEnum):
    NOW = "now"
    PAUSED_AT = "paused-at"


_LIMIT_FIELDS = frozenset({"max_schedules", "max_running", "max_triggers_per_minute", "catch_up_rate"})


def _check_key(key: str) -> str:
    key = key.strip()
    if not key or len(key) > 200 or any(ord(c) < 32 for c in key):
        raise InvalidInput("idempotency key: 1 to 200 characters, no control characters")
    return key


def first_run(definition: ScheduleDef, now: datetime) -> datetime:
    """The cursor of a schedule created at ``now`` (its ``every`` anchor): the first fire
    strictly after ``now``. ``NeverFires`` if there is none."""
    first = _first_after(definition.kind, definition.expr, definition.tz, now)
    if first is None:
        raise NeverFires(_never_after(definition, now), WHEN_FIELD[definition.kind])
    return first


def _never_after(definition: ScheduleDef, now: datetime) -> str:
    """Why a definition has no instant after ``now``: for a one-time schedule, the plain
    reason (its instant is past), with what to do."""
    stamp = now.isoformat(timespec="seconds")
    if definition.kind is ScheduleKind.ONCE:
        return f"{definition.expr} is in the past (now {stamp}): it never fires; give a later instant"
    return f"{definition.expr}: never fires after {stamp}"


@functools.lru_cache(maxsize=1024)
def _first_after(kind: ScheduleKind, expr: str, tz: str, now: datetime) -> datetime | None:
    # A pure function of its arguments (the spec is compiled with ``now`` as its anchor),
    # and creates pass whole seconds: the creates of one second that share an expression
    # and zone (a burst through the API) plan it once, not ~65 µs each.
    return compile_spec(kind, expr, tz, now).next_after(now)


def cursor_after_update(schedule: Schedule, definition: ScheduleDef, now: datetime) -> datetime | None:
    """The cursor of ``schedule`` once its definition becomes ``definition`` (normalized):
    the new definition's first instant after ``now``, so none of its instants before the
    old cursor is lost (moving a daily job from 09:00 to 08:00 keeps tomorrow's 08:00).

    No instant runs twice all the same: the store, in the change's transaction, cancels
    the old version's unclaimed occurrences and re-plans those the new definition fires
    at under the new version (the materializer then finds their ids taken), and moves the
    cursor past any instant an older version already started (a worker whose clock is
    ahead of ours). ``NeverFires`` when an active schedule would never fire again.
    """
    after = now
    spec = compile_spec(definition.kind, definition.expr, definition.tz, schedule.created_at)
    nxt = spec.next_after(after)
    if nxt is None and schedule.state is ScheduleState.ACTIVE:
        raise NeverFires(_never_after(definition, after), WHEN_FIELD[definition.kind])
    return nxt


_SUMMARY_BATCH = 500  # schedule ids per run_summaries statement

# An apply of at least this many definitions runs with the cyclic garbage collector paused.
_GC_PAUSE_FROM = 1_000
_gc_pauses = 0  # applies in progress that paused it (the API and a reload may overlap)


@contextlib.contextmanager
def _cyclic_gc_paused(size: int) -> Iterator[None]:
    """Pause CPython's cyclic garbage collector while a large apply plans and writes.

    Every definition, its plan item and its rows stay alive until the apply ends, so the
    collector's passes over the growing heap found nothing to free and cost 15-25 µs a
    create — a third of the plan (20,000- and 100,000-create plans, alternated). Reference
    counting still frees everything that is not a cycle; a cycle made meanwhile is
    collected once the last overlapping apply ends. Process-wide by nature: in the API
    server the other requests run without cyclic collection for the apply's duration
    (seconds), which only delays freeing cycles.

    On resuming, everything the apply allocated is still in the youngest generation, so
    the first collection after ``gc.enable()`` would traverse all of it — ~0.3 s at the end
    of a 100,000-create apply, ~3 µs a create, for objects that either live on or are freed
    by reference counting when the plan is dropped. ``gc.freeze()`` then ``gc.unfreeze()``
    moves every tracked object into the oldest generation instead (no traversal): they are
    still collected, by the next full collection. Skipped when someone else froze objects
    (a forking server keeping its pages shared): unfreezing would undo theirs."""
    global _gc_pauses
    if size < _GC_PAUSE_FROM:
        yield
        return
    if _gc_pauses == 0 and not gc.isenabled():
        yield  # paused by someone else (a benchmark, an embedding program): theirs to resume
        return
    _gc_pauses += 1
    gc.disable()
    try:
        yield
    finally:
        _gc_pauses -= 1
        if _gc_pauses == 0:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def next_run(schedule: Schedule, summary: RunSummary | None) -> datetime | None:
    """When the schedule runs next, as people mean it: the start of its earliest occurrence
    already planned and waiting, else the next instant not yet planned (the cursor).
    None when paused, deleted or done."""
    if schedule.state is not ScheduleState.ACTIVE:
        return None
    if summary is not None and summary.next_start is not None:
        return summary.next_start
    return schedule.next_run_at


def spec_of(schedule: Schedule) -> Spec:
    d = schedule.definition
    return compile_spec(d.kind, d.expr, d.tz, schedule.created_at)


def starts_of(schedule: Schedule, instants: Sequence[datetime]) -> list[datetime]:
    """When each planned instant of ``schedule`` (at its current version) becomes claimable:
    the instant itself, or (flexible window) the instant plus its fixed per-occurrence
    offset — the same ``available_at`` the materializer will write."""
    window = schedule.definition.window
    return [available_at(occurrence_id(schedule.id, schedule.version, t), t, window) for t in instants]


def next_runs(spec: Spec, after: datetime, count: int) -> list[datetime]:
    out: list[datetime] = []
    t: datetime | None = after
    while t is not None and len(out) < count:
        t = spec.next_after(t)
        if t is not None:
            out.append(t)
    return out


def is_managed(definition: ScheduleDef) -> bool:
    """Whether ``apply`` created (and so owns) a schedule with this definition."""
    return (MANAGED_BY, MANAGED_BY_APPLY) in definition.labels


def managed_labels(labels: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``labels`` with the apply label (in place of any other ``managed-by``), sorted: the
    labels apply writes, a stable, comparable form."""
    marked = {pair for pair in labels if pair[0] != MANAGED_BY}
    marked.add((MANAGED_BY, MANAGED_BY_APPLY))
    return tuple(sorted(marked))


class PlanAction(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    UNCHANGED = "unchanged"


@dataclass(frozen=True, slots=True)
class PlanItem:
    """One line of an apply plan.

    ``desired`` is the normalized definition to write (None for a delete), ``current``
    the stored schedule (None for a create), ``next_run_at`` the cursor after the apply
    (the stored one when unchanged), ``index`` the position in the desired list (None
    for a delete). Creates carry their new ``schedule_id`` and ``shard``.
    """

    action: PlanAction
    name: str
    index: int | None
    desired: ScheduleDef | None
    current: Schedule | None
    next_run_at: datetime | None
    schedule_id: str = ""
    shard: int = 0


@dataclass(frozen=True, slots=True)
class ApplyProblem:
    """Why desired definition ``index`` cannot be applied (exit code 2 bad input, 1 conflict)."""

    index: int
    message: str
    exit_code: int = 2


@dataclass(frozen=True, slots=True)
class ApplyPlan:
    """What ``apply`` would write for ``tenant``, computed at ``now`` (whole seconds: the
    anchor of created ``every`` schedules). Apply it only when ``problems`` is empty."""

    tenant: str
    now: datetime
    items: list[PlanItem]
    problems: list[ApplyProblem]
    # Apply-managed schedules the desired list no longer names, kept (no prune).
    not_listed: list[str] = field(default_factory=list)

    @property
    def changes(self) -> list[PlanItem]:
        return [item for item in self.items if item.action is not PlanAction.UNCHANGED]

    def count(self, action: PlanAction) -> int:
        return sum(1 for item in self.items if item.action is action)


@dataclass(frozen=True, slots=True)
class ApplyResult:
    created: list[Schedule]
    updated: list[Schedule]
    deleted: list[Schedule]
    canceled: int
    replanned: list[Replanned] = field(default_factory=list)  # as Change.replanned, of every update


class Ops:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        shard_count: int = DEFAULT_SHARD_COUNT,
        egress: Callable[[], EgressPolicy] | None = None,
    ) -> None:
        self.store, self.clock, self.shard_count = store, clock, shard_count
        # The daemon config's HTTP egress policy, loaded when an HTTP target is written.
        self._egress = egress

    def _check_egress(self, definition: ScheduleDef) -> None:
        """An HTTP target whose host the tenant's egress policy refuses (by name or literal
        address; the workers check again after DNS): ``InvalidInput``."""
        target = definition.target
        if self._egress is None or not isinstance(target, HttpTarget):
            return
        reason = self._egress().check_url(definition.tenant, target.url)
        if reason is not None:
            raise InvalidInput(f"http: {redact_url(target.url)}: egress refused: {reason}")

    async def add(self, definition: ScheduleDef, idempotency_key: str | None = None) -> Schedule:
        return (await self.create(definition, idempotency_key)).schedule

    async def create(self, definition: ScheduleDef, idempotency_key: str | None = None) -> Added:
        """Create a schedule. With ``idempotency_key``: if the tenant already has a live
        schedule created with that key, it is returned (``existed``) when it was created
        from the same definition, and ``Conflict`` names the key otherwise. The key is
        unique per tenant in the store, so two racing creates give one schedule."""
        definition = normalize(definition)
        self._check_egress(definition)
        if idempotency_key is not None:
            idempotency_key = _check_key(idempotency_key)
            found = await self._by_key(definition, idempotency_key)
            if found is not None:
                return found
        # Whole seconds: ``every`` schedules are anchored at creation, and `every 1m`
        # should fire at :SS, not :SS.123456.
        now = self.clock.now().replace(microsecond=0)
        schedule_id = new_schedule_id()
        first = first_run(definition, now)
        try:
            schedule = await self.store.create_schedule(
                schedule_id,
                definition,
                shard_of(schedule_id, self.shard_count),
                first,
                now,
                idempotency_key=idempotency_key,
            )
        except Conflict:
            if idempotency_key is not None:  # a racing create with the same key won
                found = await self._by_key(definition, idempotency_key)
                if found is not None:
                    return found
            raise
        return Added(schedule, existed=False)

    async def _by_key(self, definition: ScheduleDef, key: str) -> Added | None:
        schedule = await self.store.get_schedule_by_idempotency_key(definition.tenant, key)
        if schedule is None:
            return None
        versions = await self.store.schedule_versions(schedule.id)
        created_as = versions[0][3] if versions else schedule.definition
        if created_as != definition:
            raise IdempotencyMismatch(
                f"idempotency key {key!r} was used to create schedule {schedule.name!r} "
                f"({schedule.id}) with a different definition; use a new key for a new schedule"
            )
        return Added(schedule, existed=True)

    async def get(self, name: str, tenant: str = "default") -> Schedule:
        schedule = await self.store.get_schedule(tenant, name)
        if schedule is None:
            raise NotFound(f"no schedule named {name!r}" + (f" in tenant {tenant!r}" if tenant != "default" else ""))
        return schedule

    async def live_or_deleted(self, name: str, tenant: str = "default") -> Schedule:
        """The live schedule ``name``, else the one of that name deleted last (whose runs
        an operator still reads), else NotFound as ``get``."""
        try:
            return await self.get(name, tenant)
        except NotFound:
            deleted = await self.store.get_deleted_schedule(tenant, name)
            if deleted is None:
                raise
            return deleted

    async def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        return await self.store.list_schedules(tenant)

    async def summaries(self, schedules: Sequence[Schedule]) -> dict[str, RunSummary]:
        """Each schedule's next start and last run (``Store.run_summaries``), in batches."""
        out: dict[str, RunSummary] = {}
        ids = [s.id for s in schedules]
        for i in range(0, len(ids), _SUMMARY_BATCH):
            out.update(await self.store.run_summaries(ids[i : i + _SUMMARY_BATCH]))
        return out

    async def pause(self, name: str, tenant: str = "default", reason: str | None = None) -> Change:
        """Pause; ``reason`` is kept with the version (and the occurrences it cancels)."""
        if reason is not None:
            check_reason(reason)  # one check for the CLI, the API and the dashboard
        schedule = await self.get(name, tenant)
        if schedule.state is ScheduleState.PAUSED:
            return Change(schedule, 0, unchanged=True)
        return await self._change(
            schedule,
            schedule.definition,
            ScheduleState.PAUSED,
            schedule.next_run_at,
            "schedule paused" + (f": {reason}" if reason else ""),
        )

    async def resume(self, name: str, tenant: str = "default", from_: ResumeFrom = ResumeFrom.NOW) -> Change:
        """Resume a paused schedule. ``from_`` NOW: the cursor is the first instant after
        now (a long pause never bursts). PAUSED_AT: the first instant after the pause, so
        the materializer plans the paused period through the misfire policy (skip: all
        MISSED; fire_once: only the latest; catch_up: up to ``catch_up_limit``)."""
        schedule = await self.get(name, tenant)
        if schedule.state is ScheduleState.ACTIVE:
            return Change(schedule, 0, unchanged=True)
        after = self.clock.now()
        if from_ is ResumeFrom.PAUSED_AT and schedule.paused_at is not None:
            after = min(after, schedule.paused_at)
        nxt = spec_of(schedule).next_after(after)
        reason = "schedule resumed" + (" from the pause" if from_ is ResumeFrom.PAUSED_AT else "")
        return await self._change(schedule, schedule.definition, ScheduleState.ACTIVE, nxt, reason)

    async def update(
        self, name: str, definition: ScheduleDef, tenant: str = "default", expected_version: int | None = None
    ) -> Change:
        """A new version: unclaimed occurrences of older versions are CANCELED in the same
        transaction and their instants re-planned under the new version where it still
        fires (``Change.replanned``), the new version starts at its first instant after
        now (``cursor_after_update``; no instant runs twice), and claimed ones finish under their version
        (``Change.running`` lists them). With
        ``expected_version`` (HTTP If-Match): ``VersionMismatch`` unless the schedule is at
        that version, checked again by the store's conditional write."""
        schedule = await self.get(name, tenant)
        if expected_version is not None and schedule.version != expected_version:
            raise VersionMismatch(
                f"schedule {name!r} is at version {schedule.version}, not {expected_version}: "
                "read it again and retry with its current version"
            )
        definition = normalize(definition)
        self._check_egress(definition)
        if definition == schedule.definition:
            return Change(schedule, 0)
        nxt = cursor_after_update(schedule, definition, self.clock.now())
        return await self._change(
            schedule, definition, schedule.state, nxt, f"schedule updated to version {schedule.version + 1}"
        )

    async def explain(self, name: str, at: str, tenant: str = "default") -> Explanation:
        """Why ``name`` did or did not run at ``at`` (``clockd.services.explain``)."""
        from clockd.services.explain import explain_at  # with the verb: every clockctl call imports ops (start-up)

        return await explain_at(self.store, await self.get(name, tenant), at, self.clock.now())

    async def reconcile(
        self,
        start: datetime,
        end: datetime,
        name: str | None = None,
        tenant: str | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        on_loaded: Callable[[int], None] | None = None,
    ) -> Report:
        """Is every instant each schedule expected in [start, end] accounted for exactly
        once (``clockd.services.reconcile``)? ``name``: that schedule of ``tenant``
        (default ``default``); else ``tenant``'s schedules, or every tenant's (None).
        Every entry is kept."""
        from clockd.services.reconcile import run_reconcile  # with the verb (start-up)

        schedule_id = (await self.get(name, tenant or "default")).id if name else None
        return await run_reconcile(
            self.store, start, end, schedule_id, tenant=None if name else tenant, progress=progress, on_loaded=on_loaded
        )

    async def versions(self, name: str, tenant: str = "default") -> list[VersionRow]:
        """Every version of the schedule, oldest first: (version, valid_from, valid_to,
        definition, state)."""
        return await self.store.schedule_versions((await self.get(name, tenant)).id)

    # -- dead letters ------------------------------------------------------------------

    async def dead_letters(self, name: str | None = None, tenant: str = "default", limit: int = 50) -> list[Occurrence]:
        """DEAD occurrences (of one schedule, or of the tenant), most recently dead first."""
        if name is not None:
            return await self.store.list_dead((await self.get(name, tenant)).id, None, limit)
        return await self.store.list_dead(None, tenant, limit)

    async def replay(self, id_or_prefix: str) -> Occurrence:
        """A DEAD occurrence back into the queue now: same id, the next attempt number."""
        occ = await self.occurrence(id_or_prefix)
        schedule = await self.store.get_schedule_by_id(occ.schedule_id)
        if schedule is None or schedule.state is ScheduleState.DELETED:
            raise Conflict(f"occurrence {occ.id} belongs to a deleted schedule; it cannot be replayed")
        now = self.clock.now()
        return await self.store.replay_dead(
            occ.id, f"replayed from the dead-letter queue at {now.isoformat(timespec='seconds')}", now
        )

    async def drop(self, id_or_prefix: str) -> Occurrence:
        """A DEAD occurrence leaves the dead-letter queue: CANCELED, history kept."""
        occ = await self.occurrence(id_or_prefix)
        reason = DLQ_DROP_REASON + (f" (was: {occ.reason})" if occ.reason else "")
        return await self.store.drop_dead(occ.id, reason, self.clock.now())

    # -- tenants -----------------------------------------------------------------------

    async def set_tenant(self, tenant: str, **changes: int | None) -> TenantLimits:
        """Change some of a tenant's limits (a value of None removes that limit); the others
        stay as they were."""
        check_name(tenant, "tenant")  # the rule every schedule's tenant follows
        for key, value in changes.items():
            if key not in _LIMIT_FIELDS:
                raise InvalidInput(f"unknown tenant limit {key!r}")
            if value is not None and value < (1 if key == "catch_up_rate" else 0):
                raise InvalidInput(f"{key.replace('_', '-')}: must be {'1' if key == 'catch_up_rate' else '0'} or more")
        current = next((t for t in await self.store.tenant_limits() if t.tenant == tenant), TenantLimits(tenant))
        wanted = dataclasses.replace(current, **changes)  # type: ignore[arg-type]
        return await self.store.set_tenant_limits(wanted, self.clock.now())

    async def tenants(self) -> list[TenantUsage]:
        return await self.store.tenant_usage()

    async def remove(self, name: str, tenant: str = "default") -> Change:
        schedule = await self.get(name, tenant)
        return await self._change(schedule, schedule.definition, ScheduleState.DELETED, None, "schedule deleted")

    async def run_now(self, name: str, tenant: str = "default") -> Occurrence:
        schedule = await self.get(name, tenant)
        now = self.clock.now()
        occ_id = manual_occurrence_id(schedule.id, now, uuid.uuid4().hex)
        return await self.store.add_manual_occurrence(schedule, occ_id, schedule.definition.retry.max_attempts, now)

    async def runs(
        self, name: str | None, limit: int = 50, tenant: str = "default", upcoming: bool = False
    ) -> list[Occurrence]:
        """Occurrences newest first; planned ones not yet due only with ``upcoming``. A
        ``name`` no live schedule has: the runs of the one of that name deleted last."""
        schedule_id = (await self.live_or_deleted(name, tenant)).id if name else None
        before = None if upcoming else self.clock.now()
        return await self.store.list_occurrences(schedule_id, limit, before)

    async def occurrence(self, id_or_prefix: str) -> Occurrence:
        occ = await self.store.get_occurrence(id_or_prefix)
        if occ is None:
            raise NotFound(f"no occurrence {id_or_prefix!r}")
        return occ

    async def attempt(self, id_or_prefix: str, number: int | None = None) -> tuple[Occurrence, Attempt]:
        occ = await self.occurrence(id_or_prefix)
        attempts = await self.store.list_attempts(occ.id)
        if not attempts:
            raise NotFound(f"occurrence {occ.id} has not run yet (state {occ.state})")
        if number is None:
            return occ, attempts[-1]
        for a in attempts:
            if a.number == number:
                return occ, a
        raise NotFound(f"occurrence {occ.id} has no attempt {number} (it has {len(attempts)})")

    async def plan_apply(
        self,
        desired: Sequence[ScheduleDef],
        tenant: str = "default",
        *,
        prune: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> ApplyPlan:
        """Compare ``desired`` (the whole wanted set of ``tenant``) with the store.

        Each definition is put in ``tenant``, marked managed and normalized, then it is a
        create (no live schedule of that name), an update (a managed schedule whose
        definition differs; cursor by :func:`cursor_after_update`), or unchanged. A live
        schedule of that name *without* the apply label is a problem (``Conflict``): apply
        never takes over a schedule added by hand. With ``prune``, managed schedules of the
        tenant that ``desired`` does not name become deletes; without it they are listed
        in ``not_listed``. Nothing is written; ``progress(n)`` is called as items are done.
        """
        with _cyclic_gc_paused(len(desired)):
            planner = await self._planner(desired, tenant, prune, progress)
            planner.plan_all()
            return planner.plan()

    async def apply(
        self,
        desired: Sequence[ScheduleDef],
        tenant: str = "default",
        *,
        prune: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[ApplyPlan, ApplyResult | None]:
        """:meth:`plan_apply` then :meth:`apply_plan`, pipelined: the store transaction
        starts once the updates and deletes are planned, and the creates are planned while
        it writes (ahead of it while the database works, the rest as it reads them). The
        same plan, and the same all or nothing: when any entry is a problem the
        transaction is rolled back and the plan (every problem in it) comes back with no
        result; nothing is written either when nothing changes."""
        with _cyclic_gc_paused(len(desired)):
            return await self._apply(desired, tenant, prune, progress)

    async def _apply(
        self, desired: Sequence[ScheduleDef], tenant: str, prune: bool, progress: Callable[[int], None] | None
    ) -> tuple[ApplyPlan, ApplyResult | None]:
        planner = await self._planner(desired, tenant, prune, progress, encode=True)
        if planner.problems or not planner.pending:
            planner.plan_all()
            plan = planner.plan()
            return plan, None if plan.problems or not plan.changes else await self.apply_plan(plan)
        try:
            async with _running_beside(planner.plan_ahead()):
                written = await self.store.apply_schedules(
                    _PendingCreates(planner), [_change_of(item) for item in planner.changes], planner.now
                )
        except _PlanHasProblems:
            planner.plan_all()
            return planner.plan(), None
        return planner.plan(), _result(written, planner.changes)

    async def _planner(
        self,
        desired: Sequence[ScheduleDef],
        tenant: str,
        prune: bool,
        progress: Callable[[int], None] | None,
        *,
        encode: bool = False,
    ) -> _ApplyPlanner:
        """A planner for ``desired`` with the stored side read and every entry but the
        creates planned (duplicate names, updates, unchanged, deletes)."""
        now = self.clock.now().replace(microsecond=0)
        planner = _ApplyPlanner(self, desired, tenant, prune, progress, now, encode)
        planner.start({s.name: s for s in await self.store.list_schedules(tenant)})
        return planner

    async def apply_plan(self, plan: ApplyPlan) -> ApplyResult:
        """Write a plan's creates, updates and deletes in one store transaction (all or
        nothing: ``Conflict`` if anything moved since the plan was made)."""
        if plan.problems:
            raise InvalidInput(f"the plan has {len(plan.problems)} problem(s); nothing was applied")
        creates = _EncodedCreates([i for i in plan.items if i.action is PlanAction.CREATE and i.desired is not None])
        changed = [item for item in plan.items if item.action in (PlanAction.UPDATE, PlanAction.DELETE)]
        async with _running_beside(creates.encode_ahead()):
            with _cyclic_gc_paused(len(plan.items)):
                written = await self.store.apply_schedules(creates, [_change_of(item) for item in changed], plan.now)
        return _result(written, changed)

    async def _change(
        self,
        schedule: Schedule,
        definition: ScheduleDef,
        state: ScheduleState,
        next_run_at: datetime | None,
        reason: str,
    ) -> Change:
        written = await self.store.change_schedule(
            schedule.id, schedule.version, definition, state, next_run_at, self.clock.now(), reason
        )
        updated = written.schedule
        # Claimed work of older versions is not canceled: it finishes under its version.
        running = await self.store.running_occurrences(schedule.id)
        return Change(
            updated, written.canceled, tuple(o for o in running if o.version < updated.version), written.replanned
        )

    # -- the HTTP API's tokens and the audit log (clockctl token, clockctl audit) -------------

    async def create_token(self, tenant: str, role: str, name: str, expires_in: timedelta | None, actor: str) -> Issued:
        """A new token of ``tenant``: the store keeps its hash, and the token and its
        ``token.create`` audit entry (by ``actor``) commit together. ``Issued.secret`` is
        the only copy of the token."""
        issued = issue(tenant, role, name, self.clock.now(), expires_in)
        entry = AuditEntry(issued.record.created_at, tenant, actor, "token.create", name, detail={"role": role})
        with self.store.audited(lambda _: entry):
            await self.store.create_token(issued.record)
        return issued

    async def list_tokens(self, tenant: str | None = None) -> list[ApiToken]:
        """Tokens of ``tenant`` (None: every tenant's), never the tokens themselves."""
        return await self.store.list_tokens(tenant)

    async def revoke_token(self, ref: str, tenant: str, actor: str) -> ApiToken:
        """Revoke the live token ``ref`` (an id, in whichever tenant holds it; or a name in
        ``tenant``); the revocation and its ``token.revoke`` entry commit together.
        ``NotFound`` when there is no such live token."""
        found = await self.store.get_token(ref)
        owner = found.tenant if found is not None else tenant

        def describe(token: ApiToken | None) -> AuditEntry | None:
            if token is None:
                return None
            return AuditEntry(token.revoked_at or token.created_at, token.tenant, actor, "token.revoke", token.name)

        with self.store.audited(describe):
            revoked = await self.store.revoke_token(owner, ref, self.clock.now())
        if revoked is None:
            raise NotFound(token_not_found(ref, tenant))
        return revoked

    async def audit(self, tenant: str | None = None, limit: int = 50) -> list[AuditEntry]:
        """The audit log of ``tenant`` (None: every tenant's), newest first."""
        return await self.store.audit_page(tenant, None, limit)


def token_not_found(ref: str, tenant: str | None) -> str:
    """The one message for a token that is not there (or not the caller's to see);
    ``tenant`` None: the calling token's own (over the API)."""
    where = f"tenant {tenant!r}" if tenant is not None else "your token's tenant"
    return f"no live token {ref!r} in {where} (clockctl token list shows them)"


# -- apply: the planner ----------------------------------------------------------------------

# Creates planned per turn of the event loop while the store writes (~1 ms of planning).
# Every await of the store's transaction (the socket ready to take more of a batch, a
# short statement's answer) gives the planner a turn, and the store waits for that chunk
# to end: 200 a turn (~5 ms) held a 20,000-create apply to 15,500-16,300 creates/s,
# against 18,800-21,500 at 50 (three interleaved runs). Keeping the planner at most a
# batch ahead of the store's reads did not measure better (18,400-19,400 against
# 19,000-21,100 unbounded, four interleaved runs).
_PLAN_CHUNK = 50
# The same ~1 ms a turn for apply_plan's encoding alone (codec.definition_texts, ~7 µs).
_ENCODE_CHUNK = 150


class _PlanHasProblems(Exception):
    """Raised into the apply transaction (rolling it back) once a create is a problem."""


def _change_of(item: PlanItem) -> ScheduleChange:
    """The store change for an UPDATE or DELETE plan item."""
    current = item.current
    assert current is not None
    if item.action is PlanAction.UPDATE:
        assert item.desired is not None
        return ScheduleChange(
            current.id, current.version, item.desired, current.state, item.next_run_at, "schedule updated by apply"
        )
    reason = "schedule deleted by apply --prune"
    return ScheduleChange(current.id, current.version, current.definition, ScheduleState.DELETED, None, reason)


def _result(written: AppliedSchedules, changed: Sequence[PlanItem]) -> ApplyResult:
    kinds = [item.action for item in changed]
    return ApplyResult(
        created=written.created,
        updated=[s for s, k in zip(written.changed, kinds, strict=True) if k is PlanAction.UPDATE],
        deleted=[s for s, k in zip(written.changed, kinds, strict=True) if k is PlanAction.DELETE],
        canceled=written.canceled,
        replanned=written.replanned,
    )


class _ApplyPlanner:
    """One apply plan, made in two parts: :meth:`start` plans every entry but the creates
    (so the store's changes are known before it writes anything), and the creates —
    usually nearly all of a first apply — are planned in order by :meth:`plan_to` (called
    by :class:`_PendingCreates` as the store reads them, and by :meth:`plan_ahead` while
    it waits for the database).

    Invariants: each entry is planned once and the plan is the one a single pass in
    ``desired`` order gives (items in index order, then deletes; problems by index);
    each distinct (kind, expression, zone) is planned once — its validation is cached by
    ``validate_definition`` and its first run here; ``creates[i]`` is the create of
    ``pending[i]`` while there is no problem. A lock keeps the planning to one thread at
    a time (the SQLite store reads the creates on its own thread).
    """

    def __init__(
        self,
        ops: Ops,
        desired: Sequence[ScheduleDef],
        tenant: str,
        prune: bool,
        progress: Callable[[int], None] | None,
        now: datetime,
        encode: bool,
    ) -> None:
        self.ops, self.desired, self.tenant, self.prune, self.progress, self.now = (
            ops, desired, tenant, prune, progress, now,
        )  # fmt: skip
        # Whether the creates carry their encoded texts: only when the store writes them
        # as they are planned (Ops.apply); a plan that is only shown needs none.
        self.encode = encode
        self.items: dict[int, PlanItem] = {}
        self.problems: list[ApplyProblem] = []
        self.changes: list[PlanItem] = []  # updates by index, then deletes
        self.deletes: list[PlanItem] = []
        self.not_listed: list[str] = []
        self.pending: list[int] = []  # indexes of the creates, in order
        self.creates: list[NewSchedule] = []
        self.done = 0  # how many of ``pending`` are planned
        # first_run per (kind, expr, tz) as given: ``now`` (also the ``every`` anchor) is
        # fixed for the plan, and thousands of creates share a few expressions.
        self._firsts: dict[tuple[str, str, str], datetime] = {}
        self._stored: dict[str, Schedule] = {}
        self._lock = threading.Lock()

    def start(self, stored: dict[str, Schedule]) -> None:
        self._stored = stored
        seen: dict[str, int] = {}
        for index, raw in enumerate(self.desired):
            if raw.name in seen:
                self._tick()
                self.problems.append(
                    ApplyProblem(index, f"name: {raw.name!r} is also defined by entry {seen[raw.name] + 1}")
                )
                continue
            seen[raw.name] = index
            if raw.name in stored:
                self._tick()
                self._plan_stored(index, raw, stored[raw.name])
            else:
                self.pending.append(index)
        self.changes = [item for _, item in sorted(self.items.items()) if item.action is PlanAction.UPDATE]
        for name, schedule in sorted(stored.items()):
            if name in seen or not is_managed(schedule.definition):
                continue
            if self.prune:
                self.deletes.append(PlanItem(PlanAction.DELETE, name, None, None, schedule, None))
            else:
                self.not_listed.append(name)
        self.changes += self.deletes

    def _tick(self) -> None:
        if self.progress is not None:
            self.progress(1)

    def _definition(self, raw: ScheduleDef) -> ScheduleDef:
        """``raw`` in the plan's tenant with the apply label, normalized; the egress
        policy checked."""
        labels = managed_labels(raw.labels)
        marked = raw
        if raw.tenant != self.tenant or raw.labels != labels:  # one copy, none if it has both
            marked = _in_tenant(raw, self.tenant, labels)
        definition = normalize(marked)
        self.ops._check_egress(definition)
        return definition

    def _plan_stored(self, index: int, raw: ScheduleDef, current: Schedule) -> None:
        try:
            definition = self._definition(raw)
            if not is_managed(current.definition):
                raise Conflict(
                    f"name: schedule {definition.name!r} already exists and was not created by apply "
                    f"(added with clockctl add?); apply does not take it over: rename the entry, or "
                    f"remove the schedule first (clockctl rm {definition.name}"
                    + (f" --tenant {self.tenant}" if self.tenant != "default" else "")
                    + ")"
                )
            if current.definition == definition:
                self.items[index] = PlanItem(
                    PlanAction.UNCHANGED, definition.name, index, definition, current, current.next_run_at
                )
            else:
                nxt = cursor_after_update(current, definition, self.ops.clock.now())
                self.items[index] = PlanItem(PlanAction.UPDATE, definition.name, index, definition, current, nxt)
        except (InvalidInput, Conflict) as exc:
            self.problems.append(ApplyProblem(index, exc.message, exc.exit_code))

    def plan_to(self, count: int) -> None:
        """Plan the creates up to ``pending[count - 1]``."""
        with self._lock:
            for schedule_id in new_schedule_ids(max(0, min(count, len(self.pending)) - self.done)):
                index = self.pending[self.done]
                self.done += 1
                self._tick()
                self._plan_create(index, self.desired[index], schedule_id)

    def plan_all(self) -> None:
        self.plan_to(len(self.pending))

    async def plan_ahead(self) -> None:
        """Plan the creates a chunk per turn of the event loop (the store's transaction
        runs between turns)."""
        while self.done < len(self.pending):
            self.plan_to(self.done + _PLAN_CHUNK)
            await asyncio.sleep(0)

    def _plan_create(self, index: int, raw: ScheduleDef, schedule_id: str) -> None:
        try:
            definition = self._definition(raw)
            key = (definition.kind, definition.expr, definition.tz)
            first = self._firsts.get(key)
            if first is None:
                first = self._firsts[key] = first_run(definition, self.now)
            shard = shard_of(schedule_id, self.ops.shard_count)
            self.items[index] = PlanItem(
                PlanAction.CREATE, definition.name, index, definition, None, first, schedule_id, shard
            )
            # Encoded here, not by the store's write: the planner runs while the database
            # writes the previous batch, the write's own encoding does not overlap it.
            texts = definition_texts(definition) if self.encode else None
            self.creates.append(NewSchedule(schedule_id, definition, shard, first, texts))
        except (InvalidInput, Conflict) as exc:
            self.problems.append(ApplyProblem(index, exc.message, exc.exit_code))

    def plan(self) -> ApplyPlan:
        """The plan (every entry planned)."""
        assert self.done == len(self.pending)
        items = [item for _, item in sorted(self.items.items())] + self.deletes
        problems = sorted(self.problems, key=lambda p: p.index)
        return ApplyPlan(self.tenant, self.now, items, problems, self.not_listed)


# The slots of ScheduleDef's fields (member descriptors) that _in_tenant copies as they
# are, and the two it sets.
_COPIED_SLOTS: Final[tuple[MemberDescriptorType, ...]] = tuple(
    vars(ScheduleDef)[f.name] for f in dataclasses.fields(ScheduleDef) if f.name not in ("tenant", "labels")
)
_TENANT_SLOT: Final[MemberDescriptorType] = vars(ScheduleDef)["tenant"]
_LABELS_SLOT: Final[MemberDescriptorType] = vars(ScheduleDef)["labels"]


def _in_tenant(raw: ScheduleDef, tenant: str, labels: tuple[tuple[str, str], ...]) -> ScheduleDef:
    """``dataclasses.replace(raw, tenant=tenant, labels=labels)`` for every create of an
    apply, without replace's walk of the class's field objects and keyword call (~8 µs a
    create) or the frozen ``__init__``'s ``object.__setattr__`` per field (~3): each slot
    written through its member descriptor, which is what ``object.__setattr__`` ends in
    (~2; ScheduleDef has no ``__post_init__`` to skip)."""
    made: ScheduleDef = object.__new__(ScheduleDef)
    for slot in _COPIED_SLOTS:
        slot.__set__(made, slot.__get__(raw))
    _TENANT_SLOT.__set__(made, tenant)
    _LABELS_SLOT.__set__(made, labels)
    return made


@contextlib.asynccontextmanager
async def _running_beside(work: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run ``work`` as a task beside the block (the planning or encoding done ahead while
    the store's transaction waits for the database); stopped when the block ends."""
    task = asyncio.create_task(work)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _read_to(index: int | slice, length: int) -> int:
    """How many items of a sequence of ``length`` reading ``index`` needs made."""
    if isinstance(index, slice):
        return len(range(length)[: index.stop]) if index.stop is not None else length
    return (index + length if index < 0 else index) + 1


class _EncodedCreates(Sequence[NewSchedule]):
    """A finished plan's creates as ``apply_plan`` hands them to the store, each encoded
    (``NewSchedule.texts``) as the store reads it or, by :meth:`encode_ahead`, while the
    store waits for the database — what ``Ops.apply``'s planner does for its creates
    (the API's apply and the daemon's reload write plans made beforehand). A lock keeps
    the encoding to one thread at a time (the SQLite store reads on its own)."""

    def __init__(self, items: list[PlanItem]) -> None:
        self._items = items
        self._creates: list[NewSchedule] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def encode_to(self, count: int) -> None:
        with self._lock:
            for item in self._items[len(self._creates) : count]:
                assert item.desired is not None  # a create's
                texts = definition_texts(item.desired)
                self._creates.append(NewSchedule(item.schedule_id, item.desired, item.shard, item.next_run_at, texts))

    async def encode_ahead(self) -> None:
        while len(self._creates) < len(self._items):
            self.encode_to(len(self._creates) + _ENCODE_CHUNK)
            await asyncio.sleep(0)

    @overload
    def __getitem__(self, index: int) -> NewSchedule: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[NewSchedule]: ...

    def __getitem__(self, index: int | slice) -> NewSchedule | Sequence[NewSchedule]:
        self.encode_to(_read_to(index, len(self)))
        return self._creates[index]


class _PendingCreates(Sequence[NewSchedule]):
    """The creates of a plan in progress, as the store's ``apply_schedules`` reads them:
    its length is known, and reading an item plans the creates up to it first. Once any
    entry is a problem, reading raises ``_PlanHasProblems`` (the transaction rolls back)."""

    def __init__(self, planner: _ApplyPlanner) -> None:
        self._planner = planner

    def __len__(self) -> int:
        return len(self._planner.pending)

    @overload
    def __getitem__(self, index: int) -> NewSchedule: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[NewSchedule]: ...

    def __getitem__(self, index: int | slice) -> NewSchedule | Sequence[NewSchedule]:
        planner = self._planner
        planner.plan_to(_read_to(index, len(self)))
        if planner.problems:
            raise _PlanHasProblems
        return planner.creates[index]
