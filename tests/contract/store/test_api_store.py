"""The HTTP API's store methods (schema 0007): tokens, the audit log, keyset pages."""

from __future__ import annotations

import pytest

from clockd.core.model import OccurrenceState, Schedule, ScheduleState
from clockd.errors import Conflict
from clockd.store import ApiToken, AuditEntry, OccurrencePage, SchedulePage, Store

from .support import MIN, T0, add_schedule, materialize_next


def _token(tid: str, name: str = "ci", tenant: str = "acme", role: str = "operator") -> ApiToken:
    return ApiToken(tid, tenant, name, role, "ab" * 32, T0, T0 + 90 * 24 * 60 * MIN)


async def test_tokens_store_a_hash_and_revoke_by_id_or_name(store: Store) -> None:
    await store.create_token(_token("t1"))
    await store.create_token(_token("t2", name="deploy", role="readonly"))
    await store.create_token(_token("t3", tenant="other"))
    assert await store.get_token("t1") == _token("t1")
    assert await store.get_token("nope") is None
    assert [t.id for t in await store.list_tokens("acme")] == ["t1", "t2"]
    assert len(await store.list_tokens()) == 3
    with pytest.raises(Conflict, match="already has a token named 'ci'"):
        await store.create_token(_token("t4"))
    revoked = await store.revoke_token("acme", "ci", T0 + MIN)
    assert revoked is not None and revoked.id == "t1" and revoked.revoked_at == T0 + MIN
    assert await store.revoke_token("acme", "ci", T0 + MIN) is None  # already revoked
    assert await store.revoke_token("acme", "t3", T0 + MIN) is None  # another tenant's token
    by_id = await store.revoke_token("other", "t3", T0 + MIN)
    assert by_id is not None and by_id.name == "ci"
    await store.create_token(_token("t5"))  # the name is free again


async def test_audit_is_newest_first_per_tenant_by_keyset(store: Store) -> None:
    ids = []
    for n in range(5):
        entry = AuditEntry(T0 + n * MIN, "acme" if n % 2 == 0 else "other", "ci", "schedule.create", f"s{n}", None, 1)
        ids.append(await store.record_audit(entry))
    await store.record_audit(AuditEntry(T0, "acme", "ci", "schedule.pause", "s0", 1, 2, {"reason": "fix ☃"}))
    assert ids == sorted(ids)
    page = await store.audit_page("acme", None, 2)
    assert [(e.action, e.target) for e in page] == [("schedule.pause", "s0"), ("schedule.create", "s4")]
    assert page[0].detail == {"reason": "fix ☃"} and page[0].before_version == 1 and page[0].after_version == 2
    rest = await store.audit_page("acme", page[-1].id, 10)
    assert [e.target for e in rest] == ["s2", "s0"]
    assert len(await store.audit_page(None, None, 100)) == 6


async def test_schedule_pages_follow_names_from_the_cursor_with_filters(store: Store) -> None:
    for name in ["b", "a", "c/1", "c/2", "d"]:
        await add_schedule(store, name, tenant="acme", labels=(("team", "x" if name < "c" else "y"),))
    await add_schedule(store, "a", tenant="other")
    first = await store.schedules_page("acme", SchedulePage(limit=2))
    assert [s.name for s in first] == ["a", "b"]
    second = await store.schedules_page("acme", SchedulePage(after="b", limit=2))
    assert [s.name for s in second] == ["c/1", "c/2"]
    assert [s.name for s in await store.schedules_page("acme", SchedulePage(name_prefix="c/"))] == ["c/1", "c/2"]
    labelled = await store.schedules_page("acme", SchedulePage(label=("team", "y")))
    assert [s.name for s in labelled] == ["c/1", "c/2", "d"]
    d = await store.get_schedule("acme", "d")
    assert d is not None
    await store.change_schedule(d.id, 1, d.definition, ScheduleState.PAUSED, None, T0, "paused")
    paused = await store.schedules_page("acme", SchedulePage(state=ScheduleState.PAUSED))
    assert [s.name for s in paused] == ["d"]
    assert [s.name for s in await store.schedules_page("other", SchedulePage())] == ["a"]


async def test_occurrence_pages_are_newest_first_by_keyset_within_the_tenant(store: Store) -> None:
    mine = await add_schedule(store, "mine", tenant="acme")
    theirs = await add_schedule(store, "theirs", tenant="other")
    ids = []
    for _ in range(3):
        mine, oid = await materialize_next(store, mine)
        ids.append(oid)
    await materialize_next(store, theirs)
    page = await store.occurrences_page("acme", OccurrencePage(limit=2))
    assert [o.id for o in page] == [ids[2], ids[1]]
    last = page[-1]
    rest = await store.occurrences_page("acme", OccurrencePage(before=(last.scheduled_for, last.id)))
    assert [o.id for o in rest] == [ids[0]]
    assert await store.occurrences_page("acme", OccurrencePage(schedule_id=theirs.id)) == []
    ranged = await store.occurrences_page("acme", OccurrencePage(since=T0 + MIN, until=T0 + 2 * MIN))
    assert [o.id for o in ranged] == [ids[1]]
    scheduled = await store.occurrences_page("acme", OccurrencePage(state=OccurrenceState.SCHEDULED))
    assert len(scheduled) == 3
    assert await store.occurrences_page("acme", OccurrencePage(state=OccurrenceState.DEAD)) == []


async def test_an_audited_write_commits_with_its_audit_entry_or_not_at_all(store: Store) -> None:
    def entry(schedule: Schedule) -> AuditEntry:
        return AuditEntry(T0, "acme", "ci", "schedule.create", schedule.name, None, schedule.version)

    with store.audited(entry):
        first = await add_schedule(store, "a", tenant="acme")
        await add_schedule(store, "b", tenant="acme")  # the block's entry went with the first write only
    assert [(e.target, e.after_version) for e in await store.audit_page("acme", None, 10)] == [("a", 1)]

    with pytest.raises(Conflict), store.audited(entry):  # the write itself fails: no entry
        await add_schedule(store, "a", tenant="acme")

    def audit_fails(schedule: Schedule) -> AuditEntry:
        raise RuntimeError("the audit log is unwritable")

    with pytest.raises(RuntimeError), store.audited(audit_fails):  # the change rolls back with it
        await store.change_schedule(first.id, 1, first.definition, ScheduleState.PAUSED, None, T0, "paused")
    assert (await store.get_schedule("acme", "a")) == first
    assert len(await store.audit_page("acme", None, 10)) == 1

    with store.audited(lambda result: None):  # None: nothing to record
        await store.change_schedule(first.id, 1, first.definition, ScheduleState.PAUSED, None, T0, "paused")
    assert len(await store.audit_page("acme", None, 10)) == 1
