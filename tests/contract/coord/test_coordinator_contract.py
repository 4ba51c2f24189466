"""The coordinator contract (``clockd.coord``), one suite over every adapter: the local
coordinator of the embedded store and etcd's (backends in ``conftest.py``).

What both must do: exactly one node leads; a token is larger in every later term of a
resource; the shards are each owned once; ``lost`` and ``stop`` drop leases at once, and
a successor takes over with larger tokens. No sleeping: every wait polls a condition
against a deadline. etcd-only behaviours (rebalancing between live nodes, expiry when
etcd freezes, a killed holder) are in ``test_etcd_coordinator.py``.
"""

from __future__ import annotations

import pytest

from clockd.coord import LEADER, Coordinator, Lease, shard_resource
from tests.harness import until

from .conftest import SHARDS, CoordBackend

pytestmark = pytest.mark.timeout(60)

WITHIN = 10.0  # seconds: a deadline for what the etcd adapter does in the background


def held_leader(coords: list[Coordinator]) -> list[tuple[Coordinator, Lease]]:
    return [(c, lease) for c in coords if (lease := c.leader_lease()) is not None]


def owns_every_shard(coord: Coordinator) -> bool:
    return sorted(lease.shard for lease in coord.shard_leases() if lease.shard is not None) == list(range(SHARDS))


async def test_exactly_one_of_two_leads_and_status_names_it(coord_backend: CoordBackend) -> None:
    a, b = coord_backend.make("a"), coord_backend.make("b")
    assert await coord_backend.start(a, lead=True, materialize=False, modes=["leader"])
    await until(lambda: a.leader_lease() is not None, within=WITHIN, what="a leads")
    await coord_backend.start(b, lead=True, materialize=False, modes=["leader"])
    ((leader, lease),) = held_leader([a, b])
    assert leader is a and lease.resource == LEADER and lease.shard is None
    assert a.shard_leases() == []  # it did not ask for shards
    status = await a.status()
    assert status.reachable
    assert (status.leader_node, status.leader_token) == ("a", lease.token)
    assert "a" in {m.node_id for m in status.members}


async def test_every_shard_is_owned_once_by_the_node_that_materializes(coord_backend: CoordBackend) -> None:
    a = coord_backend.make("a")
    assert await coord_backend.start(a, lead=False, materialize=True, modes=["materializer"])
    await until(lambda: owns_every_shard(a), within=WITHIN, what="a owns every shard")
    leases = a.shard_leases()
    assert len(leases) == SHARDS
    assert {lease.resource for lease in leases} == {shard_resource(n) for n in range(SHARDS)}
    assert a.leader_lease() is None  # it did not campaign
    b = coord_backend.make("b")
    await coord_backend.start(b, lead=False, materialize=False, modes=["worker"])
    assert b.shard_leases() == [] and b.leader_lease() is None
    (member,) = [m for m in (await a.status()).members if m.node_id == "a"]
    assert sorted(member.shards) == list(range(SHARDS)) and "materializer" in member.modes


async def test_tokens_increase_with_every_term_and_a_successor_takes_over(coord_backend: CoordBackend) -> None:
    a = coord_backend.make("a")
    assert await coord_backend.start(a, lead=True, materialize=True, modes=["leader", "materializer"])
    await until(lambda: a.leader_lease() is not None and owns_every_shard(a), within=WITHIN, what="a holds all")
    first = a.leader_lease()
    assert first is not None
    shards = {lease.resource: lease.token for lease in a.shard_leases()}

    # stop() releases at once: nothing is held when it returns, and a successor gets it all.
    await a.stop()
    assert a.leader_lease() is None and a.shard_leases() == []
    b = coord_backend.make("b")
    assert await coord_backend.start(b, lead=True, materialize=True, modes=["leader", "materializer"])
    await until(lambda: b.leader_lease() is not None and owns_every_shard(b), within=WITHIN, what="b takes over")
    second = b.leader_lease()
    assert second is not None and second.token > first.token
    assert all(lease.token > shards[lease.resource] for lease in b.shard_leases())

    # A node that comes back (same name) starts a new term: larger again.
    await b.stop()
    again = coord_backend.make("a")
    assert await coord_backend.start(again, lead=True, materialize=False, modes=["leader"])
    await until(lambda: again.leader_lease() is not None, within=WITHIN, what="a leads again")
    third = again.leader_lease()
    assert third is not None and third.token > second.token


async def test_lost_drops_the_lease_at_once_and_never_reuses_its_token(coord_backend: CoordBackend) -> None:
    a = coord_backend.make("a")
    assert await coord_backend.start(a, lead=True, materialize=True, modes=["leader", "materializer"])
    await until(lambda: a.leader_lease() is not None and owns_every_shard(a), within=WITHIN, what="a holds all")
    leader = a.leader_lease()
    shard = a.shard_leases()[0]
    assert leader is not None

    a.lost(leader)  # a fenced write bounced: dropped synchronously, before any await
    assert a.leader_lease() is None
    a.lost(shard)
    assert shard.resource not in {lease.resource for lease in a.shard_leases()}
    # Whatever the adapter holds later for these resources is a new term (etcd
    # campaigns again; the local adapter stops acting): never the old token.
    later = a.leader_lease()
    assert later is None or later.token > leader.token
    assert all(lease.token > shard.token for lease in a.shard_leases() if lease.resource == shard.resource)


async def test_a_published_clock_reading_shows_in_status_and_the_next_replaces_it(
    coord_backend: CoordBackend,
) -> None:
    """``publish_clock`` is how every node's offset reaches ``clockctl status`` and the
    dashboard: the node's member record carries its latest reading."""
    import asyncio
    import time
    from datetime import UTC, datetime

    from clockd.coord import ClockReading

    a = coord_backend.make("a")
    assert await coord_backend.start(a, lead=False, materialize=False, modes=["worker"])
    at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

    async def shown(offset: float) -> ClockReading:
        """The reading in a's member record once it has ``offset`` (the etcd adapter
        rewrites the record in the background)."""
        deadline = time.monotonic() + WITHIN
        while True:
            (member,) = [m for m in (await a.status()).members if m.node_id == "a"]
            if member.clock is not None and member.clock.offset == offset:
                return member.clock
            assert time.monotonic() < deadline, f"a's member record shows {member.clock}, not offset {offset}"
            await asyncio.sleep(0.02)

    a.publish_clock(ClockReading(0.004, 2.0, at))
    first = await shown(0.004)
    assert first == ClockReading(0.004, 2.0, at) and first.within_limit
    a.publish_clock(ClockReading(-3.5, 2.0, at.replace(second=10)))
    later = await shown(-3.5)
    assert not later.within_limit and later.measured_at == at.replace(second=10)
