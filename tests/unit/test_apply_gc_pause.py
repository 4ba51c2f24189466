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
