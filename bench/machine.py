"""The machine a bench run measured, printed with its figures.

This 2-core VM's speed drifts: the same suite's worker CPU per execution read 15–17 µs
in one session and 62 µs in another, with the code unchanged. A figure is only
comparable with another taken on a machine of the same speed, so every run prints

* the CPU time of a fixed pure-Python workload (``REFERENCE``), taken at the start and
  at the end of the run: how fast one core runs Python then (lower is faster);
* the share of CPU time the hypervisor stole from this VM during the run
  (``/proc/stat``'s ``steal``), and the load average at the end.

Neither has a goal: they say which other runs a run's figures may be set beside.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

REFERENCE_ITERATIONS = 5_000_000


def reference_ms() -> float:
    """CPU milliseconds of a fixed loop of integer arithmetic (best of three: a
    preemption inflates one try, not the machine's speed)."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        total = 0
        for i in range(REFERENCE_ITERATIONS):
            total += i & 7
        best = min(best, time.process_time() - started)
    return best * 1000


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
        self.reference_start = reference_ms()

    def rows(self) -> list[dict[str, Any]]:
        reference_end = reference_ms()
        stolen = CpuTicks.read().stolen_since(self.ticks)
        one, five, _ = os.getloadavg()
        loop = f"{REFERENCE_ITERATIONS // 1_000_000} M-iteration loop, CPU"
        return [
            {"name": f"reference {loop}, at the start", "value": self.reference_start, "unit": "ms"},
            {"name": f"reference {loop}, at the end", "value": reference_end, "unit": "ms"},
            {"name": "CPU stolen by the hypervisor in the run", "value": stolen, "unit": "%"},
            {"name": f"load average at the end (1/5 min, {os.cpu_count()} cores)", "value": f"{one:.1f}/{five:.1f}"},
        ]
