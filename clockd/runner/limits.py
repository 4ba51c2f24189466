"""Per-job resource limits (``setrlimit`` in the child) and the size syntax they use.

* ``memory_limit`` → ``RLIMIT_AS`` (address space of *each* process of the job:
  allocations beyond it fail, so most programs exit with an out-of-memory error).
* ``cpu_limit`` → ``RLIMIT_CPU``: ``SIGXCPU`` at the limit, ``SIGKILL`` one second later.
* ``nproc_limit`` → ``RLIMIT_NPROC``: processes (and threads) of the job's *user*,
  counted system-wide by the kernel, so it contains a fork bomb when the job runs
  as a dedicated unprivileged user. Root ignores it; for a job running as the
  worker's own user it counts the worker's threads too.

These are per-process limits: a job's children each get the same allowance. Where
the host has cgroups (``clockd.runner.cgroups``), ``memory_limit`` and
``nproc_limit`` are also set on the attempt's cgroup, which holds for the whole job
and for root. Hard limits are never raised above the worker's own.

Why a ``preexec_fn``: asyncio's ``subprocess_exec`` (``Popen`` underneath) has no
other hook between ``fork`` and ``exec``, and limits set on the child after it
started (``prlimit``) race with it. The function runs in the forked child after
the user switch, so it must stay minimal: it only calls ``setrlimit`` with values
computed beforehand in the parent — no imports, no allocation to speak of, no
locks. It also forces ``fork`` instead of ``vfork`` for that job, so it is only
installed when a limit is set. (gRPC, used for etcd, warns against ``fork`` with
channels open; the child never touches gRPC and ``exec`` follows at once.)
"""

from __future__ import annotations

import re
import resource
from collections.abc import Callable

from clockd.errors import InvalidInput

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"([0-9]{1,19})\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
MIN_MEMORY = 1 << 20


def parse_size(text: str) -> int:
    """``"512M"`` → 536870912. Binary units K, M, G, T (``Ki``/``KiB``/``KB`` read the
    same); a bare number is bytes. :class:`InvalidInput` otherwise."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise InvalidInput(f"size {text!r}: expected a number with an optional unit K, M, G or T, e.g. 512M")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def format_size(value: int) -> str:
    for unit in ("T", "G", "M", "K"):
        size = _UNITS[unit.lower()]
        if value >= size and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)


Limit = tuple[int, int, int]  # (resource, soft, hard)


def rlimits(memory: int | None, cpu: int | None, nproc: int | None) -> list[Limit]:
    """The ``setrlimit`` calls for a job, computed in the parent (never above the
    worker's own hard limits, which an unprivileged child could not raise)."""
    wanted: list[Limit] = []
    if memory is not None:
        wanted.append((resource.RLIMIT_AS, memory, memory))
    if cpu is not None:
        wanted.append((resource.RLIMIT_CPU, cpu, cpu + 1))
    if nproc is not None:
        wanted.append((resource.RLIMIT_NPROC, nproc, nproc))
    out: list[Limit] = []
    for res, soft, hard in wanted:
        _, current_hard = resource.getrlimit(res)
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
        out.append((res, min(soft, hard), hard))
    return out


def preexec(limits: list[Limit]) -> Callable[[], None] | None:
    """The function run in the child between fork and exec, or None if nothing to set."""
    if not limits:
        return None
    frozen = tuple(limits)
    setrlimit = resource.setrlimit

    def apply() -> None:
        for res, soft, hard in frozen:
            setrlimit(res, (soft, hard))

    return apply
