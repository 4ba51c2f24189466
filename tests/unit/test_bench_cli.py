"""``python -m bench --only``: a suite name it does not know is an error, not a run of
nothing that ends "all goals met" (``--only worker,staging`` did that: it took the pair
as one name). ``--scenario`` alone runs the distributed suite only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import chosen

ROOT = Path(__file__).resolve().parents[2]


def test_an_unknown_suite_is_a_one_line_error_naming_the_suites() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "worker,stagin"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m bench: error: no suite named stagin; the suites: time_core, ")
    assert "Traceback" not in done.stderr


def test_a_scenario_alone_runs_the_distributed_suite_only() -> None:
    """``python -m bench --scenario drill`` ran every suite (half an hour) before the drill."""
    assert chosen(set(), ["drill"]) == {"distributed"}
    assert chosen({"distributed", "worker"}, ["drill"]) == {"distributed", "worker"}
    assert chosen(set(), None) == set()  # no choice: every suite


def test_a_scenario_beside_suites_without_the_distributed_one_is_an_error() -> None:
    with pytest.raises(ValueError, match="--scenario picks scenarios of the distributed suite, which --only leaves"):
        chosen({"worker"}, ["sustained"])
