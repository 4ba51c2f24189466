"""Contract tests of the etcd coordinator against real etcd servers.

No mocks and no sleeping to wait: every wait polls a condition against a deadline.
TTLs are 2-3 s (etcd's minimum is 2) so that failovers stay short.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc.aio
import pytest
from grpc import ChannelConnectivity

from clockd.coord import Lease
from clockd.coord.etcd import STOP_BOUND, EtcdCoordinator, assign_shards, channel_target
from clockd.core.capabilities import WORKER_CAPABILITIES, offered
from clockd.errors import CoordError
from tests.harness import EtcdCluster, EtcdServer, free_port, require_binary
from tests.harness.netns import Relay

pytestmark = pytest.mark.timeout(60)

SHARDS = 64
HOLDER = Path(__file__).with_name("_holder.py")

MakeCoord = Callable[..., EtcdCoordinator]


# -- helpers ---------------------------------------------------------------------------------


async def eventually(predicate: Callable[[], bool], within: float, what: str, interval: float = 0.02) -> float:
    """Poll ``predicate`` until true; return the seconds it took. Fails after ``within`` seconds."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > within:
            pytest.fail(f"not within {within:.1f}s: {what}")
        await asyncio.sleep(interval)
    return time.monotonic() - start


def leaders(coords: list[EtcdCoordinator]) -> list[tuple[EtcdCoordinator, Lease]]:
    out = []
    for c in coords:
        lease = c.leader_lease()
        if lease is not None:
            out.append((c, lease))
    return out


def ownership(coords: list[EtcdCoordinator]) -> dict[int, list[str]]:
    owners: dict[int, list[str]] = {}
    for c in coords:
        for lease in c.shard_leases():
            assert lease.shard is not None
            owners.setdefault(lease.shard, []).append(c.node_id)
    return owners


def balanced_exactly_once(coords: list[EtcdCoordinator]) -> bool:
    owners = ownership(coords)
    if sorted(owners) != list(range(SHARDS)) or any(len(v) != 1 for v in owners.values()):
        return False
    counts = [len(c.shard_leases()) for c in coords]
    return max(counts) - min(counts) <= 1


class OverlapWatch:
    """Samples every few ms that no shard and no leadership is held validly by two
    nodes at once (all coordinators share this event loop, so a sample is consistent)."""

    def __init__(self, coords: list[EtcdCoordinator]) -> None:
        self.coords = coords
        self.violations: list[str] = []
        self.samples = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.samples += 1
            for shard, nodes in ownership(self.coords).items():
                if len(nodes) > 1:
                    self.violations.append(f"shard {shard} held by {nodes}")
            if len(leaders(self.coords)) > 1:
                self.violations.append("two valid leaders")
            await asyncio.sleep(0.005)

    def __enter__(self) -> OverlapWatch:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()


@pytest.fixture
def cluster_name() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def make_coord(etcd_server: EtcdServer, cluster_name: str) -> AsyncIterator[MakeCoord]:
    made: list[EtcdCoordinator] = []

    def make(node: str, *, endpoints: list[str] | None = None, ttl: float = 2.0) -> EtcdCoordinator:
        coord = EtcdCoordinator(endpoints or etcd_server.endpoints, cluster_name, node, shard_count=SHARDS, ttl=ttl)
        made.append(coord)
        return coord

    yield make
    await asyncio.gather(*(c.stop() for c in made), return_exceptions=True)


@pytest.fixture
def own_etcd() -> Iterator[EtcdServer]:
    """A private single node, for drills that freeze or kill it."""
    require_binary("etcd")
    with EtcdServer() as server:
        yield server


# -- pure parts ------------------------------------------------------------------------------


def test_channel_target_forms() -> None:
    assert channel_target(["http://127.0.0.1:2379"]) == "127.0.0.1:2379"
    assert channel_target(["127.0.0.1:23790"]) == "127.0.0.1:23790"
    assert channel_target(["http://localhost"]) == "localhost:2379"
    assert (
        channel_target(["http://127.0.0.1:1", "http://127.0.0.1:2", "127.0.0.2:3"])
        == "ipv4:127.0.0.1:1,127.0.0.1:2,127.0.0.2:3"
    )
    assert channel_target(["http://[::1]:2379", "http://[::1]:2380"]) == "ipv6:[::1]:2379,[::1]:2380"
    with pytest.raises(CoordError):
        channel_target([])
    with pytest.raises(CoordError):
        channel_target(["https://127.0.0.1:2379"])


