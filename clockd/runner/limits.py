"""Per-job resource limits (``setrlimit`` in the child); their size syntax is ``clockd.core.sizes``.

* ``memory_limit`` → ``RLIMIT_AS`` (address space of *each* process of the job:
  allocations beyond it fail, so most programs exit with an out-of-memory error).
* ``cpu_limit`` → ``RLIMIT_CPU``: ``SIGXCPU`` at the limit, ``SIGKILL`` one second later —
  only where the job has no cgroup; with one, the budget holds for all of the job's
  processes together (``clockd.runner.cgroups``) and ``RLIMIT_CPU`` is not set.
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
installed when a limit is set. In a daemon using etcd no Python may run in a forked
child (gRPC threads), so there the limits are set with ``prlimit`` (:func:`apply_to`)
on the job's first process while it waits behind its start gate, before the job runs.
"""

from __future__ import annotations

import resource
from collections.abc import Callable

# Re-exported: the runner's messages print sizes as ``limits.format_size``.
from clockd.core.sizes import format_size as format_size

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


def without_cpu(limits: list[Limit]) -> list[Limit]:
    """The limits minus ``RLIMIT_CPU``: for a job whose cgroup carries the CPU budget."""
    return [limit for limit in limits if limit[0] != resource.RLIMIT_CPU]


def apply_to(pid: int, limits: list[Limit]) -> None:
    """Set ``limits`` on a started process (``prlimit``): only for a job's first process
    parked behind its start gate (``clockd.runner.process``), so nothing races it."""
    for res, soft, hard in limits:
        resource.prlimit(pid, res, (soft, hard))


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
