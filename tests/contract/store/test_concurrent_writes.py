"""Concurrent writes that fail beside writes that succeed: each failure reaches only its own
caller and undoes only its own write. (The SQLite store runs concurrent writes as one
transaction, each in a savepoint: group commit; PostgreSQL runs each in its own.)"""

from __future__ import annotations

import asyncio
from typing import Any

from clockd.core.ids import new_schedule_id
from clockd.core.model import Schedule
from clockd.errors import Conflict
from clockd.store import AuditEntry, Store

from .support import MIN, T0, add_schedule, definition

TENANT = "acme"


def _entry(schedule: Schedule) -> AuditEntry:
    return AuditEntry(T0, TENANT, "ci", "schedule.create", schedule.name, None, schedule.version)


def _audit_fails(schedule: Schedule) -> AuditEntry:
    raise RuntimeError(f"the audit entry of {schedule.name} cannot be written")


async def _create(store: Store, name: str, key: str | None = None, describe: Any = _entry) -> Schedule:
    """An audited create with an idempotency key: three rows and a key, one transaction."""
    with store.audited(describe):
        return await store.create_schedule(
            new_schedule_id(), definition(name, tenant=TENANT), 0, T0, T0 - MIN, idempotency_key=key or f"key-{name}"
        )


async def concurrent_creates_with_failures(store: Store) -> None:
    """The scenario (the SQLite adapter's tests run it again and check it was one batch)."""
    await _create(store, "taken")
    calls: list[tuple[str, Any]] = []
    for i in range(24):
        if i % 6 == 1:  # the name is taken: refused at the schedule's insert
            calls.append(("conflict", _create(store, "taken", key=f"other-{i}")))
        elif i % 6 == 3:  # the key is taken: the schedule and its version row are written first
            calls.append(("conflict", _create(store, f"half-{i}", key="key-taken")))
        elif i % 6 == 5:  # the audit entry fails after the schedule's rows
            calls.append(("runtime", _create(store, f"unaudited-{i}", describe=_audit_fails)))
        else:
            calls.append(("ok", _create(store, f"good-{i}")))
    outcomes = await asyncio.gather(*(call for _, call in calls), return_exceptions=True)

    for (expected, _), outcome in zip(calls, outcomes, strict=True):
        if expected == "ok":
            assert isinstance(outcome, Schedule), outcome
        elif expected == "conflict":
            assert isinstance(outcome, Conflict), outcome
        else:
            assert isinstance(outcome, RuntimeError) and "cannot be written" in str(outcome), outcome

    live = {s.name: s for s in await store.list_schedules(TENANT)}
    good = {f"good-{i}" for i in range(24) if i % 2 == 0}
    assert set(live) == good | {"taken"}  # no half-, unaudited- schedule: each was undone whole
    for name in good:
        schedule = live[name]
        assert [v[0] for v in await store.schedule_versions(schedule.id)] == [1]
        assert await store.get_schedule_by_idempotency_key(TENANT, f"key-{name}") == schedule
    audited = [e.target for e in await store.audit_page(TENANT, None, 100)]
    assert sorted(audited) == sorted([*good, "taken"])


async def test_a_failing_write_beside_others_undoes_only_itself(store: Store) -> None:
    await concurrent_creates_with_failures(store)
    # The store goes on writing after the failures.
    assert (await add_schedule(store, "after", tenant=TENANT)).version == 1
