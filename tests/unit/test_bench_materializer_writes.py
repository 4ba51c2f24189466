"""``bench.materializer_writes``: the workload is the sustained run's (each schedule fires
at its period, every instant of a tick is written once, by its shard), the ratios are taken
within a round, and bad options are refused in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.distributed import PERIODS, SHARDS
from bench.materializer_writes import TICK, Schedule, instants, ratio_medians, schedules, ticks


def test_each_period_group_fires_at_an_equal_share_of_the_rate() -> None:
    found = schedules(400)
    assert {p: sum(1 for s in found if s.period == p) for p in PERIODS} == {1: 100, 2: 200, 5: 500, 10: 1000}
    fires = sum(1 for _ in instants(found, 0, 10))
    assert fires == 400 * 10
    assert all(0 <= s.shard < SHARDS for s in found)


def test_ticks_write_every_instant_once_by_its_schedules_shard() -> None:
    found = [Schedule("a", 1, 0.5, 3), Schedule("b", 5, 4.0, 7), Schedule("c", 2, 0.0, 3)]
    written = [(shard, s.id, at) for tick in ticks(found, 10, 16) for shard, rows in tick.items() for s, at in rows]
    assert len(written) == len(set(written))
    assert sorted((i, at) for _, i, at in written) == sorted(
        [("a", t + 0.5) for t in range(10, 16)] + [("b", 14.0)] + [("c", float(t)) for t in (10, 12, 14)]
    )
    assert all(shard == {"a": 3, "b": 7, "c": 3}[i] for shard, i, _ in written)
    assert len(list(ticks(found, 10, 16))) == 6 // TICK


def test_a_variant_is_compared_with_the_build_of_its_own_round() -> None:
    rounds = [
        {"as built": 40.0, "without x": 30.0},
        {"as built": 80.0, "without x": 72.0},  # a slow round: its ratio, not its figure, counts
        {"as built": 50.0, "without x": 40.0},
        {"without x": 10.0},  # no build measured in this round: left out
    ]
    assert ratio_medians(rounds) == {"as built": 1.0, "without x": pytest.approx(0.8)}


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--rounds", "0", "--rounds takes a whole number of at least 1, not 0"),
        ("--seconds", "two", "argument --seconds: invalid int value: 'two'"),
        ("--variants", "as built,no such", "--variants: no variant named 'no such'; the variants are as built, "),
    ],
)
def test_bad_options_are_refused_in_one_line(option: str, value: str, said: str) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "bench.materializer_writes", option, value],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 2
    assert said in ran.stderr
    assert "Traceback" not in ran.stderr
