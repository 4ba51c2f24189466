"""What the independent checker and the soak print about the start lag.

A lag figure with no sample behind it (a short run, or every first attempt inside a
fault window) is unknown: it must read ``n/a``, never ``0.000s``, and every figure says
how many samples it is from.
"""

from __future__ import annotations

from tests.soak.checker import Report
from tests.soak.soak import SoakResult


def test_lag_without_samples_reads_n_a_not_zero() -> None:
    report = Report(expected=12, executions=0)
    assert "start lag p50 n/a p99 n/a (0 samples)" in report.summary()
    assert "0.000" not in report.summary()


def test_lag_with_samples_says_how_many() -> None:
    report = Report(expected=3, executions=3, lag_p50=0.21, lag_p99=0.345, lag_samples=3)
    assert "start lag p50 0.210s p99 0.345s (3 samples)" in report.summary()
    assert "(1 sample)" in Report(lag_p50=0.1, lag_p99=0.1, lag_samples=1).summary()


def test_soak_summary_of_a_run_with_no_sample_outside_the_fault_windows() -> None:
    result = SoakResult(seed=1, minutes=0.5, schedules=10, faults=["kill m1"], report=Report(expected=4))
    result.reconcile_problems = 0
    line = result.summary()
    assert "start lag p50 n/a p99 n/a (0 samples)" in line
    assert "outside the fault windows" in line
    assert "0.000" not in line
