"""A claim burst spanning more distinct schedules than the definition cache holds still
hands out every claim (a regression: the cache used to be cleared under the hits)."""

from __future__ import annotations

from datetime import timedelta

from clockd.store import Store
from clockd.store.engine import SqlStore
from tests.contract.store.support import LEASE, T0, add_schedule, enqueue


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
