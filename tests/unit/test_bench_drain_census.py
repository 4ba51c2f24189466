"""``bench.drain_census``: each counter is reported as its change over the drain divided by
the executions, and a counter the drain did not move is left out of the tables."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.drain_census import _delta


def test_a_counter_is_its_change_per_execution_and_an_unmoved_one_is_left_out() -> None:
    before = {"dispatch.dispatch_pkey": (10.0, 300.0), "schedules.schedules_due": (4.0, 9.0)}
    after = {
        "dispatch.dispatch_pkey": (2010.0, 6300.0),
        "schedules.schedules_due": (4.0, 9.0),
        "occurrences_w1.occurrences_w1_pkey": (3000.0, 9000.0),  # made during the drain
    }
    assert _delta(after, before, 1000) == {
        "dispatch.dispatch_pkey": (2.0, 6.0),
        "occurrences_w1.occurrences_w1_pkey": (3.0, 9.0),
    }


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--sizes", "8k", "--sizes takes whole numbers separated by commas, not '8k'"),
        ("--workers", "1,two", "--workers takes whole numbers separated by commas, not '1,two'"),
        ("--workers", "0", "--workers takes numbers of at least 1, not '0'"),
    ],
)
def test_counts_that_are_not_whole_numbers_are_refused_in_one_line(option: str, value: str, said: str) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "bench.drain_census", option, value], capture_output=True, text=True, check=False
    )
    assert ran.returncode == 2
    assert said in ran.stderr
    assert "Traceback" not in ran.stderr
