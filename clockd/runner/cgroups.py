"""Each attempt in its own cgroup: timeouts, stops and lease loss kill *every* descendant,
and resource limits hold for the whole job, root jobs included.

A process group is not a container: a job's ``setsid sleep &``, ``setsid -f …`` or a
child calling ``setpgid(0, 0)`` leaves it and outlives ``killpg``. A cgroup cannot be
left by an unprivileged process, and its children follow their parent, so:

* **Detection** (once, :func:`detect`): the cgroup v2 hierarchy is found in
  ``/proc/self/mountinfo`` (``cgroup2``: ``/sys/fs/cgroup`` on a pure-v2 host,
  ``/sys/fs/cgroup/unified`` on a hybrid one), and the daemon's own group in
  ``/proc/self/cgroup`` (``0::/…``). Containment needs a writable v2 tree (root, or a
  delegated subtree: ``Delegate=yes`` in the unit); v1 ``pids``, ``memory`` and ``cpu``
  hierarchies, where mounted and writable, carry limits the v2 tree cannot (a hybrid
  host's v2 tree has no controllers). None of it: containment is ``process-group`` —
  the old behaviour — and the daemon logs so at start (``clockctl status`` shows it).
* **Per attempt** (:meth:`Cgroups.create`): a group ``clockd-<daemon pid>/<attempt>``
  below the daemon's own, in v2 and in each v1 hierarchy a limit needs. The job starts
  behind a **gate** (``clockd.runner.process``): its first process is a ``/bin/sh``
  that sets the job's rlimits on itself (``ulimit``) and waits for a line on its
  stdin; the daemon moves it into the groups (:meth:`JobGroup.adopt`, as the daemon,
  so it works whatever user the job runs as), then writes the line and the shell
  execs the job. The job's first instruction runs inside its groups: no fork race.
  The child does not join the groups itself between fork and exec: that needs a
  Python ``preexec_fn``, with which CPython forks the whole daemon instead of vforking
  (1,000 ``/bin/true`` jobs: 96 against 243 jobs/s, 7.2 against 3.0 ms of the
  daemon's CPU a job), and no Python may run in a forked child of a daemon with gRPC
  threads (etcd: it broke runs in the failure drills).
* **Delegation** (a daemon that is not root: ``Delegate=yes`` in the shipped units).
  cgroup v2 forbids processes in a group that hands controllers to its children (the
  "no internal processes" rule), so when a limit needs a controller enabled in the
  daemon's own group and that fails with ``EBUSY``, the daemon moves itself into the
  leaf ``<its group>/clockd-daemon`` first (what systemd's ``DelegateSubgroup=`` does)
  and job groups stay its siblings. :func:`detect` treats that leaf as the daemon's
  group's own, so a second detection finds the same place.
* **Limits**: ``nproc_limit`` → ``pids.max``; ``memory_limit`` → ``memory.max`` /
  ``memory.limit_in_bytes`` (v1), on top of the per-process ``setrlimit`` calls of
  ``clockd.runner.limits`` (kept: they also apply where no controller is available).
  ``cpu_limit`` → a CPU-time budget for the *whole group*: the runner reads the group's
  ``cpu.stat`` (``usage_usec``, kept by every v2 group with or without the ``cpu``
  controller) and kills the group once its processes together used ``cpu_limit``
  seconds. ``RLIMIT_CPU`` (per process) is only the fallback without a cgroup.
  ``cpu.max`` is not used: it caps a *rate* (a share of a CPU), which no clockd
  setting names; ``cpu_limit`` is a duration of CPU time, as it always was.
* **Kill** (:meth:`JobGroup.signal`, :meth:`JobGroup.kill`): SIGTERM every member;
  after the grace, ``cgroup.kill`` (v2, Linux ≥ 5.14) or SIGKILL each member until the
  group is empty. A job whose main process exits normally leaves its background
  processes running (cron semantics); its group is removed once empty (checked again
  at each later attempt and at shutdown, where the daemon waits up to ``CLOSE_SETTLE``
  seconds for the last of them: processes a job killed without waiting for them, or
  background ones told to stop with the daemon, are often still ending; a group given
  up on at once would be left behind, to the next start's sweep).
* **Names**: job groups are numbered per process (``job-<n>``, one counter for every
  :class:`Cgroups` in the process), and a name already taken — a group left behind,
  or a dead daemon's group whose pid this process reuses — is skipped, so a leftover
  never makes a later job run uncontained.
* **Leftovers of a killed daemon** (:meth:`Cgroups.sweep_stale`): a daemon that was
  SIGKILLed never ran :meth:`Cgroups.close`, and the jobs it was running go on in its
  ``clockd-<pid>`` groups. Their attempts can no longer be recorded: their leases end
  and the runs are delivered again — and a job left running would then run twice at
  once (an operator's drill: a worker killed during a 50 s job, attempt 2 started
  beside attempt 1 30 s later). So every daemon, at start and before it starts a job
  (at most every ``SWEEP_EVERY`` seconds), kills what runs in the groups of daemons
  that no longer run on this host (``cgroup.kill``, else SIGKILL of each member) and
  removes the groups once empty — what systemd's ``KillMode=control-group`` does to a
  unit whose main process died, background processes of that daemon's jobs included.
  A daemon on another machine that died took its jobs with it; a redelivery on this
  host kills the orphan first, since it starts a job.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

V1_LIMITS: Final = ("pids", "memory")
# How often a daemon looks for the job groups of daemons that died (before starting a job).
SWEEP_EVERY: Final = 2.0
# How long shutdown waits for the last processes of its job groups (see the module docstring).
CLOSE_SETTLE: Final = 2.0
# Job group numbers, one sequence per process (see "Names" in the module docstring).
_JOB_NUMBERS: Final = itertools.count(1)
# The leaf a delegated daemon moves itself into (see the module docstring).
DAEMON_LEAF: Final = "clockd-daemon"
# A daemon's parent group (``clockd-<pid>``); DAEMON_LEAF does not match it.
_PARENT_NAME: Final = re.compile(r"clockd-([0-9]+)")


@dataclass(frozen=True, slots=True)
class Support:
    """What this host offers; ``describe()`` is what status and the log show."""

    v2: Path | None = None  # the daemon's own v2 group (where job groups are made)
    v1: dict[str, Path] = field(default_factory=dict)  # controller -> the daemon's own v1 group
    v2_controllers: frozenset[str] = frozenset()
    reason: str = ""  # why there is no containment (v2 is None)

    @property
    def contained(self) -> bool:
        return self.v2 is not None

    def describe(self) -> str:
        if self.v2 is None:
            return f"process-group (no cgroup: {self.reason}); a job that calls setsid can outlive its timeout"
        limits = sorted(self.v2_controllers & {"pids", "memory"} | set(self.v1))
        where = f"cgroup v2 at {self.v2}"
        where += f", limits via {', '.join(limits)}" if limits else ", no limit controllers (setrlimit only)"
        return where + ", cpu_limit per job (cpu.stat)"


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, fstype, super options) of every cgroup mount."""
    out = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            out.append((fields[4].replace("\\040", " "), tail[0], tail[2]))
    return out


