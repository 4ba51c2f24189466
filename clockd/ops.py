"""Use cases behind ``clockctl``: validation, cursors and versions, over the store port.

Everything a user can change goes through here, so both stores and every
front end (CLI, YAML apply) get the same rules:

* a definition is validated and normalized before anything is written, and a
  schedule that can never fire again is refused (``NeverFires``);
* a new or resumed schedule's cursor is the first instant strictly after
  ``now`` — resuming never replays the paused period;
* pause, resume, update and delete bump the version in one transaction that
  cancels the not-yet-claimed occurrences of older versions.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from clockd.core.clock import Clock
from clockd.core.ids import manual_occurrence_id, new_schedule_id, shard_of
from clockd.core.model import (
    Attempt,
    Occurrence,
    Schedule,
    ScheduleDef,
    ScheduleState,
)
from clockd.core.spec import Spec, compile_spec, validate_definition
from clockd.errors import InvalidInput, NeverFires, NotFound
from clockd.store import Store

DEFAULT_SHARD_COUNT = 64
_EPSILON = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Change:
    schedule: Schedule
    canceled: int


def normalize(definition: ScheduleDef) -> ScheduleDef:
    """Validate a definition and return it with its expression in canonical form."""
    if not definition.name or len(definition.name) > 200:
        raise InvalidInput("name: must be 1 to 200 characters")
    if any(ord(c) < 32 for c in definition.name):
        raise InvalidInput("name: control characters are not allowed")
    expr = validate_definition(definition.kind, definition.expr, definition.tz)
    if definition.retry.retries < 0:
        raise InvalidInput("retries: must be 0 or more")
    if definition.timeout is not None and definition.timeout.total_seconds() <= 0:
        raise InvalidInput("timeout: must be positive")
    return dataclasses.replace(definition, expr=expr)


def spec_of(schedule: Schedule) -> Spec:
    d = schedule.definition
    return compile_spec(d.kind, d.expr, d.tz, schedule.created_at)


def next_runs(spec: Spec, after: datetime, count: int) -> list[datetime]:
    out: list[datetime] = []
    t: datetime | None = after
    while t is not None and len(out) < count:
        t = spec.next_after(t)
        if t is not None:
            out.append(t)
    return out


class Ops:
    def __init__(self, store: Store, clock: Clock, shard_count: int = DEFAULT_SHARD_COUNT) -> None:
        self.store, self.clock, self.shard_count = store, clock, shard_count

    async def add(self, definition: ScheduleDef) -> Schedule:
        definition = normalize(definition)
        # Whole seconds: ``every`` schedules are anchored at creation, and `every 1m`
        # should fire at :SS, not :SS.123456.
        now = self.clock.now().replace(microsecond=0)
        schedule_id = new_schedule_id()
        spec = compile_spec(definition.kind, definition.expr, definition.tz, now)
        first = spec.next_after(now)
        if first is None:
            raise NeverFires(f"{definition.expr}: never fires after {now.isoformat(timespec='seconds')}")
        return await self.store.create_schedule(
            schedule_id, definition, shard_of(schedule_id, self.shard_count), first, now
        )

    async def get(self, name: str, tenant: str = "default") -> Schedule:
        schedule = await self.store.get_schedule(tenant, name)
        if schedule is None:
            raise NotFound(f"no schedule named {name!r}" + (f" in tenant {tenant!r}" if tenant != "default" else ""))
        return schedule

    async def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        return await self.store.list_schedules(tenant)

    async def pause(self, name: str, tenant: str = "default") -> Change:
        schedule = await self.get(name, tenant)
        if schedule.state is ScheduleState.PAUSED:
            return Change(schedule, 0)
        return await self._change(
            schedule,
            schedule.definition,
            ScheduleState.PAUSED,
            schedule.next_run_at,
            "schedule paused",
        )

    async def resume(self, name: str, tenant: str = "default") -> Change:
        schedule = await self.get(name, tenant)
        if schedule.state is ScheduleState.ACTIVE:
            return Change(schedule, 0)
        now = self.clock.now()
        nxt = spec_of(schedule).next_after(now)
        return await self._change(schedule, schedule.definition, ScheduleState.ACTIVE, nxt, "schedule resumed")

    async def update(self, name: str, definition: ScheduleDef, tenant: str = "default") -> Change:
        schedule = await self.get(name, tenant)
        definition = normalize(definition)
        now = self.clock.now()
        # The cursor never goes back: instants before it were materialized for the old
        # version (and are canceled now unless claimed); the new version starts at it.
        after = now
        if schedule.next_run_at is not None and schedule.next_run_at - _EPSILON > now:
            after = schedule.next_run_at - _EPSILON
        spec = compile_spec(definition.kind, definition.expr, definition.tz, schedule.created_at)
        nxt = spec.next_after(after)
        if nxt is None and schedule.state is ScheduleState.ACTIVE:
            raise NeverFires(f"{definition.expr}: never fires after {after.isoformat(timespec='seconds')}")
        return await self._change(schedule, definition, schedule.state, nxt, "schedule updated")

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
        """Occurrences newest first; planned ones not yet due only with ``upcoming``."""
        schedule_id = (await self.get(name, tenant)).id if name else None
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

    async def _change(
        self,
        schedule: Schedule,
        definition: ScheduleDef,
        state: ScheduleState,
        next_run_at: datetime | None,
        reason: str,
    ) -> Change:
        updated, canceled = await self.store.change_schedule(
            schedule.id, schedule.version, definition, state, next_run_at, self.clock.now(), reason
        )
        return Change(updated, canceled)
