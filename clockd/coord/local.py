"""Local coordinator: one clockd per database file, for the embedded store.

Leadership and every shard belong to the process holding an exclusive
``flock`` on ``<database>.lock``; the kernel drops the lock when the process
dies, however it dies. Fencing tokens come from a counter in the store
(``Store.next_token``), taken anew at every start, so a stale process from an
earlier start still bounces off the fences — the same code path as etcd.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clockd.coord import LEADER, ClockReading, CoordStatus, Lease, Member, shard_resource
from clockd.core.capabilities import advertised
from clockd.errors import StoreLocked, StoreUnavailable
from clockd.store import Store
from clockd.store.sqlite import files

FOREVER = float("inf")


class LocalCoordinator:
    def __init__(self, store: Store, lock_path: Path, node_id: str, shard_count: int = 64) -> None:
        self.store = store
        self.lock_path = lock_path
        self.node_id = node_id
        self.shard_count = shard_count
        self._fd: int | None = None
        self._leader: Lease | None = None
        self._shards: dict[int, Lease] = {}
        self._modes: tuple[str, ...] = ()
        self._clock: ClockReading | None = None

    def acquire_lock(self) -> None:
        """Take the file lock or raise ``StoreLocked`` naming the holder."""
        fd = files.open_lock(self.lock_path)  # 0600, O_NOFOLLOW | O_CLOEXEC, owned by us
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError, ValueError):
                holder = os.pread(fd, 64, 0).decode().strip()
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise StoreLocked(
                f"another clockd{who} already runs on {self.lock_path.with_suffix('')}; "
                "stop it, or give this one its own --store"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        except OSError as exc:
            os.close(fd)
            raise StoreUnavailable(f"cannot write lock file {self.lock_path}: {exc.strerror}") from exc
        self._fd = fd

    async def start(self, *, lead: bool, materialize: bool, modes: Sequence[str]) -> None:
        if self._fd is None:
            self.acquire_lock()
        self._modes = tuple(modes)
        if lead:
            self._leader = Lease(LEADER, await self.store.next_token(LEADER), FOREVER)
        if materialize:
            for shard in range(self.shard_count):
                resource = shard_resource(shard)
                self._shards[shard] = Lease(resource, await self.store.next_token(resource), FOREVER)

    async def stop(self) -> None:
        self._leader = None
        self._shards.clear()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def leader_lease(self) -> Lease | None:
        return self._leader

    def shard_leases(self) -> list[Lease]:
        return list(self._shards.values())

    def stand_by(self, reason: str | None) -> None:
        """One node: nobody to hand over to. The leader and materializer check the clock
        watch themselves and do not act while it is off."""

    def publish_clock(self, reading: ClockReading) -> None:
        self._clock = reading  # one process: its status() is the only reader

    def lost(self, lease: Lease) -> None:
        # Only a second process on the same file could have fenced us; that cannot
        # happen while we hold the lock, so a bounce means our lock is gone: stop acting.
        if self._leader == lease:
            self._leader = None
        shard = lease.shard
        if shard is not None and self._shards.get(shard) == lease:
            del self._shards[shard]

    async def status(self) -> CoordStatus:
        shards = tuple(sorted(self._shards))
        return CoordStatus(
            reachable=True,
            leader_node=self.node_id if self._leader else None,
            leader_token=self._leader.token if self._leader else None,
            members=(
                Member(self.node_id, self._modes, shards, capabilities=advertised(self._modes), clock=self._clock),
            ),
        )


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds an embedded store's lock file (``clockctl status``)."""

    path: Path
    held: bool  # a process holds the lock now
    pid: int | None  # the holder (kernel lock table), or the pid the last holder wrote
    verified: bool  # ``held`` comes from the kernel's lock table, not from the pid file


def lock_holder(lock_path: Path) -> LockHolder:
    """Whether a clockd holds ``lock_path``, found **without taking the lock**: a probe
    that took it, even for an instant, could make a clockd starting at that moment exit
    with "already runs". Linux: the kernel's table (``/proc/locks``) names the holder of
    the file's ``flock``; elsewhere, the pid the holder wrote is checked for liveness."""
    try:
        st = lock_path.stat()
    except OSError:
        return LockHolder(lock_path, held=False, pid=None, verified=True)
    written: int | None = None
    with contextlib.suppress(OSError, ValueError):
        written = int(lock_path.read_text().strip() or "0") or None
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            lines = table.readlines()
    except OSError:
        return LockHolder(lock_path, held=written is not None and _alive(written), pid=written, verified=False)
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:2146610 0 EOF"; waiters have "->" first.
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[3] == "WRITE" and fields[5] == key:
            pid = int(fields[4]) if fields[4].isdigit() and fields[4] != "0" else written
            return LockHolder(lock_path, held=True, pid=pid, verified=True)
    return LockHolder(lock_path, held=False, pid=written, verified=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True
