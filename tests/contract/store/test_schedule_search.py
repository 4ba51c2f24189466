"""The schedule searches (``Store.schedules_page``: the API's list and the dashboard's
filters) on both stores: what each filter finds, paged by the name cursor, and that each
walks an index in name order so it stops at its page's LIMIT (schema 0009: the
``schedules_state_name`` index and the ``schedule_labels`` table the engine keeps with
every schedule write); the upgrade from 0008 fills ``schedule_labels``."""

from __future__ import annotations

import dataclasses
from typing import Any

from clockd.core.ids import new_schedule_id
from clockd.core.model import ScheduleState
from clockd.store import NewSchedule, SchedulePage, Store
from clockd.store.api_rows import ABOVE_EVERY_NAME, prefix_range, schedule_page_params
from clockd.store.postgres import PostgresStore

from .support import MIN, T0, Backend, add_schedule, definition

TENANT = "acme"


async def names(store: Store, **query: Any) -> list[str]:
    return [s.name for s in await store.schedules_page(TENANT, SchedulePage(**query))]


async def walk(store: Store, limit: int, **query: Any) -> list[list[str]]:
    """Every page of a search, each of ``limit`` names at most, by the name cursor."""
    pages: list[list[str]]
    pages, after = [], ""
    while True:
        page = await names(store, after=after, limit=limit, **query)
        if not page:
            return pages
        pages.append(page)
        after = page[-1]


async def test_a_label_search_follows_every_schedule_write(store: Store) -> None:
    a = await add_schedule(store, "a", tenant=TENANT, labels=(("team", "x"),))
    await add_schedule(store, "b", tenant=TENANT, labels=(("team", "y"), ("tier", "1")))
    await add_schedule(store, "c", tenant=TENANT)
    await add_schedule(store, "a", tenant="other", labels=(("team", "x"),))
    assert await names(store, label=("team", "x")) == ["a"]
    assert await names(store, label=("tier", "1")) == ["b"]
    assert await names(store, label=("team", "z")) == []
    # An update moves its labels; a pause keeps them; a delete takes them away.
    moved = dataclasses.replace(a.definition, labels=(("team", "y"),))
    await store.change_schedule(a.id, 1, moved, ScheduleState.ACTIVE, T0, T0, "updated")
    assert await names(store, label=("team", "x")) == []
    assert await names(store, label=("team", "y")) == ["a", "b"]
    await store.change_schedule(a.id, 2, moved, ScheduleState.PAUSED, T0, T0, "paused")
    assert await names(store, label=("team", "y")) == ["a", "b"]
    assert await names(store, label=("team", "y"), state=ScheduleState.PAUSED) == ["a"]
    assert await names(store, label=("team", "y"), state=ScheduleState.ACTIVE) == ["b"]
    await store.change_schedule(a.id, 3, moved, ScheduleState.DELETED, None, T0, "deleted")
    assert await names(store, label=("team", "y")) == ["b"]
    # The name is free again: a new schedule of that name has only its own labels.
    await add_schedule(store, "a", tenant=TENANT, labels=(("team", "x"),))
    assert await names(store, label=("team", "x")) == ["a"]
    assert await names(store, label=("team", "y")) == ["b"]


async def test_labels_written_in_a_batch_are_searchable(store: Store) -> None:
    batch = [
        NewSchedule(new_schedule_id(), definition(f"n{i}", tenant=TENANT, labels=(("k", str(i % 2)),)), 0, T0)
        for i in range(6)
    ]
    await store.apply_schedules(batch, [], T0 - MIN)
    assert await walk(store, 2, label=("k", "1")) == [["n1", "n3"], ["n5"]]
    assert await walk(store, 2, label=("k", "0"), name_prefix="n4") == [["n4"]]