def test_assignment_is_even_deterministic_and_moves_few_shards() -> None:
    for m in range(1, 8):
        nodes = [f"node-{i}" for i in range(m)]
        a = assign_shards(nodes, SHARDS)
        assert a == assign_shards(list(reversed(nodes)), SHARDS)
        flat = sorted(s for shards in a.values() for s in shards)
        assert flat == list(range(SHARDS))
        sizes = [len(v) for v in a.values()]
        assert max(sizes) - min(sizes) <= 1
    before = assign_shards(["a", "b", "c"], SHARDS)
    after = assign_shards(["a", "b", "c", "d"], SHARDS)
    moved = sum(1 for s in range(SHARDS) for n in "abc" if s in before[n] and s not in after[n])
    assert moved <= SHARDS // 4 + 4  # about the new member's share, not a reshuffle


# -- leadership ------------------------------------------------------------------------------


async def test_one_leads_tokens_increase_and_stop_hands_over_fast(make_coord: MakeCoord) -> None:
    a, b = make_coord("a"), make_coord("b")
    await a.start(lead=True, materialize=False, modes=["leader"])
    await b.start(lead=True, materialize=False, modes=["leader"])
    await eventually(lambda: len(leaders([a, b])) == 1, 5, "one of two leads")
    ((first, lease1),) = leaders([a, b])
    observed = time.monotonic()
    while time.monotonic() - observed < 0.3:  # a steady state: the follower stays a follower
        assert [c for c, _ in leaders([a, b])] == [first]
        await asyncio.sleep(0.02)
    tokens = [lease1.token]

    other = b if first is a else a
    await first.stop()
    took = await eventually(lambda: other.leader_lease() is not None, 5, "successor leads")
    assert took < 1.0, f"graceful handover took {took:.2f}s"
    lease2 = other.leader_lease()
    assert lease2 is not None
    tokens.append(lease2.token)

    # A fenced write bounced: the holder drops the lease and campaigns with a new term.
    third = make_coord(first.node_id)
    await third.start(lead=True, materialize=False, modes=["leader"])
    other.lost(lease2)
    assert other.leader_lease() is None  # dropped synchronously
    await eventually(lambda: len(leaders([other, third])) == 1, 5, "a new term")
    ((_, lease3),) = leaders([other, third])
    tokens.append(lease3.token)
    assert tokens == sorted(tokens) and len(set(tokens)) == 3, tokens
    assert other.leadership_changes >= 2


