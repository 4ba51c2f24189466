"""Per-job resource limits (``ulimit`` in the job's start gate); their size syntax is ``clockd.core.sizes``.

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

Where they are set: by the job's first process, a ``/bin/sh`` behind its start gate
(``clockd.runner.process``), on itself with ``ulimit`` (:func:`ulimit_commands`)
before it execs the job — lowering one's own limits needs no privilege, so this also
holds after the switch to the job's user. Not with a ``preexec_fn`` calling
``setrlimit`` between fork and exec: CPython then forks the whole daemon instead of
vforking, and the page-table copy and the daemon's copy-on-write faults after it cost
more than the shell's start; nor may Python run in a forked child of a daemon with
gRPC threads. Not with ``prlimit`` on the started child: that races with it.
"""

from __future__ import annotations

import resource
from typing import Final

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


# ``ulimit`` flags of /bin/sh per resource, with the unit of its value. RLIMIT_NPROC is
# ``-u`` in bash and ``-p`` in dash (where bash's ``-p`` is the read-only pipe size).
_ULIMIT: Final = {resource.RLIMIT_AS: ("-v", 1024), resource.RLIMIT_CPU: ("-t", 1)}


def ulimit_commands(limits: list[Limit]) -> str:
    """Shell commands that set ``limits`` on the shell itself (soft, then hard: a hard
    limit below the current soft one would be refused), joined with ``&&``. For a job
    behind its start gate (``clockd.runner.process``), where no Python hook may run."""
    steps = []
    for res, soft, hard in limits:
        for kind, value in (("-S", soft), ("-H", hard)):
            if res == resource.RLIMIT_NPROC:
                steps.append(f"{{ ulimit {kind} -u {value} 2>/dev/null || ulimit {kind} -p {value}; }}")
            else:
                flag, unit = _ULIMIT[res]
                steps.append(f"ulimit {kind} {flag} {value // unit}")
    return " && ".join(steps)