async def test_a_batch_writes_the_labels_single_creates_write(store: Store) -> None:
    """A batch's label rows are read from the specs it writes (the driver's
    ``schedules_insert``), a single create's from the definition: the same search answers.
    A pair given twice is kept once (PostgreSQL's batch statement refuses it, and the
    batch is written row by row); the definition keeps both."""
    odd = (("team", "ops"), ("team", "ops"), ("k\\ey", 'va"l'), ("名前", "値 ü"), ("empty", ""))
    labels = [odd, (("team", "ops"),), (), odd[2:]]
    batch = [
        NewSchedule(new_schedule_id(), definition(f"b{i}", tenant=TENANT, labels=pairs), 0, T0)
        for i, pairs in enumerate(labels)
    ]
    await store.apply_schedules(batch, [], T0 - MIN)
    for i, pairs in enumerate(labels):
        await add_schedule(store, f"s{i}", tenant=TENANT, labels=pairs)
    for pair in set(odd):
        found = await names(store, label=pair)
        assert found == sorted(f"{p}{i}" for p in "bs" for i, pairs in enumerate(labels) if pair in pairs), pair
    for s in await store.list_schedules():
        assert s.definition.labels == labels[int(s.name[1:])]


async def test_each_filter_pages_by_the_name_cursor_and_filters_combine(store: Store) -> None:
    for i in range(7):
        await add_schedule(store, f"job-{i}", tenant=TENANT, labels=(("even", str(i % 2 == 0)),))
    await add_schedule(store, "job", tenant=TENANT)
    await add_schedule(store, "jo", tenant=TENANT)
    await add_schedule(store, "joc", tenant=TENANT)  # just below "job" in a prefix's range
    await add_schedule(store, "jod", tenant=TENANT)  # just above it
    for name in ("job-1", "job-4", "job-5"):
        s = await store.get_schedule(TENANT, name)
        assert s is not None
        await store.change_schedule(s.id, 1, s.definition, ScheduleState.PAUSED, None, T0, "paused")
    everything = sorted(["jo", "joc", "job", "jod", *(f"job-{i}" for i in range(7))])
    assert [n for page in await walk(store, 3) for n in page] == everything
    assert await walk(store, 3, name_prefix="job") == [["job", "job-0", "job-1"], ["job-2", "job-3", "job-4"],
                                                       ["job-5", "job-6"]]  # fmt: skip
    assert await names(store, name_prefix="job-") == [f"job-{i}" for i in range(7)]
    assert await names(store, name_prefix="jo", after="job-6") == ["joc", "jod"]
    assert await names(store, name_prefix="job", after="job-6") == []
    assert await names(store, name_prefix="x") == []
    assert await walk(store, 2, state=ScheduleState.PAUSED) == [["job-1", "job-4"], ["job-5"]]
    assert await names(store, state=ScheduleState.PAUSED, name_prefix="job-4") == ["job-4"]
    assert await names(store, state=ScheduleState.DELETED) == []
    active = [n for n in everything if n not in ("job-1", "job-4", "job-5")]
    assert [n for page in await walk(store, 4, state=ScheduleState.ACTIVE) for n in page] == active
    assert await walk(store, 2, label=("even", "True")) == [["job-0", "job-2"], ["job-4", "job-6"]]
    assert await names(store, label=("even", "True"), state=ScheduleState.PAUSED) == ["job-4"]
    assert await names(store, label=("even", "False"), name_prefix="job-5") == ["job-5"]
    assert await names(store, label=("even", "False"), state=ScheduleState.ACTIVE, name_prefix="job-") == ["job-3"]


def test_a_prefix_range_holds_exactly_the_names_that_start_with_it_in_code_point_order() -> None:
    top = chr(0x10FFFF)
    for prefix in ("job", "a", "é", "\ud7ff", "\ue000", f"a{top}", top, f"{top}{top}", "\x00"):
        below, above = prefix_range(prefix)
        assert below < prefix < above
        for name in (prefix, prefix + "x", prefix + top * 5, prefix + "\x00"):
            assert below < name < above, (prefix, name)
        assert above <= ABOVE_EVERY_NAME
    below, above = prefix_range("job")
    assert (below, above) == ("joa" + top, "joc")
    assert "joa" < below < "job" < "job-1" < "job" + top < above == "joc"
    assert schedule_page_params("t", SchedulePage(after="job-5", name_prefix="job"))["after"] == "job-5"
    assert schedule_page_params("t", SchedulePage(after="a", name_prefix="job"))["after"] == below


