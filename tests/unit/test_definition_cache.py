"""The claim path's definition cache: bounded, exact, and still useful when more schedules
fire per cycle than it holds (the old cache, cleared when full, then found nothing)."""

from __future__ import annotations

from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.store.definition_cache import DefinitionCache


def definition(name: str) -> ScheduleDef:
    return ScheduleDef(name=name, kind=ScheduleKind.CRON, expr="* * * * *", tz="UTC", target=NoopTarget())


def test_a_cycle_larger_than_the_cache_still_hits_and_stays_bounded() -> None:
    cache: DefinitionCache[ScheduleDef] = DefinitionCache(100)
    defs = {(f"s{i}", 1): definition(f"s{i}") for i in range(300)}
    rounds = 20
    for _ in range(rounds):  # every schedule fires once per cycle, in the same order
        for key, value in defs.items():
            found, missing = cache.found([key])
            if missing:
                cache.put(key, value)
            else:
                assert found[key] is value
            assert len(cache) <= 100
    # A slowly changing cached set finds about capacity / working set (1/3) of the cycle;
    # clearing when full, or evicting the oldest, would find none.
    assert cache.hits / (cache.hits + cache.misses) > 0.2
    assert cache.hits + cache.misses == rounds * 300


def test_a_working_set_that_fits_is_all_hits_after_the_first_cycle() -> None:
    cache: DefinitionCache[ScheduleDef] = DefinitionCache(100)
    keys = [(f"s{i}", 2) for i in range(100)]
    for key in keys:
        cache.put(key, definition(key[0]))
    found, missing = cache.found(keys)
    assert missing == [] and sorted(found) == sorted(keys) and cache.hits == 100
    assert all(found[k].name == k[0] for k in keys)


def test_read_ahead_takes_only_free_room_and_never_replaces_an_entry() -> None:
    """What an idle worker reads ahead goes into free room only: once the cache is full it
    keeps what the claims use (a claim's miss may still take a random place)."""
    cache: DefinitionCache[ScheduleDef] = DefinitionCache(3)
    cache.put(("used", 1), definition("used"))
    assert cache.unknown([("used", 1), ("a", 1), ("a", 1), ("b", 1)]) == [("a", 1), ("b", 1)]
    assert (cache.hits, cache.misses, cache.room) == (0, 0, 2)  # unknown() counts nothing
    for name in ("a", "b", "c", "d"):
        cache.put((name, 1), definition(name), ahead=True)
    assert (len(cache), cache.read_ahead, cache.room) == (3, 2, 0)
    found, missing = cache.found([("used", 1), ("a", 1), ("b", 1), ("c", 1)])
    assert sorted(found) == [("a", 1), ("b", 1), ("used", 1)] and missing == [("c", 1)]
