"""``apply_schedules``: many creates and changes in one transaction, all or nothing
(``clockctl apply``). Every adapter must pass these."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Unpack

import pytest

from clockd.core.ids import new_schedule_id
from clockd.core.model import OccurrenceState, OverlapPolicy, Schedule, ScheduleKind, ScheduleState, TenantLimits
from clockd.errors import Conflict, QuotaExceeded
from clockd.store import CursorAdvance, NewSchedule, ScheduleChange, Store, codec, engine
from clockd.store.driver import Body, Integrity, Run, Stream
from clockd.store.postgres import PostgresStore

from .support import (
    FENCE,
    LEASE,
    MIN,
    QUEUE,
    T0,
    ChangesBesidesTenant,
    add_schedule,
    claim_one,
    definition,
    enqueue,
    materialize_next,
    planned,
)


def new(name: str, *, tenant: str = "default", shard: int = 0, **changes: Unpack[ChangesBesidesTenant]) -> NewSchedule:
    return NewSchedule(new_schedule_id(), definition(name, tenant=tenant, **changes), shard, T0 + MIN)


async def snapshot(store: Store) -> list[tuple[str, str, int, str, str]]:
    """Everything a failed apply must leave as it was: schedules, versions, occurrences."""
    rows = []
    for s in await store.list_schedules():
        versions = await store.schedule_versions(s.id)
        occurrences = await store.list_occurrences(s.id, 1000)
        rows.append((s.id, s.name, s.version, str(len(versions)), ",".join(o.state for o in occurrences)))
    return sorted(rows)


async def test_creates_updates_and_deletes_in_one_call(store: Store) -> None:
    keep = await add_schedule(store, "keep", now=T0)
    doomed = await add_schedule(store, "doomed", now=T0)
    creates = [new("alpha", shard=3), new("bravo", kind=ScheduleKind.EVERY, expr="1h30m")]
    changes = [
        ScheduleChange(keep.id, 1, definition("keep", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0 + 5 * MIN, "upd"),
        ScheduleChange(doomed.id, 1, doomed.definition, ScheduleState.DELETED, None, "pruned"),
    ]
    result = await store.apply_schedules(creates, changes, T0 + MIN)

    assert [s.name for s in result.created] == ["alpha", "bravo"]
    assert [s.name for s in result.changed] == ["keep", "doomed"]
    assert result.canceled == 0
    for made, asked in zip(result.created, creates, strict=True):
        assert made.id == asked.schedule_id
        assert made.version == 1
        assert made.state is ScheduleState.ACTIVE
        assert made.definition == asked.definition
        assert made.shard == asked.shard
        assert made.next_run_at == T0 + MIN
        assert made.created_at == made.updated_at == T0 + MIN
        assert await store.get_schedule_by_id(made.id) == made
        assert [v[0] for v in await store.schedule_versions(made.id)] == [1]

    updated, deleted = result.changed
    assert (updated.version, updated.definition.expr, updated.next_run_at) == (2, "*/5 * * * *", T0 + 5 * MIN)
    assert updated.updated_at == T0 + MIN and updated.created_at == T0
    assert (deleted.version, deleted.state) == (2, ScheduleState.DELETED)
    assert [s.name for s in await store.list_schedules()] == ["alpha", "bravo", "keep"]
    versions = await store.schedule_versions(keep.id)
    assert [(v[0], v[2]) for v in versions] == [(1, T0 + MIN), (2, None)]


async def test_changes_cancel_unclaimed_older_occurrences_like_change_schedule(store: Store) -> None:
    s = await add_schedule(store, "a", next_run_at=T0)
    s, running_id = await enqueue(store, s)
    await claim_one(store)
    s, queued_id = await enqueue(store, s)
    s, planned_id = await materialize_next(store, s)
    gone = await add_schedule(store, "gone", next_run_at=T0)
    gone, gone_id = await materialize_next(store, gone)

    result = await store.apply_schedules(
        [],
        [
            ScheduleChange(s.id, 1, definition("a", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0 + 10 * MIN, "upd"),
            ScheduleChange(gone.id, 1, gone.definition, ScheduleState.DELETED, None, "pruned"),
        ],
        T0 + 5 * MIN,
    )
    assert result.canceled == 3
    states = {o.id: o for o in await store.list_occurrences(None, 100)}
    assert states[running_id].state is OccurrenceState.RUNNING
    dropped = "upd; version 2 does not fire at this instant"  # */5 fires at neither 00:01 nor 00:02
    for oid, reason in ((queued_id, dropped), (planned_id, dropped), (gone_id, "pruned")):
        assert states[oid].state is OccurrenceState.CANCELED
        assert states[oid].reason == reason
        assert states[oid].finished_at == T0 + 5 * MIN
    backlog = await store.backlog(T0 + 5 * MIN)
    assert (backlog.outbox, backlog.queued, backlog.running) == (0, 0, 1)


async def test_a_moved_version_conflicts_and_nothing_is_applied(store: Store) -> None:
    a = await add_schedule(store, "a")
    b = await add_schedule(store, "b")
    await materialize_next(store, b)
    await store.change_schedule(a.id, 1, a.definition, ScheduleState.PAUSED, None, T0, "paused meanwhile")
    before = await snapshot(store)
    with pytest.raises(Conflict):
        await store.apply_schedules(
            [new("fresh")],
            [
                ScheduleChange(b.id, 1, definition("b", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0, "upd"),
                ScheduleChange(a.id, 1, definition("a", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0, "stale"),
            ],
            T0 + MIN,
        )
    assert await snapshot(store) == before
    assert await store.get_schedule("default", "fresh") is None


async def test_a_deleted_schedule_conflicts_and_nothing_is_applied(store: Store) -> None:
    a = await add_schedule(store, "a")
    await store.change_schedule(a.id, 1, a.definition, ScheduleState.DELETED, None, T0, "rm meanwhile")
    before = await snapshot(store)
    with pytest.raises(Conflict):
        await store.apply_schedules(
            [new("fresh")],
            [ScheduleChange(a.id, 1, a.definition, ScheduleState.ACTIVE, T0, "upd")],
            T0 + MIN,
        )
    assert await snapshot(store) == before


async def test_a_taken_name_conflicts_and_nothing_is_applied(store: Store) -> None:
    a = await add_schedule(store, "a")
    taken = await add_schedule(store, "taken")
    before = await snapshot(store)
    with pytest.raises(Conflict, match="taken"):
        await store.apply_schedules(
            [new("fresh"), new("taken")],
            [ScheduleChange(a.id, 1, definition("a", expr="*/5 * * * *"), ScheduleState.ACTIVE, T0, "upd")],
            T0 + MIN,
        )
    assert await snapshot(store) == before
    assert (await store.get_schedule("default", "taken")) == taken
    # Two creates of one name in the same call conflict too.
    with pytest.raises(Conflict):
        await store.apply_schedules([new("twin"), new("twin")], [], T0 + MIN)
    assert await store.get_schedule("default", "twin") is None


async def test_names_are_per_tenant_and_a_deleted_name_is_reusable_in_the_same_call(store: Store) -> None:
    old = await add_schedule(store, "job")
    result = await store.apply_schedules(
        [new("job"), new("job", tenant="team-b")],
        [ScheduleChange(old.id, 1, old.definition, ScheduleState.DELETED, None, "replaced")],
        T0 + MIN,
    )
    assert len(result.created) == 2
    live = await store.get_schedule("default", "job")
    assert live is not None and live.id == result.created[0].id
    assert [s.definition.tenant for s in await store.list_schedules()] == ["default", "team-b"]


async def test_empty_apply_changes_nothing(store: Store) -> None:
    await add_schedule(store, "a")
    before = await snapshot(store)
    result = await store.apply_schedules([], [], T0)
    assert (result.created, result.changed, result.canceled) == ([], [], 0)
    assert await snapshot(store) == before


async def test_many_in_one_call(store: Store) -> None:
    creates = [new(f"job-{i:04d}", shard=i % 8) for i in range(500)]
    result = await store.apply_schedules(creates, [], T0)
    assert len(result.created) == 500
    listed = await store.list_schedules()
    assert [s.name for s in listed] == [f"job-{i:04d}" for i in range(500)]
    changes = [ScheduleChange(s.id, 1, s.definition, ScheduleState.DELETED, None, "pruned") for s in listed[::2]]
    result = await store.apply_schedules([], changes, T0 + MIN)
    assert len(result.changed) == 250
    assert len(await store.list_schedules()) == 250


# -- creates in batches (set-based statements; row by row again to name what is at fault) ------


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> int:
    """Batches of 3 creates in the engine (every dialect), so a handful of creates spans several."""
    monkeypatch.setattr(engine, "_APPLY_BATCH", 3)
    return 3


async def test_creates_over_several_batches_are_written_as_one_by_one(store: Store, small_batches: int) -> None:
    creates = [
        new("a", shard=1, overlap=OverlapPolicy.SKIP),
        new("b", tenant="team-b", overlap=OverlapPolicy.QUEUE_ONE, labels=(("team", "ops"),)),
        NewSchedule(new_schedule_id(), definition("c", kind=ScheduleKind.ONCE, expr="2026-03-01T00:00:00Z"), 2, None),
        new("d", kind=ScheduleKind.EVERY, expr="1h30m"),
        new("e", tenant="team-b", queue="slow"),
        new("f", shard=7),
        new("g"),
    ]
    assert len(creates) > 2 * small_batches
    result = await store.apply_schedules(creates, [], T0)
    assert [s.id for s in result.created] == [c.schedule_id for c in creates]
    for made, asked in zip(result.created, creates, strict=True):
        assert (made.version, made.state, made.shard) == (1, ScheduleState.ACTIVE, asked.shard)
        assert made.definition == asked.definition
        assert made.next_run_at == asked.next_run_at
        assert made.created_at == made.updated_at == T0
        assert await store.get_schedule_by_id(made.id) == made
        [(version, valid_from, valid_to, stored, state)] = await store.schedule_versions(made.id)
        assert (version, valid_from, valid_to, stored, state) == (1, T0, None, asked.definition, ScheduleState.ACTIVE)
    # Each first version starts at the schedule's cursor (the reconciler's boundary).
    histories = {h.schedule_id: h for h in (await store.reconcile_rows(T0, T0 + MIN)).schedules}
    for asked in creates:
        [first] = histories[asked.schedule_id].versions
        assert first.next_run_at == asked.next_run_at
        assert first.valid_from == T0


async def test_more_creates_than_one_default_batch(store: Store) -> None:
    creates = [new(f"job-{i:05d}", shard=i % 16) for i in range(5_003)]
    result = await store.apply_schedules(creates, [], T0)
    assert [s.id for s in result.created] == [c.schedule_id for c in creates]
    listed = await store.list_schedules()
    assert [s.id for s in listed] == [c.schedule_id for c in creates]
    assert await store.schedule_versions(creates[-1].schedule_id) != []


async def test_a_name_twice_in_one_call_conflicts_naming_it_and_nothing_is_applied(
    store: Store, small_batches: int
) -> None:
    await add_schedule(store, "kept")
    before = await snapshot(store)
    message = "schedule 'dup' already exists in tenant 'default'"
    # In two batches, then within one batch.
    for first, second in ((1, 5), (3, 4)):
        creates = [new(f"job-{i}") for i in range(7)]
        creates[first], creates[second] = new("dup"), new("dup")
        with pytest.raises(Conflict, match=message):
            await store.apply_schedules(creates, [], T0 + MIN)
        assert await snapshot(store) == before
    # The same id twice (under two names) is named too.
    twin = new_schedule_id()
    creates = [new("x"), NewSchedule(twin, definition("y"), 0, T0), new("z"), NewSchedule(twin, definition("w"), 0, T0)]
    with pytest.raises(Conflict, match=f"schedule id {twin} already exists"):
        await store.apply_schedules(creates, [], T0 + MIN)
    assert await snapshot(store) == before


async def test_the_schedule_quota_counts_every_create_of_the_call(store: Store, small_batches: int) -> None:
    await store.set_tenant_limits(TenantLimits("acme", max_schedules=5), T0)
    await add_schedule(store, "one", tenant="acme")
    await add_schedule(store, "two", tenant="acme")
    # Up to the limit exactly, with another tenant's creates in between.
    creates = [new(f"b{i}", tenant="beta") for i in range(4)]
    for i, at in enumerate((0, 3, 5)):
        creates.insert(at, new(f"a{i}", tenant="acme"))
    await store.apply_schedules(creates, [], T0)
    assert len(await store.list_schedules("acme")) == 5
    assert len(await store.list_schedules("beta")) == 4
    # One more is refused, whichever batch it falls in; nothing is written.
    await store.set_tenant_limits(TenantLimits("acme", max_schedules=7), T0)
    before = await snapshot(store)
    for names in (["c0", "c1", "c2"], ["c0", "b9", "c1", "c2", "c3"]):  # in batch 1, batch 2
        creates = [new(n, tenant="beta" if n.startswith("b") else "acme") for n in names]
        with pytest.raises(QuotaExceeded, match="tenant acme is at its limit of 7 active schedules"):
            await store.apply_schedules(creates, [], T0)
        assert await snapshot(store) == before
    # A delete of the same call frees a place first (changes go first).
    doomed = await store.get_schedule("acme", "one")
    assert doomed is not None
    change = ScheduleChange(doomed.id, 1, doomed.definition, ScheduleState.DELETED, None, "pruned")
    await store.apply_schedules([new(f"c{i}", tenant="acme") for i in range(3)], [change], T0)
    assert len(await store.list_schedules("acme")) == 7


async def test_the_first_refusal_in_order_wins_as_row_by_row(store: Store, small_batches: int) -> None:
    """The creates are judged in order: the first refused one names the refusal. A taken
    name is a Conflict even when the tenant is full by then (it was refused for the quota,
    sending the user to raise a limit for a schedule they already had); a new name over
    the limit is a QuotaExceeded."""
    await store.set_tenant_limits(TenantLimits("acme", max_schedules=3), T0)
    await add_schedule(store, "one", tenant="acme")
    await add_schedule(store, "two", tenant="acme")
    before = await snapshot(store)
    with pytest.raises(Conflict, match="schedule 'two' already exists in tenant 'acme'"):
        await store.apply_schedules([new(n, tenant="acme") for n in ("two", "x", "y")], [], T0)
    with pytest.raises(Conflict, match="schedule 'two' already exists in tenant 'acme'"):
        await store.apply_schedules([new(n, tenant="acme") for n in ("x", "two", "y")], [], T0)
    with pytest.raises(QuotaExceeded, match="tenant acme is at its limit of 3"):
        await store.apply_schedules([new(n, tenant="acme") for n in ("x", "y", "two")], [], T0)
    assert await snapshot(store) == before


async def test_labelled_creates_are_written_by_the_batch_not_row_by_row(
    store: Store, small_batches: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Labels (apply puts one on every create) keep a batch set-based: only a taken name
    or id, a tenant's limit or a pair given twice sends it row by row."""
    redone: list[int] = []
    one_by_one = engine.SqlStore._insert_one_by_one

    def counted(self: engine.SqlStore, batch: list[NewSchedule], stamp: object) -> Body[list[Schedule]]:
        if len(batch) > 1:  # a batch of one is always written by the single create
            redone.append(len(batch))
        return one_by_one(self, batch, stamp)

    monkeypatch.setattr(engine.SqlStore, "_insert_one_by_one", counted)
    labels = (("clockd.managed-by", "apply"), ("team", "ops"), ("env", "prod"))
    creates = [new(f"job-{i}", labels=labels[: i % 4]) for i in range(2 * small_batches)]
    result = await store.apply_schedules(creates, [], T0)
    assert [s.definition.labels for s in result.created] == [labels[: i % 4] for i in range(2 * small_batches)]
    assert redone == []
    twice = [
        new("first"),
        new("twice", labels=(("team", "ops"), ("team", "ops"))),
        new("once", labels=(("team", "ops"),)),
    ]
    await store.apply_schedules(twice, [], T0)  # batches of 1, then 2
    found = await store.get_schedule_by_id(twice[1].schedule_id)
    assert found is not None and found.definition.labels == (("team", "ops"), ("team", "ops"))
    # PostgreSQL's batch statement refuses the pair given twice; SQLite's ignores it.
    assert redone == ([2] if isinstance(store, PostgresStore) else [])