def _own_groups() -> dict[str, str]:
    """Controller (``""`` for v2) -> the daemon's group path, from /proc/self/cgroup."""
    groups: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return groups
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            groups[name] = path
    return groups


def detect() -> Support:
    """Find the v2 tree and the v1 limit controllers this process may create groups in."""
    mounts = _mounts()
    own = _own_groups()
    v2_mount = next((Path(m) for m, kind, _ in mounts if kind == "cgroup2"), None)
    if v2_mount is None:
        return Support(reason="no cgroup v2 hierarchy mounted")
    own_v2 = own.get("", "/")
    if own_v2.rstrip("/").rsplit("/", 1)[-1] == DAEMON_LEAF:  # moved there by an earlier start
        own_v2 = own_v2.rstrip("/").rsplit("/", 1)[0] or "/"
    base = v2_mount / own_v2.lstrip("/")
    if not os.access(base, os.W_OK) or not (base / "cgroup.procs").exists():
        return Support(reason=f"{base} is not writable (run as root, or Delegate=yes in the unit)")
    try:
        controllers = frozenset((base / "cgroup.controllers").read_text().split())
    except OSError:
        controllers = frozenset()
    v1: dict[str, Path] = {}
    for mount, kind, options in mounts:
        if kind != "cgroup":
            continue
        for name in V1_LIMITS:
            if name in options.split(",") and name not in controllers:
                group = Path(mount) / own.get(name, "/").lstrip("/")
                if os.access(group, os.W_OK):
                    v1[name] = group
    return Support(v2=base, v1=v1, v2_controllers=controllers)