# -- the plans: each search walks an index in name order (schema 0009) ---------------------------

# (query, page, index walked: SQLite's, PostgreSQL's). Schema 0020: PostgreSQL's state
# search walks schedules_paused_name for paused schedules and schedules_live_name for
# active ones (an index no cursor move writes; SQLite keeps schedules_state_name).
PLANS = (
    ("schedules_page", SchedulePage(name_prefix="job"), "schedules_live_name", "schedules_live_name"),
    ("schedules_page_state", SchedulePage(state=ScheduleState.PAUSED), "schedules_state_name",
     "schedules_paused_name"),
    ("schedules_page_state", SchedulePage(state=ScheduleState.ACTIVE), "schedules_state_name",
     "schedules_live_name"),
    ("schedules_page_label", SchedulePage(label=("team", "x"), state=ScheduleState.PAUSED), "schedule_labels",
     "schedule_labels"),
)  # fmt: skip


async def test_each_search_walks_an_index_in_name_order_without_sorting(store: Store, backend: Backend) -> None:
    for i in range(50):
        await add_schedule(store, f"job-{i}", tenant=TENANT, labels=(("team", "x"),))
    for name, query, sqlite_index, postgres_index in PLANS:
        index = sqlite_index if backend.kind == "sqlite" else postgres_index
        params = schedule_page_params(TENANT, dataclasses.replace(query, limit=51))
        plan = await backend.query_plan(name, params)
        if backend.kind == "sqlite":
            assert f"USING INDEX {index}" in plan or "USING PRIMARY KEY" in plan, f"{name}:\n{plan}"
            assert "TEMP B-TREE" not in plan, f"{name}:\n{plan}"
            assert "SCAN" not in plan, f"{name}:\n{plan}"
        else:
            assert index in plan, f"{name}:\n{plan}"
            assert "Sort" not in plan, f"{name}:\n{plan}"
    # A state none has answers from the index alone.
    assert await names(store, state=ScheduleState.PAUSED) == []


# -- the upgrade from 0008 ---------------------------------------------------------------------------

UNDO_0009 = (
    "DROP TABLE schedule_labels",
    "DROP INDEX IF EXISTS schedules_state_name",  # PostgreSQL's 0020 replaced it
    "DELETE FROM schema_migrations WHERE version = 9",
)


async def test_the_upgrade_to_0009_fills_the_labels_of_the_live_schedules(store: Store, backend: Backend) -> None:
    a = await add_schedule(store, "a", tenant=TENANT, labels=(("team", "x"), ("tier", "1")))
    await add_schedule(store, "b", tenant=TENANT, labels=(("team", "x"),))
    await add_schedule(store, "c", tenant=TENANT)
    gone = await add_schedule(store, "gone", tenant=TENANT, labels=(("team", "x"),))
    await store.change_schedule(gone.id, 1, gone.definition, ScheduleState.DELETED, None, T0, "deleted")
    await store.close()
    for statement in UNDO_0009:  # the database as a 0008 clockd left it: labels only in the spec
        await backend.execute(statement)
    new = backend.new_store()
    if isinstance(new, PostgresStore):
        assert await new.migrate() == ["0009_schedule_search"]
    await new.open()  # SQLite migrates here
    assert await names(new, label=("team", "x")) == ["a", "b"]
    assert [s.id for s in await new.schedules_page(TENANT, SchedulePage(label=("tier", "1")))] == [a.id]
    assert await names(new) == ["a", "b", "c"]
