"""A large apply runs with CPython's cyclic garbage collector paused (its passes over a heap
that only grows were a third of the plan's CPU) and always gives it back: after an error,
after overlapping applies (the API server and a reload), and never resumes a collector
someone else paused."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from clockd.services.ops import _GC_PAUSE_FROM, _cyclic_gc_paused


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_a_large_apply_pauses_the_collector_and_resumes_it_after_an_error() -> None:
    with pytest.raises(RuntimeError), _cyclic_gc_paused(_GC_PAUSE_FROM):
        assert not gc.isenabled()
        raise RuntimeError("the store went away")
    assert gc.isenabled()


def test_a_small_apply_leaves_the_collector_alone() -> None:
    with _cyclic_gc_paused(_GC_PAUSE_FROM - 1):
        assert gc.isenabled()


def test_overlapping_applies_resume_it_when_the_last_one_ends() -> None:
    first = _cyclic_gc_paused(50_000)
    second = _cyclic_gc_paused(50_000)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the second apply is still planning
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_collector_paused_by_the_program_stays_paused() -> None:
    gc.disable()
    with _cyclic_gc_paused(50_000):
        assert not gc.isenabled()
    assert not gc.isenabled()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_resuming_does_not_leave_the_apply_s_objects_to_the_next_young_collection() -> None:
    # The first young collection after resuming would traverse everything the apply made
    # (~0.3 s at the end of 100,000 creates); they go to the oldest generation instead.
    with _cyclic_gc_paused(50_000):
        made: list[list[int]] = [[] for _ in range(20_000)]
    young = {id(o) for o in gc.get_objects(generation=0)}
    assert not any(id(o) in young for o in made)
    assert any(o is made[0] for o in gc.get_objects(generation=2))


def test_a_cycle_made_during_an_apply_is_still_collected() -> None:
    import weakref

    with _cyclic_gc_paused(50_000):
        ref = weakref.ref(_Node())
    assert ref() is not None  # a cycle: reference counting alone does not free it
    gc.collect()
    assert ref() is None


def test_objects_the_program_froze_stay_frozen() -> None:
    # Checked on an object of the test's own: the freeze count alone drops when any frozen
    # object is freed meanwhile (reference counting still frees frozen objects; under
    # xdist the worker's own threads do), which made a count comparison flaky in CI.
    kept: list[int] = []
    gc.freeze()
    try:
        with _cyclic_gc_paused(50_000):
            pass
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for g in range(3) for o in gc.get_objects(generation=g))
    finally:
        gc.unfreeze()
    assert any(o is kept for o in gc.get_objects(generation=2))  # the check can see it
