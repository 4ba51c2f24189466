"""The machine a bench run measured, printed with its figures.

This 2-core VM's speed drifts: the same suite's worker CPU per execution read 15–17 µs
in one session and 62 µs in another, with the code unchanged. A figure is only
comparable with another taken on a machine of the same speed, so every run prints

* three fixed workloads, each timed at the start and at the end of the run (lower is
  faster): a pure-Python integer loop (the core's speed: it fits in the L1 cache), a
  cache- and allocation-heavy one (a million floats made and sorted, a dict of 300,000
  string keys built and read: what a neighbour thrashing the shared caches slows, which
  the loop does not show — a run on 2026-12-06 read the loop as fast as ever while the
  embedded and API suites ran at half their usual rates), and the median wall time of
  an 8 KiB write + ``fdatasync`` in the temporary directory the servers' data lives in
  (what each commit waits for);
* the share of CPU time the hypervisor stole from this VM during the run
  (``/proc/stat``'s ``steal``), and the load average at the end.

None has a goal: they say which other runs a run's figures may be set beside.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.servers import load_average

REFERENCE_ITERATIONS = 5_000_000


def _best_cpu_ms(work: Callable[[], object]) -> float:
    """CPU milliseconds of ``work``, best of three (a preemption inflates one try, not
    the machine's speed)."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best * 1000


def _integer_loop() -> int:
    total = 0
    for i in range(REFERENCE_ITERATIONS):
        total += i & 7
    return total


def _memory_work() -> int:
    rng = random.Random(18)
    values = [rng.random() for _ in range(1_000_000)]
    values.sort()
    table = {str(i): i for i in range(300_000)}
    return sum(table[str(i)] for i in range(0, 300_000, 3))


def fdatasync_ms(writes: int = 50) -> float:
    """Median wall milliseconds of an 8 KiB write + fdatasync in the temporary directory."""
    block = os.urandom(8192)
    times = []
    with tempfile.NamedTemporaryFile(prefix="bench-fsync-") as f:
        for _ in range(writes):
            started = time.perf_counter()
            os.write(f.fileno(), block)
            os.fdatasync(f.fileno())
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


# (what the row says, how it is timed), in the table's order.
WORKLOADS: tuple[tuple[str, Callable[[], float]], ...] = (
    (f"{REFERENCE_ITERATIONS // 1_000_000} M-iteration integer loop, CPU", lambda: _best_cpu_ms(_integer_loop)),
    ("sort 1 M floats + dict of 300 k keys, CPU", lambda: _best_cpu_ms(_memory_work)),
    ("8 KiB write + fdatasync, median wall", fdatasync_ms),
)


def _readings() -> list[float]:
    """Each workload's milliseconds now."""
    return [measure() for _, measure in WORKLOADS]


@dataclass(frozen=True)
class CpuTicks:
    """The all-CPU line of ``/proc/stat``: total and stolen ticks."""

    total: int
    steal: int

    @classmethod
    def read(cls) -> CpuTicks:
        with open("/proc/stat") as f:
            return cls.parse(f.readline())

    @staticmethod
    def parse(line: str) -> CpuTicks:
        """``/proc/stat``'s ``cpu`` line. user nice system idle iowait irq softirq steal
        [guest guest_nice]: guest time is already counted in user and nice."""
        fields = [int(v) for v in line.split()[1:]]
        return CpuTicks(total=sum(fields[:8]), steal=fields[7] if len(fields) > 7 else 0)

    def stolen_since(self, before: CpuTicks) -> float:
        """Percent of the CPU time between ``before`` and this reading the hypervisor stole."""
        spent = self.total - before.total
        return (self.steal - before.steal) / spent * 100 if spent > 0 else 0.0


class Machine:
    """Readings at the start of a run; :meth:`rows` adds those at its end."""

    def __init__(self) -> None:
        self.ticks = CpuTicks.read()
        self.start = _readings()

    def rows(self) -> list[dict[str, Any]]:
        end = _readings()
        rows: list[dict[str, Any]] = [
            {"name": f"{name}, start → end", "value": f"{before:,.1f} → {after:,.1f}", "unit": "ms"}
            for (name, _), before, after in zip(WORKLOADS, self.start, end, strict=True)
        ]
        rows.append(
            {
                "name": "CPU stolen by the hypervisor in the run",
                "value": CpuTicks.read().stolen_since(self.ticks),
                "unit": "%",
            }
        )
        rows.append({"name": "load average at the end", "value": load_average()})
        return rows