async def test_creates_keep_their_overlap_policy(store: Store, small_batches: int) -> None:
    creates = [
        new("skip", overlap=OverlapPolicy.SKIP),
        new("queue-one", overlap=OverlapPolicy.QUEUE_ONE),
        new("allow"),
        new("skip-too", overlap=OverlapPolicy.SKIP),
    ]
    made = (await store.apply_schedules(creates, [], T0 - MIN)).created
    occurrences = [planned(s, T0 + i * MIN) for s in made for i in range(2)]
    cursors = [CursorAdvance(s.id, 1, s.next_run_at, T0 + 2 * MIN) for s in made]
    assert (await store.materialize(FENCE, occurrences, cursors, T0 - MIN)).inserted == 8
    assert (await store.relay(T0 + 2 * MIN, 100, T0 - MIN)).moved == 8
    claims = await store.claim([QUEUE], "w", 100, LEASE, T0 + 5 * MIN)
    started = sorted(c.schedule_name for c in claims)
    assert started == ["allow", "allow", "queue-one", "skip", "skip-too"]


async def test_creates_encoded_ahead_are_written_as_the_store_encodes_them(store: Store) -> None:
    """``Ops.apply``'s planner hands over each create's texts (spec, first version's
    document), made while the database wrote the batch before; what is stored is the same."""
    plain = [new("a", labels=(("team", "ops"),)), new("b", kind=ScheduleKind.EVERY, expr="1h30m")]
    ahead = [new("c", labels=(("team", "ops"),)), new("d", kind=ScheduleKind.EVERY, expr="1h30m")]
    ahead = [dataclasses.replace(n, texts=codec.definition_texts(n.definition)) for n in ahead]
    await store.apply_schedules([*plain, *ahead], [], T0)
    for mine, theirs in zip(plain, ahead, strict=True):
        stored = [await store.schedule_versions(n.schedule_id) for n in (mine, theirs)]
        assert [dataclasses.replace(v[3], name="x") for v in stored[0]] == [
            dataclasses.replace(v[3], name="x") for v in stored[1]
        ]
        assert dataclasses.replace(stored[1][0][3], name=theirs.definition.name) == theirs.definition
    found = await store.get_schedule_by_id(ahead[0].schedule_id)
    assert found is not None and found.definition == ahead[0].definition


