"""The claim path's definition cache in a store: a claim burst spanning more distinct
schedules than it holds still hands out every claim (a regression: the cache used to be
cleared under the hits), and an idle worker's read-ahead fills it before a burst."""

from __future__ import annotations

from datetime import timedelta

from clockd.store import ReadAhead, Store
from clockd.store.engine import SqlStore
from tests.contract.store.support import LEASE, MIN, T0, add_schedule, enqueue


async def test_claims_survive_a_cache_overflow(store: Store) -> None:
    assert isinstance(store, SqlStore)
    store.definitions.capacity = 4
    schedules = [await add_schedule(store, f"job-{i}") for i in range(10)]
    warm = schedules[:3]
    for i, s in enumerate(warm):
        warm[i], _ = await enqueue(store, s)
    first = await store.claim(["default"], "w1", 10, LEASE, T0)  # caches job-0..2
    assert len(first) == 3
    for s in warm + schedules[3:]:
        await enqueue(store, s)
    # 3 cached definitions and 7 new ones overflow the cache (4): every claim still resolves.
    rest = await store.claim(["default"], "w1", 100, LEASE, T0 + timedelta(minutes=5))
    names = sorted(c.schedule_name for c in rest)
    assert names == sorted(f"job-{i}" for i in range(10))
    assert len(store.definitions) == 4
    # job-0..2 were found in the cache unless a new definition took their place.
    assert store.definitions.misses >= 3 + 7 and store.definitions.hits + store.definitions.misses == 3 + 10


async def test_read_ahead_caches_a_staged_burst_so_its_claims_read_no_definition(store: Store) -> None:
    """An idle worker reads ahead (``read_ahead_definitions``) the definitions of rows
    staged for later — in claim order, ``limit`` rows a call, going on after the last,
    rows staged since included — so the burst's claims find every definition cached.
    Only the asked queues; rows visible already are left to the claim; a definition is
    read once."""
    assert isinstance(store, SqlStore)
    burst = [await add_schedule(store, f"burst-{i}", next_run_at=T0 + MIN) for i in range(6)]
    for s in burst[:5]:  # one instant: the position goes on by id
        await enqueue(store, s)
    await enqueue(store, await add_schedule(store, "elsewhere", queue="gpu", next_run_at=T0 + MIN))
    await enqueue(store, await add_schedule(store, "due-now", next_run_at=T0))
    first = await store.read_ahead_definitions(["default"], None, T0, 3)
    assert (first.looked_at, first.read) == (3, 3) and first.after is not None
    rest = await store.read_ahead_definitions(["default"], first.after, T0, 3)
    assert (rest.looked_at, rest.read) == (2, 2) and rest.after is not None and rest.after[0] == T0 + MIN
    caught_up = await store.read_ahead_definitions(["default"], rest.after, T0, 3)
    assert (caught_up.looked_at, caught_up.read, caught_up.after) == (0, 0, rest.after)
    await enqueue(store, burst[5])  # staged since: found from the position
    since = await store.read_ahead_definitions(["default"], rest.after, T0, 3)
    assert (since.looked_at, since.read) == (1, 1)
    again = await store.read_ahead_definitions(["default", "default"], None, T0, 10)
    assert (again.looked_at, again.read) == (6, 0)
    cache = store.definitions
    assert (len(cache), cache.read_ahead, again.room) == (6, 6, cache.capacity - 6)
    assert (cache.hits, cache.misses) == (0, 0)  # no claim asked yet

    claims = await store.claim(["default"], "w1", 10, LEASE, T0 + MIN)
    assert sorted(c.schedule_name for c in claims) == [f"burst-{i}" for i in range(6)] + ["due-now"]
    assert (cache.hits, cache.misses) == (6, 1)  # due-now: read by its claim
    assert (await store.read_ahead_definitions(["default"], None, T0, 10)).looked_at == 0  # leased: not staged


async def test_read_ahead_fills_only_free_room_and_says_when_the_cache_is_full(store: Store) -> None:
    """Reading ahead never evicts what the claims use: a full cache reads nothing more."""
    assert isinstance(store, SqlStore)
    store.definitions.capacity = 2
    for i in range(4):
        await enqueue(store, await add_schedule(store, f"burst-{i}", next_run_at=T0 + MIN))
    done = await store.read_ahead_definitions(["default"], None, T0, 10)
    assert (done.looked_at, done.read, done.room) == (4, 2, 0)
    assert (len(store.definitions), store.definitions.read_ahead) == (2, 2)
    assert await store.read_ahead_definitions(["default"], done.after, T0, 10) == ReadAhead(0, 0, done.after, 0)
    claims = await store.claim(["default"], "w1", 10, LEASE, T0 + MIN)
    assert len(claims) == 4 and (store.definitions.hits, store.definitions.misses) == (2, 2)
