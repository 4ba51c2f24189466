"""Coordinator port: who leads, which materializer owns which shard, and the fencing tokens.

Two adapters implement it: ``clockd.coord.local`` (one process per database
file: an exclusive file lock, tokens from a counter in the store) and
``clockd.coord.etcd`` (leases in etcd; a token is the ``create_revision`` of the
lease-bound key).

Leadership contract (read this before touching either adapter):

* A ``Lease`` names a resource (``"leader"`` or ``"shard:<n>"``), the fencing
  ``token`` for that term (strictly larger than every earlier term's token for
  the same resource), and a local ``deadline`` on the monotonic clock. The
  deadline is computed from the *send* time of the last successful refresh +
  TTL − margin, so it always falls before the server-side expiry.
* Callers check ``lease.valid(clock.monotonic())`` immediately before acting,
  and pass ``lease.token`` to every store write made under that role; the store
  advances ``fences(resource, token)`` in the same transaction and rejects a
  stale token (``FencedOut``), so a zombie that missed its deadline check still
  cannot commit.
* On loss (refresh says TTL ≤ 0, the deadline passes, the key disappears or
  changes, a fenced write fails) the adapter drops the lease *first* — before
  any await — and only then cleans up; it never reuses a token after a loss.
* ``leader_lease()`` / ``shard_leases()`` return only leases that are valid
  now; they never block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

LEADER = "leader"


def shard_resource(shard: int) -> str:
    return f"shard:{shard}"


@dataclass(frozen=True, slots=True)
class Lease:
    resource: str
    token: int
    deadline: float  # monotonic seconds; act only while monotonic() < deadline

    def valid(self, monotonic_now: float) -> bool:
        return monotonic_now < self.deadline

    @property
    def shard(self) -> int | None:
        if self.resource.startswith("shard:"):
            return int(self.resource.split(":", 1)[1])
        return None


@dataclass(frozen=True, slots=True)
class ClockReading:
    """A node's last measured clock offset (its clock watch, ``clockd.modes.clockwatch``).

    ``measured_at`` is the *database's* clock at the measurement, so anyone can tell its
    age by the same clock, whatever their own clock says."""

    offset: float  # seconds, the node's wall clock minus the database's
    limit: float  # the node's max_clock_skew (seconds): beyond it the node stands by
    measured_at: datetime

    @property
    def within_limit(self) -> bool:
        return abs(self.offset) <= self.limit


@dataclass(frozen=True, slots=True)
class Member:
    node_id: str
    modes: tuple[str, ...]
    shards: tuple[int, ...] = ()
    standby: str | None = None  # why the node stepped down from leader/materializer duties
    # What its worker honours (clockd.core.capabilities); () from a release before them.
    capabilities: tuple[str, ...] = ()
    clock: ClockReading | None = None  # None: the node runs no clock watch, or has not measured yet


@dataclass(frozen=True, slots=True)
class CoordStatus:
    reachable: bool
    leader_node: str | None
    leader_token: int | None
    members: tuple[Member, ...] = field(default_factory=tuple)


class Coordinator(Protocol):
    node_id: str
    shard_count: int

    async def start(self, *, lead: bool, materialize: bool, modes: Sequence[str]) -> None:
        """Register this node; campaign for leadership if ``lead``; claim a fair share of
        shards if ``materialize``. Returns once background maintenance runs; it does not
        wait for leadership. Raises ``CoordError`` when the coordinator cannot be reached
        at start or ``StoreLocked`` when another process holds the local lock."""
        ...

    async def stop(self) -> None:
        """Drop every lease (synchronously), then release them remotely, best effort."""
        ...

    def leader_lease(self) -> Lease | None:
        """The leader lease if this node holds it and it is valid now."""
        ...

    def shard_leases(self) -> list[Lease]:
        """Shard leases this node holds that are valid now."""
        ...

    def lost(self, lease: Lease) -> None:
        """Tell the adapter a fenced write bounced: drop ``lease`` and reacquire with a new term."""
        ...

    def stand_by(self, reason: str | None) -> None:
        """Step down from leadership and shard ownership (and do not take them) while
        ``reason`` holds — e.g. this node's clock is off — so other nodes take over;
        ``None`` to return. Synchronous, like ``lost()``."""
        ...

    def publish_clock(self, reading: ClockReading) -> None:
        """Show ``reading`` (this node's latest clock offset) in this node's member record,
        where every ``status()`` reads it. Synchronous and best effort: the record is
        rewritten in the background, and the next reading replaces a lost one."""
        ...

    async def status(self) -> CoordStatus: ...