async def test_crashed_leader_is_replaced_within_ttl(
    make_coord: MakeCoord, etcd_server: EtcdServer, cluster_name: str
) -> None:
    ttl = 2.0
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HOLDER),
        ",".join(etcd_server.endpoints),
        cluster_name,
        "zombie",
        str(ttl),
        stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        holder_token = None
        holder_shards = 0
        deadline = time.monotonic() + 15
        while holder_token is None or holder_shards != SHARDS:
            line = await asyncio.wait_for(proc.stdout.readline(), deadline - time.monotonic())
            assert line, "holder process exited"
            kind, value = line.decode().split()
            if kind == "LEADER":
                holder_token = None if value == "None" else int(value)
            else:
                holder_shards = int(value)

        b = make_coord("b", ttl=ttl)
        await b.start(lead=True, materialize=True, modes=["leader", "materializer"])
        # b joined: the holder gives up half of the shards; b must not lead meanwhile.
        await eventually(lambda: len(b.shard_leases()) == SHARDS // 2, 10, "b gets half")
        assert b.leader_lease() is None

        os.kill(proc.pid, signal.SIGKILL)  # no revoke: its keys go only when leases expire
        await proc.wait()
        killed = time.monotonic()
        await eventually(lambda: b.leader_lease() is not None, ttl + 5, "b leads after crash")
        took = time.monotonic() - killed
        await eventually(lambda: len(b.shard_leases()) == SHARDS, ttl + 5, "b owns all shards")
        lease = b.leader_lease()
        assert lease is not None and lease.token > holder_token
        assert took < ttl + 5
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_start_fails_fast_when_etcd_is_unreachable(cluster_name: str) -> None:
    coord = EtcdCoordinator([f"http://127.0.0.1:{free_port()}"], cluster_name, "a", connect_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(CoordError, match="etcd unreachable at"):
        await coord.start(lead=True, materialize=True, modes=["leader"])
    assert time.monotonic() - started < 5
    await coord.stop()


# -- shards ----------------------------------------------------------------------------------


async def test_shards_owned_once_split_evenly_and_rebalanced(make_coord: MakeCoord) -> None:
    a, b = make_coord("a"), make_coord("b")
    coords = [a, b]
    with OverlapWatch([a, b]) as overlap:
        for c in coords:
            await c.start(lead=False, materialize=True, modes=["materializer"])
        await eventually(lambda: balanced_exactly_once(coords), 10, "2 nodes own 64 shards")
        assert sorted(len(c.shard_leases()) for c in coords) == [32, 32]

        c3 = make_coord("c")
        overlap.coords = coords = [a, b, c3]
        await c3.start(lead=False, materialize=True, modes=["materializer"])
        took = await eventually(lambda: balanced_exactly_once(coords), 10, "3 nodes rebalance")
        assert took < 5
        assert sorted(len(c.shard_leases()) for c in coords) == [21, 21, 22]

        # lost() ends one shard's term; it is claimed again with a larger token.
        old = a.shard_leases()[0]
        a.lost(old)
        assert old.shard not in {le.shard for le in a.shard_leases()}
        await eventually(lambda: balanced_exactly_once(coords), 10, "shard re-claimed")
        new = next(le for c in coords for le in c.shard_leases() if le.shard == old.shard)
        assert new.token > old.token

        await b.stop()
        coords = [a, c3]
        took = await eventually(lambda: balanced_exactly_once(coords), 10, "b's shards move")
        assert took < 5
        assert sorted(len(c.shard_leases()) for c in coords) == [32, 32]

    assert overlap.samples > 10
    assert overlap.violations == []

    status = await a.status()
    assert status.reachable
    assert {m.node_id: len(m.shards) for m in status.members} == {"a": 32, "c": 32}
    assert all("materializer" in m.modes for m in status.members)
    assert a.shard_moves > 0


async def test_status_names_leader_members_and_shards(make_coord: MakeCoord) -> None:
    a, b = make_coord("a"), make_coord("b")
    await a.start(lead=True, materialize=True, modes=["leader", "materializer", "worker"])
    await b.start(lead=False, materialize=False, modes=["worker"])
    await eventually(
        lambda: a.leader_lease() is not None and len(a.shard_leases()) == SHARDS, 10, "a leads and owns every shard"
    )
    status = await b.status()
    lease = a.leader_lease()
    assert lease is not None
    assert status.reachable and status.leader_node == "a" and status.leader_token == lease.token
    members = {m.node_id: m for m in status.members}
    assert set(members) == {"a", "b"}
    assert members["a"].modes == ("leader", "worker", "materializer")
    assert members["a"].shards == tuple(range(SHARDS))
    assert members["b"].modes == ("worker",) and members["b"].shards == ()
    assert a.etcd_up and b.etcd_up


async def test_workers_advertise_capabilities_and_an_older_member_reads_as_none(
    make_coord: MakeCoord, etcd_server: EtcdServer, cluster_name: str
) -> None:
    require_binary("etcdctl")
    # Leases long enough to outlast a loaded CI machine: this test is about what a member
    # key says, not about keeping it (with 2 s, a stalled refresh once dropped "w" and the
    # status read in between missed it).
    w, m = make_coord("w", ttl=10.0), make_coord("m", ttl=10.0)
    await w.start(lead=False, materialize=False, modes=["worker"])
    await m.start(lead=False, materialize=True, modes=["materializer"])
    # A member key as a release before capabilities wrote it (no "capabilities" field).
    old = await asyncio.to_thread(
        subprocess.run,
        ["etcdctl", f"--endpoints={etcd_server.endpoints[0]}", "put",
         f"/clockd/{cluster_name}/members/old", '{"node": "old", "modes": ["worker"]}'],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert old.returncode == 0, old.stderr
    deadline = time.monotonic() + 20
    while True:  # a member whose lease lapsed under load is listed again once it re-registers
        members = {x.node_id: x for x in (await m.status()).members}
        if {"w", "m", "old"} <= set(members) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert {"w", "m", "old"} <= set(members), sorted(members)
    assert members["w"].capabilities == tuple(sorted(WORKER_CAPABILITIES))
    assert members["m"].capabilities == ()  # not a worker: nothing to advertise
    assert members["old"].capabilities == ()
    workers = [x.capabilities for x in members.values() if "worker" in x.modes]
    assert offered(workers) == frozenset()  # the old worker honours none of them
    assert offered([members["w"].capabilities]) == WORKER_CAPABILITIES and offered([]) is None


async def test_stand_by_hands_leadership_and_shards_over_and_returns(make_coord: MakeCoord) -> None:
    """A node that stands by (its clock is off) holds no role and takes none: the others
    lead and own every shard; it says why in status; back, it gets its share again."""
    a, b = make_coord("a"), make_coord("b")
    for c in (a, b):
        await c.start(lead=True, materialize=True, modes=["leader", "materializer"])
    await eventually(lambda: balanced_exactly_once([a, b]) and len(leaders([a, b])) == 1, 10, "a and b share")
    skewed = a if a.leader_lease() is not None else b
    other = b if skewed is a else a
    skewed.stand_by("clock offset +3600s")
    assert skewed.leader_lease() is None and skewed.shard_leases() == []  # at once, in-process
    await eventually(
        lambda: other.leader_lease() is not None and len(other.shard_leases()) == SHARDS, 10, "the other takes all"
    )
    status = await other.status()
    member = next(m for m in status.members if m.node_id == skewed.node_id)
    assert member.standby == "clock offset +3600s" and "materializer" not in member.modes
    assert skewed.leader_lease() is None and skewed.shard_leases() == []  # it did not campaign or claim
    skewed.stand_by(None)
    await eventually(lambda: balanced_exactly_once([a, b]), 10, "the share comes back")
    assert len(skewed.shard_leases()) == SHARDS // 2


# -- etcd failures ---------------------------------------------------------------------------


async def test_frozen_etcd_lapses_leases_by_deadline_and_they_return(
    make_coord: MakeCoord, own_etcd: EtcdServer
) -> None:
    ttl = 2.0
    a = make_coord("a", endpoints=own_etcd.endpoints, ttl=ttl)
    await a.start(lead=True, materialize=True, modes=["leader", "materializer"])
    await eventually(
        lambda: a.leader_lease() is not None and len(a.shard_leases()) == SHARDS, 10, "a leads and owns every shard"
    )
    before = a.leader_lease()
    assert before is not None

    own_etcd.freeze()
    try:
        frozen = time.monotonic()
        while True:
            # Never reported past the deadline it announced, which no renewal after the
            # freeze moved (checked per call: the loop itself may be descheduled under load).
            asked = time.monotonic()
            lease = a.leader_lease()
            if lease is None:
                break
            assert asked < lease.deadline, "a lease reported past its own deadline"
            assert lease.deadline <= frozen + ttl, "leader lease outlived its TTL"
            await asyncio.sleep(0.01)
        await eventually(lambda: not a.shard_leases(), ttl, "shard leases lapse")
        await eventually(lambda: not a.etcd_up, 5, "etcd reported down")
        # Stay frozen past gRPC's keepalive (5 s + 2 s ping timeout), so the channel is torn
        # down and must reconnect; meanwhile nothing may be held.
        while time.monotonic() - frozen < 8:
            assert a.leader_lease() is None and not a.shard_leases()
            await asyncio.sleep(0.05)
    finally:
        own_etcd.thaw()

    await eventually(lambda: a.leader_lease() is not None, 15, "leadership returns after thaw")
    after = a.leader_lease()
    assert after is not None and after.token > before.token  # a new term, never the old one
    await eventually(lambda: len(a.shard_leases()) == SHARDS, 15, "shards return after thaw")
    assert a.etcd_up


async def test_etcd_restart_lapses_leases_then_they_resume(make_coord: MakeCoord, own_etcd: EtcdServer) -> None:
    ttl = 2.0
    a, b = (
        make_coord("a", endpoints=own_etcd.endpoints, ttl=ttl),
        make_coord("b", endpoints=own_etcd.endpoints, ttl=ttl),
    )
    for c in (a, b):
        await c.start(lead=True, materialize=True, modes=["leader", "materializer"])
    await eventually(lambda: len(leaders([a, b])) == 1 and balanced_exactly_once([a, b]), 10, "steady state")
    ((_, before),) = leaders([a, b])

    own_etcd.kill()
    await eventually(
        lambda: not leaders([a, b]) and not ownership([a, b]), ttl, "every lease lapses while etcd is down"
    )
    own_etcd.restart()
    await eventually(
        lambda: len(leaders([a, b])) == 1 and balanced_exactly_once([a, b]), 15, "leadership and shards resume"
    )
    ((_, after),) = leaders([a, b])
    assert after.token > before.token
    assert a.etcd_up and b.etcd_up


def on_the_raft_leader(cluster: EtcdCluster, name: str, ttl: float) -> tuple[int, list[EtcdCoordinator]]:
    """The raft leader's index and three coordinators (not started) that connect to it
    first: killing that member then takes the clients' own connection and the raft
    leader down together."""
    raft_leader = cluster.leader_index()
    order = [raft_leader] + [i for i in range(3) if i != raft_leader]
    endpoints = [cluster.endpoints[i] for i in order]
    return raft_leader, [EtcdCoordinator(endpoints, name, f"n{i}", shard_count=SHARDS, ttl=ttl) for i in range(3)]


async def steady(coords: list[EtcdCoordinator]) -> None:
    """Start ``coords`` as leaders and materializers; wait for one leader and every shard
    owned once, evenly."""
    for c in coords:
        await c.start(lead=True, materialize=True, modes=["leader", "materializer"])
    await eventually(lambda: len(leaders(coords)) == 1 and balanced_exactly_once(coords), 10, "steady state")


async def test_killed_etcd_member_leaves_no_leadership_gap_over_ttl(
    etcd_cluster: EtcdCluster, cluster_name: str
) -> None:
    ttl = 3.0
    raft_leader, coords = on_the_raft_leader(etcd_cluster, cluster_name, ttl)
    try:
        await steady(coords)

        etcd_cluster.members[raft_leader].kill()
        killed = time.monotonic()
        gap_started: float | None = None
        longest_gap = 0.0
        tokens: list[int] = []
        while time.monotonic() - killed < ttl + 4:
            held = leaders(coords)
            assert len(held) <= 1, "two valid leaders"
            now = time.monotonic()
            if held:
                if gap_started is not None:
                    longest_gap = max(longest_gap, now - gap_started)
                    gap_started = None
                if not tokens or tokens[-1] != held[0][1].token:
                    tokens.append(held[0][1].token)
            elif gap_started is None:
                gap_started = now
            await asyncio.sleep(0.1)
        if gap_started is not None:
            longest_gap = max(longest_gap, time.monotonic() - gap_started)
        print(f"longest gap {longest_gap:.2f}s, tokens {tokens}")
        assert leaders(coords), "no leader at the end"
        assert longest_gap < ttl, f"no valid leader for {longest_gap:.2f}s"
        assert tokens == sorted(tokens)
        await eventually(lambda: balanced_exactly_once(coords), 10, "shards owned again")
    finally:
        await asyncio.gather(*(c.stop() for c in coords), return_exceptions=True)


@pytest.mark.serial  # its margins are wall time: 0.4 s round trips against 1 s of slack
async def test_a_slow_link_to_etcd_keeps_the_leases(make_coord: MakeCoord, etcd_server: EtcdServer) -> None:
    # Every answer 0.4 s away (a relay holding each chunk 0.2 s each way): slower than a
    # refresh attempt's interval, well inside the TTL. A refresh must wait for the answer
    # that is coming, not give each attempt up and lapse although etcd keeps answering.
    relay = Relay("127.0.0.1", etcd_server.client_port).start()
    try:
        ttl = 3.0
        a = make_coord("a", endpoints=[f"http://127.0.0.1:{relay.port}"], ttl=ttl)
        await a.start(lead=True, materialize=False, modes=["leader"])
        await eventually(lambda: a.leader_lease() is not None, 10, "a leads")
        first = a.leader_lease()
        assert first is not None
        relay.delay = 0.2  # from now on: only the refreshes (and the watch) cross the slow link
        held_since = time.monotonic()
        while time.monotonic() - held_since < 3 * ttl:  # three TTLs: every lease refreshed several times
            lease = a.leader_lease()
            assert lease is not None and lease.token == first.token, "leadership lapsed over a slow link"
            await asyncio.sleep(0.05)
        assert a.leadership_changes == 1
    finally:
        relay.stop()


RENEWED_WITHIN = 0.5  # seconds from a raft leader's election to every held lease renewed
LAPSED = "deadline passed without a successful refresh"  # the reason a lapsed lease is logged with


@pytest.mark.serial  # asserts how soon after an election the leases are renewed
@pytest.mark.timeout(150)
async def test_killed_raft_leader_member_costs_no_lease_that_outlives_the_election(
    etcd_cluster: EtcdCluster, caplog: pytest.LogCaptureFixture
) -> None:
    # etcd keeps every lease through its own leader's death (the new raft leader extends
    # them); so must the coordinators, for each lease whose local deadline is still ahead
    # when the new leader is elected: its role and shards are not dropped for want of a
    # renewal. With a 3-second TTL the deadline is 1-2 s after the kill and the election
    # takes 1-2 s, so a renewal has to be answered soon after the election ends. Before
    # a refresh started new attempts beside the waiting one, a renewal sent to a member
    # without a leader waited on it for up to a second after the election (etcd 3.4 looks
    # for a leader once per election timeout) and ran out the deadline: leadership and shards
    # lapsed in each of fifteen kills. (A node whose deadline came before the election
    # loses its session; the others' shards then move by rebalancing, which is not a lapse.)
    caplog.set_level(logging.INFO, logger="clockd.coord.etcd")
    checked_rounds = 0
    for rnd in range(8):  # until two rounds had a lease to check (an election may outlast all)
        if checked_rounds == 2:
            break
        checked_rounds += await _kill_the_raft_leader(etcd_cluster, caplog, f"kill{rnd}-{uuid.uuid4().hex[:8]}")
    assert checked_rounds, "no lease outlived an election in eight rounds: nothing was checked"


async def _kill_the_raft_leader(etcd_cluster: EtcdCluster, caplog: pytest.LogCaptureFixture, name: str) -> bool:
    """One round of the test above: three coordinators (TTL 3 s) in steady state, the raft
    leader killed right after the leadership's renewal, then restarted. Fails if a lease
    whose deadline outlived the election by RENEWED_WITHIN lapsed; says whether one did."""
    ttl = 3.0
    raft_leader, coords = on_the_raft_leader(etcd_cluster, name, ttl)
    try:
        await steady(coords)
        # Kill right after the leader's lease was renewed: its deadline is then 2 s ahead.
        ((_, before),) = leaders(coords)
        await eventually(lambda: any(lease.deadline > before.deadline for _, lease in leaders(coords)), 5,
                         "the leader's lease renewed")  # fmt: skip
        # Each node's leases at the kill: its session (every shard's deadline) and its leadership.
        deadlines = {(c.node_id, "shard_released"): c.shard_leases()[0].deadline for c in coords}
        deadlines.update({(c.node_id, "leadership_lost"): lease.deadline for c, lease in leaders(coords)})
        seen = len(caplog.records)
        etcd_cluster.members[raft_leader].kill()
        killed = time.monotonic()
        await asyncio.to_thread(etcd_cluster.leader_index, 10.0)
        elected = time.monotonic()
        while time.monotonic() - killed < ttl + 2:  # past every deadline held at the kill
            assert len(leaders(coords)) <= 1, "two valid leaders"
            await asyncio.sleep(0.05)
    finally:
        await asyncio.gather(*(c.stop() for c in coords), return_exceptions=True)
    etcd_cluster.members[raft_leader].restart()
    lapsed = {(getattr(r, "node", None), getattr(r, "action", None))
              for r in caplog.records[seen:] if getattr(r, "reason", None) == LAPSED}  # fmt: skip
    outlived = {key for key, deadline in deadlines.items() if deadline > elected + RENEWED_WITHIN}
    print(f"{name}: election {elected - killed:.2f}s after the kill; {len(outlived)} of {len(deadlines)} "
          f"leases outlived it by {RENEWED_WITHIN}s; lapsed {sorted(lapsed)}")  # fmt: skip
    assert not outlived & lapsed, f"lapsed although their deadline outlived the election: {outlived & lapsed}"
    return bool(outlived)


# -- stop() is bounded -----------------------------------------------------------------------

STOP_SLACK = 2.0  # seconds over STOP_BOUND for a loaded 2-core box


async def timed_stop(coord: EtcdCoordinator) -> float:
    """``coord.stop()``'s duration; fails the test if it overruns its documented bound."""
    start = time.monotonic()
    try:
        async with asyncio.timeout(STOP_BOUND + STOP_SLACK):
            await coord.stop()
    except TimeoutError:
        pytest.fail(f"stop() of {coord.node_id} did not return within {STOP_BOUND + STOP_SLACK:.0f}s")
    return time.monotonic() - start


async def test_stop_returns_within_its_bound_wherever_it_lands_in_start_up(make_coord: MakeCoord) -> None:
    # Regression: stop() hung for good when its cancellation reached the watch loop as
    # aetcd's watch creation completed (aetcd's wait_for drops it on Python 3.11, and the
    # loop then waited for events that never came). Five nodes per round, stopped at
    # staggered points of their first milliseconds: about one stop in twenty hung.
    for rnd in range(20):
        coords = [make_coord(f"r{rnd}n{i}") for i in range(5)]
        await asyncio.gather(*(c.start(lead=True, materialize=True, modes=["leader"]) for c in coords))

        async def stop_after(coord: EtcdCoordinator, delay: float) -> float:
            await asyncio.sleep(delay)  # where in the start-up the stop lands, not a wait for an event
            return await timed_stop(coord)

        took = await asyncio.gather(*(stop_after(c, i * 0.002 + rnd * 0.0005) for i, c in enumerate(coords)))
        assert max(took) <= STOP_BOUND + STOP_SLACK
        for c in coords:
            assert c.leader_lease() is None and c.shard_leases() == []
            assert await timed_stop(c) < 0.5  # a second stop is a no-op


@pytest.mark.parametrize("fault", ["frozen", "killed"])
async def test_stop_returns_within_its_bound_when_etcd_is_frozen_or_dead(
    make_coord: MakeCoord, own_etcd: EtcdServer, fault: str
) -> None:
    # A leader holding every shard, and a follower mid-campaign (its leader loop polls the
    # leader key every second), when etcd stops answering (SIGSTOP) or is gone (SIGKILL).
    a = make_coord("a", endpoints=own_etcd.endpoints)
    b = make_coord("b", endpoints=own_etcd.endpoints)
    await a.start(lead=True, materialize=True, modes=["leader", "materializer"])
    await eventually(
        lambda: a.leader_lease() is not None and len(a.shard_leases()) == SHARDS, 10, "a leads and owns every shard"
    )
    await b.start(lead=True, materialize=True, modes=["leader", "materializer"])
    if fault == "frozen":
        own_etcd.freeze()
    else:
        own_etcd.kill()
    try:
        took = await asyncio.gather(timed_stop(a), timed_stop(b))
        assert max(took) <= STOP_BOUND + STOP_SLACK
        assert not leaders([a, b]) and not ownership([a, b])  # nothing held once stop returns
        assert max(await asyncio.gather(timed_stop(a), timed_stop(b))) < 0.5
    finally:
        if fault == "frozen":
            own_etcd.thaw()


# -- stop() leaves nothing behind -------------------------------------------------------------


def open_channels() -> int:
    """gRPC channels of this process not closed (whoever still holds them)."""
    return sum(
        1 for o in gc.get_objects() if isinstance(o, grpc.aio.Channel) and o.get_state() != ChannelConnectivity.SHUTDOWN
    )


class Baseline:
    """What the process had before the test: tasks and open channels not the test's."""

    def __init__(self) -> None:
        self.tasks = asyncio.all_tasks()
        self.channels = open_channels()

    def leftover_tasks(self) -> set[asyncio.Task[object]]:
        current = asyncio.current_task()
        return {t for t in asyncio.all_tasks() if t not in self.tasks and t is not current}

    async def nothing_left(self) -> None:
        """No task the coordinator made and no gRPC channel it opened outlives its stop.

        Channels, not sockets: gRPC's core may keep a closed channel's TCP connection
        for ~15 s (until etcd answers its keepalive pings with a GOAWAY), with or
        without this coordinator's changes and with no Python object left to close."""
        await eventually(lambda: not self.leftover_tasks(), 3, f"no task left running: {self.leftover_tasks()}")
        await eventually(lambda: open_channels() <= self.channels, 3, "no gRPC channel left open")


async def test_status_after_stop_opens_no_client(make_coord: MakeCoord, own_etcd: EtcdServer) -> None:
    # Regression: status() after stop() made a new etcd client and never closed it (a
    # health probe racing the shutdown left a channel open for good).
    baseline = Baseline()
    a = make_coord("a", endpoints=own_etcd.endpoints)
    await a.start(lead=True, materialize=True, modes=["leader", "materializer"])
    await eventually(lambda: a.leader_lease() is not None, 10, "a leads")
    assert (await a.status()).reachable
    assert open_channels() > baseline.channels  # what nothing_left() looks for is seen
    await timed_stop(a)
    status = await a.status()
    assert not status.reachable and status.leader_node is None and status.members == ()
    await baseline.nothing_left()
    # An observer (clockctl status): status() without start(), then stop(), closes its client.
    observer = make_coord("observer", endpoints=own_etcd.endpoints)
    assert (await observer.status()).reachable
    await timed_stop(observer)
    assert not (await observer.status()).reachable
    await baseline.nothing_left()


async def test_stop_during_start_with_etcd_unreachable_ends_the_start(cluster_name: str) -> None:
    # SIGTERM while start() retries an etcd that refuses connections: start() must end
    # with the stop, not at its connect timeout, and leave nothing running.
    baseline = Baseline()
    coord = EtcdCoordinator([f"http://127.0.0.1:{free_port()}"], cluster_name, "a", connect_timeout=10.0)
    starting = asyncio.create_task(coord.start(lead=True, materialize=True, modes=["leader", "materializer"]))
    await asyncio.sleep(0.3)  # where the stop lands (start-up retrying), not a wait for an event
    await timed_stop(coord)
    with pytest.raises(CoordError, match="stopped"):
        async with asyncio.timeout(1.0):
            await starting
    assert coord.leader_lease() is None and coord.shard_leases() == []
    assert not (await coord.status()).reachable
    await baseline.nothing_left()


async def test_stop_during_start_with_etcd_frozen_leaves_nothing_registered(
    make_coord: MakeCoord, own_etcd: EtcdServer
) -> None:
    # SIGTERM while start() waits on a frozen etcd that answers only after the stop:
    # start() must not register, spawn its loops or reopen the client afterwards.
    baseline = Baseline()
    coord = make_coord("a", endpoints=own_etcd.endpoints)
    own_etcd.freeze()
    try:
        starting = asyncio.create_task(coord.start(lead=True, materialize=True, modes=["leader", "materializer"]))
        await asyncio.sleep(0.3)  # where the stop lands (a call to etcd in flight), not a wait for an event
        await timed_stop(coord)
    finally:
        own_etcd.thaw()
    with pytest.raises(CoordError, match="stopped"):
        async with asyncio.timeout(1.0):
            await starting
    observer = make_coord("observer", endpoints=own_etcd.endpoints)
    status = await observer.status()
    assert status.reachable and status.members == () and status.leader_node is None
    await timed_stop(observer)
    assert coord.leader_lease() is None and coord.shard_leases() == []
    await baseline.nothing_left()


async def test_stop_anywhere_in_start_up_leaves_nothing_behind(make_coord: MakeCoord, own_etcd: EtcdServer) -> None:
    # stop() concurrent with start() at staggered points of its first milliseconds (etcd
    # answering): either start() finished and the stop undid it, or start() raises; in
    # both cases no loop runs on, no member key stays, no connection stays open.
    baseline = Baseline()
    for rnd in range(4):
        coords = [make_coord(f"r{rnd}n{i}", endpoints=own_etcd.endpoints) for i in range(5)]
        starts = [
            asyncio.create_task(c.start(lead=True, materialize=True, modes=["leader", "materializer"])) for c in coords
        ]

        async def stop_after(coord: EtcdCoordinator, delay: float) -> float:
            await asyncio.sleep(delay)  # where in the start-up the stop lands, not a wait for an event
            return await timed_stop(coord)

        await asyncio.gather(*(stop_after(c, i * 0.004 + rnd * 0.001) for i, c in enumerate(coords)))
        async with asyncio.timeout(1.0):
            outcomes = await asyncio.gather(*starts, return_exceptions=True)
        for outcome in outcomes:
            assert outcome is None or (isinstance(outcome, CoordError) and "stopped" in str(outcome)), outcome
        assert not leaders(coords) and not ownership(coords)
    observer = make_coord("observer", endpoints=own_etcd.endpoints)
    status = await observer.status()
    assert status.reachable and status.members == () and status.leader_node is None, status
    await timed_stop(observer)
    await baseline.nothing_left()
