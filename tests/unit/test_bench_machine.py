"""``bench.machine``: the share of CPU time stolen during a bench run, from two readings
of ``/proc/stat`` (guest time is part of user time and is not counted twice)."""

from __future__ import annotations

from bench.machine import CpuTicks


def test_the_stolen_share_is_the_steal_ticks_over_all_ticks_between_two_readings() -> None:
    before = CpuTicks.parse("cpu  1000 10 200 5000 20 0 30 40 500 0")
    after = CpuTicks.parse("cpu  1600 10 300 5200 20 0 30 140 800 0")
    assert (after.total - before.total, after.steal - before.steal) == (1000, 100)  # guest 300 not added
    assert after.stolen_since(before) == 10.0


def test_a_kernel_without_a_steal_column_reads_none_stolen() -> None:
    before = CpuTicks.parse("cpu 10 0 10 100 0 0 0")
    after = CpuTicks.parse("cpu 20 0 20 200 0 0 0")
    assert after.stolen_since(before) == 0.0