# -- the stream of create batches (the driver's Stream step) -----------------------------------


async def test_a_stream_that_fails_writes_none_of_its_batches(store: Store) -> None:
    """A taken id in a stream's second batch: the driver throws the Integrity into the body
    with neither batch written, and the body goes on in the same transaction (the engine
    then redoes the batches one at a time)."""
    assert isinstance(store, engine.SqlStore)
    d = store.driver
    taken = new("taken")
    await store.apply_schedules([taken], [], T0)
    stamp = d.instant(T0)
    batches = [[new("s1"), new("s2")], [new("s3"), NewSchedule(taken.schedule_id, definition("s4"), 0, T0)]]
    built: list[int] = []

    def params() -> Iterator[dict[str, object]]:
        for i, batch in enumerate(batches):
            built.append(i)
            yield store._create_params(batch, stamp)

    def body() -> Body[str]:
        try:
            yield Stream(run for batch in params() for run in d.schedules_insert(batch))
        except Integrity as exc:
            yield from store._insert_schedules([new("after")], stamp)
            return exc.kind
        return "written"

    assert await store._write(body()) == "schedule_id"
    assert built == [0, 1]
    assert sorted(s.name for s in await store.list_schedules()) == ["after", "taken"]


async def test_an_error_while_building_a_stream_writes_nothing_of_the_transaction(store: Store) -> None:
    """What the caller raises while the stream asks for its next statement (Ops.apply's plan
    finding a problem) ends the transaction: nothing of it is written."""
    assert isinstance(store, engine.SqlStore)
    d = store.driver
    stamp = d.instant(T0)

    def runs() -> Iterator[Run]:
        yield from d.schedules_insert(store._create_params([new("s1"), new("s2")], stamp))
        raise ValueError("a problem in the plan")

    def body() -> Body[None]:
        yield from store._insert_schedules([new("before")], stamp)
        yield Stream(runs())

    with pytest.raises(ValueError, match="a problem in the plan"):
        await store._write(body())
    assert await store.list_schedules() == []
