"""The randomized soak as a pytest test, so CI counts it: a short run with a fixed seed.

`make test` runs it for CLOCKD_SOAK_CI_MINUTES (default 3, as issue 19 asks; about 4 min
of wall time) with 200 schedules; the 30-minute run with ~2,000 schedules is `make soak`
(``python -m tests.soak.soak``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness import require_binary
from tests.soak.soak import Soak

MINUTES = float(os.environ.get("CLOCKD_SOAK_CI_MINUTES", "3"))

# The chaos runs MINUTES; set-up, the settling and both judges took ~50 s more on the
# shared 2-core box, so the suite's 300 s default would cut a loaded 3-minute run short.
pytestmark = [pytest.mark.e2e, pytest.mark.drill, pytest.mark.timeout(int(MINUTES * 60) + 300)]


def test_randomized_soak_fixed_seed_ends_with_zero_unaccounted(tmp_path: Path) -> None:
    require_binary("etcd")
    require_binary("initdb")
    minutes = MINUTES
    result = Soak(minutes, seed=19, schedules=200, workdir=tmp_path).run()
    print(result.summary())
    assert result.report is not None
    assert result.faults, "the chaos loop injected nothing"
    assert result.reconcile_problems == 0, result.summary()
    assert result.report.unaccounted == 0, result.report.problems[:10]
    assert result.report.expected > 100