class JobGroup:
    """One attempt's groups; the daemon moves the job in (``adopt``, see the module docstring)."""

    def __init__(self, paths: list[Path], v2: Path) -> None:
        self.paths = paths  # every group made for this attempt (v2 first)
        self.v2 = v2
        self.limited: set[str] = set()  # the controllers whose limit was set ("pids", "memory")

    def adopt(self, pid: int) -> None:
        """Move ``pid`` (the job's main process, just started) into every group."""
        for path in self.paths:
            try:
                (path / "cgroup.procs").write_text(str(pid))
            except OSError as exc:
                log.warning("cannot move pid %d into %s: %s", pid, path, exc, extra={"action": "cgroup_join_failed"})

    def cpu_seconds(self) -> float | None:
        """CPU time the group's processes used so far (None: unreadable)."""
        try:
            text = (self.v2 / "cpu.stat").read_text()
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        return None

    def pids(self) -> list[int]:
        try:
            text = (self.v2 / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def populated(self) -> bool:
        """Does a live (non-zombie) process remain? Zombies awaiting a reaper do not count."""
        return any(_running(pid) for pid in self.pids())

    def signal(self, sig: int) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL every member, the atomic way when the kernel has it."""
        try:
            (self.v2 / "cgroup.kill").write_text("1")
        except OSError:
            # No cgroup.kill (Linux < 5.14): members forking meanwhile are caught by the
            # next pass; freezing first would stop them forking but is optional in v2.
            for _ in range(100):
                members = self.pids()
                if not members:
                    break
                self.signal(signal.SIGKILL)

    def remove(self) -> bool:
        """Remove the groups if empty; False while processes remain (removed later)."""
        done = True
        for path in reversed(self.paths):
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


class Cgroups:
    """Makes a group per attempt below ``clockd-<pid>`` in the daemon's own groups."""

    def __init__(self, support: Support) -> None:
        self.support = support
        self._lock = threading.Lock()
        self._lingering: list[JobGroup] = []
        self._swept_at = float("-inf")  # time.monotonic() of the last sweep_stale

    def create(self, memory: int | None, nproc: int | None) -> JobGroup | None:
        """The attempt's groups with its limits, or None (no containment here, or the
        groups could not be made: logged; the job then runs as a process group)."""
        support = self.support
        if support.v2 is None:
            return None
        self.collect()
        now = time.monotonic()
        if now - self._swept_at >= SWEEP_EVERY:  # before the job: it may be a dead daemon's run again
            self.sweep_stale()
        parent = f"clockd-{os.getpid()}"
        made: list[Path] = []
        try:
            name, v2 = self._make_job_group(support.v2 / parent, made)
        except OSError as exc:
            log.warning(
                "cannot make a cgroup for a job (%s): it runs as a process group only",
                exc,
                extra={"action": "cgroup_unavailable"},
            )
            JobGroup(made, support.v2).remove()
            return None
        group = JobGroup(made, v2)
        for controller, value in (("pids", nproc), ("memory", memory)):
            if value is None:
                continue
            try:
                self._limit(support, parent, name, controller, value, v2, made)
                group.limited.add(controller)
            except OSError as exc:
                log.warning(
                    "cannot set the job's %s limit in a cgroup (%s): setrlimit only",
                    controller,
                    exc,
                    extra={"action": "cgroup_limit_unavailable", "controller": controller},
                )
        return group

    def _limit(
        self, support: Support, parent: str, name: str, controller: str, value: int, v2: Path, made: list[Path]
    ) -> None:
        if controller in support.v2_controllers and support.v2 is not None:
            # Needs the controller enabled below the daemon's group (a delegated subtree).
            self._enable(support.v2, controller)
            self._enable(support.v2 / parent, controller)
            (v2 / ("pids.max" if controller == "pids" else "memory.max")).write_text(str(value))
            if controller == "memory":
                with contextlib.suppress(OSError):
                    (v2 / "memory.swap.max").write_text("0")
            return
        if controller in support.v1:
            group = self._mkdir(support.v1[controller] / parent, name, made)
            (group / ("pids.max" if controller == "pids" else "memory.limit_in_bytes")).write_text(str(value))
            if controller == "memory":
                with contextlib.suppress(OSError):
                    (group / "memory.memsw.limit_in_bytes").write_text(str(value))
            return
        raise OSError(f"no {controller} controller available")

    @classmethod
    def _make_job_group(cls, parent: Path, made: list[Path]) -> tuple[str, Path]:
        """The next ``job-<n>`` below ``parent`` (v2) whose name is free."""
        for _ in range(1000):
            name = f"job-{next(_JOB_NUMBERS)}"
            try:
                return name, cls._mkdir(parent, name, made)
            except FileExistsError:
                continue  # left behind (see "Names" in the module docstring)
        raise OSError(f"no free job group name below {parent}")

    @staticmethod
    def _mkdir(parent: Path, name: str, made: list[Path]) -> Path:
        parent.mkdir(mode=0o755, exist_ok=True)
        path = parent / name
        path.mkdir(mode=0o755)
        made.append(path)
        return path

    @staticmethod
    def _enable(parent: Path, controller: str) -> None:
        control = parent / "cgroup.subtree_control"
        if controller in control.read_text().split():
            return
        try:
            control.write_text(f"+{controller}")
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            # The daemon itself sits in ``parent`` (a delegated group): move it into a
            # leaf so that ``parent`` may hand the controller down (no internal processes).
            leaf = parent / DAEMON_LEAF
            leaf.mkdir(mode=0o755, exist_ok=True)
            (leaf / "cgroup.procs").write_text(str(os.getpid()))
            log.info(
                "moved the daemon into %s so that job groups can get the %s controller",
                leaf,
                controller,
                extra={"action": "cgroup_daemon_moved", "cgroup": str(leaf)},
            )
            control.write_text(f"+{controller}")

    def release(self, group: JobGroup) -> None:
        """After the run: remove the groups, or keep them until their last process ends."""
        if not group.remove():
            with self._lock:
                self._lingering.append(group)

    def _bases(self) -> list[Path]:
        """The daemon's own groups, v2 and each v1 limit hierarchy, where ``clockd-<pid>``
        parents are made (none without containment)."""
        support = self.support
        return [support.v2, *support.v1.values()] if support.v2 is not None else []

    def sweep_stale(self) -> list[str]:
        """Kill what runs in the ``clockd-<pid>`` groups of daemons that no longer run
        (their jobs' attempts cannot be recorded and are delivered again; see the module
        docstring) and remove the groups once empty (a group whose processes are still
        dying is removed by a later sweep). Never waits. Returns the groups removed."""
        self._swept_at = time.monotonic()
        removed: list[str] = []
        killed = 0
        for base in self._bases():
            try:
                entries = list(base.iterdir())
            except OSError:
                continue
            for parent in entries:
                match = _PARENT_NAME.fullmatch(parent.name)
                if match is None or int(match[1]) == os.getpid() or _running(int(match[1])):
                    continue
                with contextlib.suppress(OSError):
                    for child in list(parent.iterdir()):
                        if not child.is_dir():
                            continue
                        try:
                            child.rmdir()
                        except OSError:
                            orphan = JobGroup([child], child)
                            members = [pid for pid in orphan.pids() if _running(pid)]
                            if members:
                                orphan.kill()
                                killed += len(members)
                            with contextlib.suppress(OSError):
                                child.rmdir()  # gone already if the kill was quick
                    parent.rmdir()
                    removed.append(str(parent))
        if killed:
            log.warning(
                "killed %d processes of jobs whose daemon no longer runs: their runs are delivered again",
                killed,
                extra={"action": "cgroup_orphans_killed", "processes": killed},
            )
        if removed:
            log.info(
                "removed %d cgroups left by daemons that no longer run",
                len(removed),
                extra={"action": "cgroup_swept", "groups": len(removed)},
            )
        return removed

    def close(self, settle: float = CLOSE_SETTLE) -> None:
        """At shutdown: remove the job groups and the ``clockd-<pid>`` parents, waiting up
        to ``settle`` seconds for the last processes of groups not yet empty (see the
        module docstring). Blocks: :meth:`ProcessRunner.aclose` runs it in a thread."""
        deadline = time.monotonic() + settle
        interval = 0.01
        self.collect()
        while self._lingering and (remaining := deadline - time.monotonic()) > 0:
            time.sleep(min(interval, remaining))
            interval = min(interval * 2, 0.1)
            self.collect()
        for base in self._bases():
            with contextlib.suppress(OSError):
                (base / f"clockd-{os.getpid()}").rmdir()
        if self._lingering:
            log.warning(
                "%d job cgroups still have running processes at shutdown: the next start kills them",
                len(self._lingering),
                extra={"action": "cgroup_left_running", "groups": len(self._lingering)},
            )

    def collect(self) -> None:
        """Remove groups whose leftover background processes have ended."""
        with self._lock:
            lingering, self._lingering = self._lingering, []
        still = [g for g in lingering if not g.remove()]
        if still:
            with self._lock:
                self._lingering.extend(still)
