"""etcd adapter of the coordinator port: leadership, membership and shard ownership on etcd leases.

Keys, under ``P = /clockd/<cluster>``::

    P/leader              {"node": id, "lease": hex}   bound to the leader lease L
    P/members/<node>      {"node": id, "modes": [...], "standby"?: why, "clock"?: {...},
                           "capabilities"?: [...] on a worker}  bound to the node's session lease S
    P/shards/<s>/owner    node id                       bound to the same session lease S

Terms and tokens (notes/etcd.md §4):

* A role is taken with one transaction, ``create(key) == 0 → put(key, lease) + get(key)``;
  its fencing token is the key's ``create_revision``. etcd revisions are cluster-wide
  and monotonic, so every later term of a resource has a larger token.
* Each lease is refreshed every TTL/3. After a refresh sent at ``t_send`` that returns
  ``TTL > 0`` the local deadline is ``t_send + TTL − 1 s`` on the monotonic clock,
  which is always before the server-side expiry. ``TTL ≤ 0`` means lost now; until an
  answer comes, a new attempt starts every 0.25 s beside those still waiting, up to the
  deadline, where the role is lost: a renewal an etcd member holds while it has no raft
  leader then does not hold the lease past the election that gives it one, and a slow
  link's answers are still waited for (``RETRY_INTERVAL``).
* A loss — refresh says TTL ≤ 0, the deadline passes, the watch shows the key deleted
  or re-created, ``lost()`` from a bounced fenced write, membership moving a shard
  elsewhere — first drops the role in-process, synchronously, before any ``await``;
  only then is the old lease revoked (best effort, so a successor need not wait for
  the TTL) and, for leadership, a new campaign made with a **new** lease. A token is
  never reused after a loss.
* Owner keys share the session lease with the member key on purpose: ownership can
  never outlive membership, and one refresh loop keeps every shard alive.

Shards: every node computes the same assignment from the sorted ids of the live members
registered with the ``materializer`` mode (``assign_shards``: rendezvous hashing bounded
to an even split, so a join or leave moves few shards and each node gets ⌊N/m⌋ or ⌈N/m⌉).
A node releases what it no longer should own (drop in-process, then delete the key
compare-and-delete by token) and claims what it should own only once the previous
owner's key is gone (``create == 0``). So two nodes never both hold a valid lease on a
shard; the fence in PostgreSQL remains the final guard.

The member record also carries the node's latest clock offset from the database
(``publish_clock``: ``{"offset": s, "limit": s, "at": ISO of the database's clock}``),
rewritten after each measurement of its clock watch (every 10 s), so ``clockctl status``
and the dashboard show every node's offset; it lives and dies with the session, so a
dead node's stale reading disappears with it.

Followers learn of changes through one watch on ``P/`` and, as a backstop for a
broken watch, re-read ``P/`` every second.

When etcd is unreachable the leases lapse at their deadlines (the leader and the
materializers stop acting), background tasks retry with a capped backoff and resume
when etcd returns. Transitions are logged with ``extra={"action": ...}``:
``etcd_unreachable``, ``etcd_reachable``, ``leadership_acquired``, ``leadership_lost``,
``shard_acquired``, ``shard_released``. Counters for metrics: ``leadership_changes``,
``shard_moves``, ``etcd_up``.

All methods run on the event loop that called ``start()``; ``lost()``,
``leader_lease()`` and ``shard_leases()`` are synchronous and never block.
aetcd is untyped: everything it returns is converted to the typed values below inside
``_Etcd``, so no ``Any`` leaves this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import logging
import math
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

# gRPC's fork handlers (on by default in grpcio) run in every fork() of this process. The
# worker starts a job with user:/group: with fork, not vfork (CPython does not vfork
# with setuid/setgid; before 2026-12-07 jobs with resource limits forked too, for their
# preexec_fn — the start gate replaced it), and while gRPC's threads were busy
# the handlers crashed 7 % of those children with SIGSEGV before exec: team jobs went
# DEAD at random in a cluster. No forked child of clockd ever uses gRPC, so the handlers
# are switched off, before grpc loads (it reads the variable then), whatever the
# environment says (tests/integration/test_fork_with_grpc.py).
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"

import aetcd  # after the variable above: grpc reads it when it loads

from clockd.coord import LEADER, ClockReading, CoordStatus, Lease, Member, shard_resource
from clockd.core.capabilities import advertised
from clockd.core.clock import Clock, SystemClock
from clockd.errors import CoordError

log = logging.getLogger(__name__)

MATERIALIZER = "materializer"

RPC_TIMEOUT = 2.0  # every etcd call is bounded; a frozen etcd must not hang a task
MARGIN = 1.0  # local deadline = t_send + TTL - MARGIN
# A refresh tries until its local deadline; a new attempt starts every RETRY_INTERVAL
# while earlier ones still wait for their answer (each bounded by RPC_TIMEOUT and the time
# left), and the first answer ends them all. Not one attempt at a time, because an etcd
# member without a raft leader holds a lease renewal and looks for a leader again only
# once per election timeout (etcd 3.4's waitLeader sleeps a whole election timeout, 1 s by
# default, between looks): one renewal sent while the cluster elected a new leader waited
# out the rest of the deadline although the leader was there well before it, and every
# node whose deadline fell in that second lost its leases (leadership and all its shards
# moved although etcd had kept every lease). Not short attempts given up in turn either:
# over a link slower than the interval no answer would ever be waited for.
RETRY_INTERVAL = 0.25
POLL_INTERVAL = 1.0  # backstop re-read of P/ when the watch is quiet or broken
MAX_BACKOFF = 2.0  # cap of the retry backoff while etcd is unreachable
REVOKE_TIMEOUT = 1.0
CONNECT_TIMEOUT = 5.0
# stop() is bounded by the sum of these, whatever etcd does (answers, refuses, hangs):
STOP_TASKS_TIMEOUT = 2.0  # the background tasks end (re-cancelled every RECANCEL_INTERVAL)
RECANCEL_INTERVAL = 0.25
CLOSE_TIMEOUT = 1.0  # the client's channel and watch stream close
STOP_BOUND = STOP_TASKS_TIMEOUT + REVOKE_TIMEOUT + CLOSE_TIMEOUT

# notes/etcd.md §4. keepalive_timeout alone does not fire with grpcio 1.85; the HTTP/2
# ping timeout brings dead-peer detection down to ~6-7 s. Keepalive pings more often
# than every 5 s are refused by etcd's default --grpc-keepalive-min-time. The reconnect
# backoff is capped so that a long outage does not delay the resume by minutes.
GRPC_OPTIONS: dict[str, int] = {
    "grpc.keepalive_time_ms": 5000,
    "grpc.keepalive_timeout_ms": 2000,
    "grpc.keepalive_permit_without_calls": 1,
    "grpc.http2.max_pings_without_data": 0,
    "grpc.http2.ping_timeout_ms": 2000,
    "grpc.initial_reconnect_backoff_ms": 200,
    "grpc.min_reconnect_backoff_ms": 200,
    "grpc.max_reconnect_backoff_ms": 2000,
}

# Errors that mean "etcd did not answer" (as opposed to "etcd answered no").
_UNREACHABLE: tuple[type[BaseException], ...] = (
    aetcd.ConnectionFailedError,
    aetcd.ConnectionTimeoutError,
    aetcd.WatchTimeoutError,
    TimeoutError,
    OSError,
)


class EtcdUnavailable(CoordError):
    """etcd did not answer in time."""


# -- endpoints --------------------------------------------------------------------------


def _parse_endpoint(endpoint: str) -> tuple[str, int]:
    text = endpoint.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme != "http":
        raise CoordError(f"etcd endpoint {endpoint!r}: only http:// endpoints are supported")
    try:
        port = parts.port or 2379
    except ValueError as exc:
        raise CoordError(f"etcd endpoint {endpoint!r}: bad port") from exc
    if not parts.hostname:
        raise CoordError(f"etcd endpoint {endpoint!r}: no host")
    return parts.hostname, port


def _resolve(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host)
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise CoordError(f"etcd endpoint host {host!r} does not resolve: {exc}") from exc
    addrs = [ipaddress.ip_address(info[4][0]) for info in infos]
    v4 = [a for a in addrs if a.version == 4]
    return (v4 or addrs)[0]


def channel_target(endpoints: Sequence[str]) -> str:
    """The gRPC target for ``endpoints``: ``host:port`` for one, and for several one
    ``ipv4:a:p,b:q`` (or ``ipv6:[a]:p,...``) target, so that a single channel fails
    over between members."""
    if not endpoints:
        raise CoordError("no etcd endpoints given")
    parsed = [_parse_endpoint(e) for e in endpoints]
    if len(parsed) == 1:
        host, port = parsed[0]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    resolved = [(_resolve(h), p) for h, p in parsed]
    versions = {a.version for a, _ in resolved}
    if versions == {4}:
        return "ipv4:" + ",".join(f"{a}:{p}" for a, p in resolved)
    if versions == {6}:
        return "ipv6:" + ",".join(f"[{a}]:{p}" for a, p in resolved)
    raise CoordError("etcd endpoints mix IPv4 and IPv6 addresses; use one family")


# -- shard assignment ------------------------------------------------------------------------


def _score(node: str, shard: int) -> int:
    digest = hashlib.blake2b(f"{node}/{shard}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign_shards(members: Sequence[str], shard_count: int) -> dict[str, frozenset[int]]:
    """Deterministic shard → member assignment that every node computes alike.

    Rendezvous (highest-random-weight) hashing, bounded so the split is even: each of
    the ``m`` members gets ``shard_count // m`` shards, and ``shard_count % m`` of them
    one more. A join or leave moves few shards, not all of them.
    """
    nodes = sorted(set(members))
    if not nodes:
        return {}
    base, extra = divmod(shard_count, len(nodes))
    counts = dict.fromkeys(nodes, 0)
    owned: dict[str, set[int]] = {n: set() for n in nodes}
    at_extra = 0
    for shard in range(shard_count):
        for node in sorted(nodes, key=lambda n: (_score(n, shard), n), reverse=True):
            count = counts[node]
            if count < base or (count == base and at_extra < extra):
                if count == base:
                    at_extra += 1
                counts[node] = count + 1
                owned[node].add(shard)
                break
    return {n: frozenset(s) for n, s in owned.items()}


# -- typed wrapper around aetcd --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _KV:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True, slots=True)
class _Event:
    deleted: bool
    kv: _KV


def _kv(raw: Any) -> _KV:
    return _KV(
        key=bytes(raw.key).decode("utf-8", "replace"),
        value=bytes(raw.value),
        create_revision=int(raw.create_revision),
        mod_revision=int(raw.mod_revision),
        lease=int(raw.lease),
    )


class _Watch:
    def __init__(self, raw: Any, translate: Callable[[BaseException], CoordError]) -> None:
        self._raw = raw
        self._translate = translate

    async def events(self) -> AsyncIterator[_Event]:
        try:
            async for ev in self._raw:
                yield _Event(deleted=str(ev.kind) == "DELETE", kv=_kv(ev.kv))
        except (aetcd.ClientError, *_UNREACHABLE) as exc:
            raise self._translate(exc) from exc

    async def cancel(self) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(REVOKE_TIMEOUT):
                await self._raw.cancel()


class _Etcd:
    """The only place that touches aetcd. Every call is bounded by ``budget`` seconds and
    raises ``CoordError`` (``EtcdUnavailable`` when etcd did not answer)."""

    def __init__(self, target: str, on_reachable: Callable[[bool, str], None]) -> None:
        # aetcd builds its target as f"{host}:{port}"; splitting at the last colon
        # hands it a multi-address target unchanged (notes/etcd.md §4).
        host, _, port = target.rpartition(":")
        self._client: Any = aetcd.Client(host=host, port=int(port), timeout=RPC_TIMEOUT, options=dict(GRPC_OPTIONS))
        self._tx: Any = self._client.transactions
        self._on_reachable = on_reachable
        # Once closed, never reopened: aetcd reconnects lazily on the next call, so a
        # call made after close() (a start-up or a status() racing stop()) would open a
        # channel that nothing closes.
        self._closed = False

    def _translate(self, exc: BaseException) -> CoordError:
        if isinstance(exc, _UNREACHABLE):
            self._on_reachable(False, str(exc) or type(exc).__name__)
            return EtcdUnavailable(f"etcd unreachable: {str(exc) or type(exc).__name__}")
        self._on_reachable(True, "")
        return CoordError(f"etcd error: {exc}")

    async def _call(self, aw: Awaitable[Any], budget: float) -> Any:
        if self._closed:
            if asyncio.iscoroutine(aw):
                aw.close()  # never started: no "never awaited" warning
            raise CoordError("etcd client closed: the coordinator is stopping")
        task = asyncio.current_task()
        asked = task.cancelling() if task is not None else 0
        try:
            async with asyncio.timeout(max(budget, 0.05)):
                result = await aw
        except (aetcd.ClientError, *_UNREACHABLE) as exc:
            raise self._translate(exc) from exc
        except asyncio.CancelledError:
            if task is not None and task.cancelling() > asked:
                raise  # this task was cancelled
            # gRPC ends the calls in flight on a channel closed under them (stop()) with a
            # CancelledError: that is a failed call, not a cancellation of the caller.
            raise CoordError("etcd client closed during the call: the coordinator is stopping") from None
        if task is not None and task.cancelling() > asked:
            # aetcd waits with asyncio.wait_for, which on Python 3.11 drops a cancellation
            # that arrives as its future completes: the call returns although we were
            # cancelled. Honour it here, or a loop cancelled by stop() runs on (the watch
            # loop then waits for events forever, and stop() with it).
            raise asyncio.CancelledError
        self._on_reachable(True, "")
        return result

    async def get(self, key: str, budget: float) -> _KV | None:
        raw = await self._call(self._client.get(key.encode()), budget)
        return None if raw is None else _kv(raw)

    async def get_prefix(self, prefix: str, budget: float) -> tuple[int, list[_KV]]:
        raw = await self._call(self._client.get_prefix(prefix.encode()), budget)
        return int(raw.header.revision), [_kv(kv) for kv in raw.kvs]

    async def grant(self, ttl: int, budget: float) -> tuple[int, int]:
        raw = await self._call(self._client.lease(ttl), budget)
        return int(raw.id), int(raw.ttl)

    async def refresh(self, lease_id: int, budget: float) -> int:
        raw = await self._call(self._client.refresh_lease(lease_id), budget)
        return 0 if raw is None else int(raw.TTL)

    async def revoke(self, lease_id: int, budget: float) -> None:
        try:
            await self._call(self._client.revoke_lease(lease_id), budget)
        except EtcdUnavailable:
            raise
        except CoordError as exc:
            if "not found" not in str(exc):  # already expired or revoked: done
                raise

    async def put(self, key: str, value: bytes, lease_id: int, budget: float) -> None:
        await self._call(self._client.put(key.encode(), value, lease=lease_id), budget)

    async def create(self, key: str, value: bytes, lease_id: int, budget: float) -> tuple[bool, _KV | None]:
        """``create(key) == 0 → put(key, value, lease) + get(key)``, else ``get(key)``.
        Returns whether it was created and the key as it is now."""
        k = key.encode()
        tx = self._tx
        ok, responses = await self._call(
            self._client.transaction(
                compare=[tx.create(k) == 0],
                success=[tx.put(k, value, lease=lease_id), tx.get(k)],
                failure=[tx.get(k)],
            ),
            budget,
        )
        current: _KV | None = None
        for resp in responses:
            if isinstance(resp, list) and resp:
                current = _kv(resp[0][1])
        return bool(ok), current

    async def delete_if(self, key: str, create_revision: int, budget: float) -> bool:
        """Delete ``key`` only if it is still the incarnation created at ``create_revision``."""
        k = key.encode()
        tx = self._tx
        ok, _ = await self._call(
            self._client.transaction(compare=[tx.create(k) == create_revision], success=[tx.delete(k)], failure=[]),
            budget,
        )
        return bool(ok)

    async def watch_prefix(self, prefix: str, budget: float) -> _Watch:
        raw = await self._call(self._client.watch_prefix(prefix.encode()), budget)
        return _Watch(raw, self._translate)

    async def close(self) -> None:
        # Not asyncio.timeout: aetcd's watcher shutdown swallows the CancelledError a
        # timeout would deliver (``except CancelledError: pass``), and what follows it
        # would then run unbounded. A separate task is abandoned at the deadline instead.
        self._closed = True
        await _bounded(self._client.close(), CLOSE_TIMEOUT, "close the etcd client")


# -- bounded waits -----------------------------------------------------------------------

# Tasks given up on (at a deadline, or a refresh's attempts no longer waited for);
# referenced until they end so that they are not collected while pending (asyncio holds
# only weak references to tasks).
_abandoned: set[asyncio.Future[Any]] = set()


def _let_go(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and keep it referenced until it ends, its outcome ignored."""
    task.cancel()
    _abandoned.add(task)
    task.add_done_callback(_forget)


def _abandon(task: asyncio.Future[Any], what: str, seconds: float) -> None:
    _let_go(task)
    log.warning(
        "gave up waiting after %.1fs to %s",
        seconds,
        what,
        extra={"action": "etcd_stop_abandoned", "what": what},
    )


def _forget(task: asyncio.Future[Any]) -> None:
    _abandoned.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: how an abandoned step ended no longer matters


async def _bounded(aw: Awaitable[Any], seconds: float, what: str) -> None:
    """Run ``aw`` for at most ``seconds`` and ignore its outcome. The bound does not rely
    on ``aw`` honouring cancellation: at the deadline it is cancelled and left behind."""
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        _abandon(task, what, seconds)
    elif not task.cancelled():
        task.exception()  # retrieved: errors are ignored here on purpose (best effort)


async def _cancel_all(tasks: Sequence[asyncio.Task[None]], seconds: float) -> None:
    """Cancel ``tasks`` and wait at most ``seconds`` for them to end. A cancellation a
    library swallowed is delivered again every ``RECANCEL_INTERVAL``; tasks still running
    at the deadline are left behind (cancelled, logged)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - loop.time()
        if left <= 0:
            for task in pending:
                _abandon(task, f"end task {task.get_name()}", seconds)
            return
        _, pending = await asyncio.wait(pending, timeout=min(RECANCEL_INTERVAL, left))


# -- the coordinator ---------------------------------------------------------------------


async def _wait(event: asyncio.Event, seconds: float) -> None:
    """Wait until ``event`` is set or ``seconds`` pass, then clear it.

    ``asyncio.timeout`` rather than ``wait_for``: on Python 3.11 ``wait_for`` swallows a
    cancellation that arrives as the awaited event fires, and ``stop()`` does exactly
    that (it sets the wake events, then cancels)."""
    if seconds > 0 and not event.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await event.wait()
    event.clear()


class _Backoff:
    def __init__(self, first: float = 0.25, cap: float = MAX_BACKOFF) -> None:
        self._first, self._cap, self._next = first, cap, first

    def next(self) -> float:
        delay = self._next
        self._next = min(self._cap, self._next * 2)
        return delay

    def reset(self) -> None:
        self._next = self._first


class EtcdCoordinator:
    """The coordinator port on etcd. See the module docstring for the protocol.

    Public counters (read them for metrics): ``leadership_changes`` (acquisitions and
    losses of leadership by this node), ``shard_moves`` (shards acquired or released by
    this node), ``etcd_up`` (the last etcd call got an answer).
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        cluster: str,
        node_id: str,
        shard_count: int = 64,
        ttl: float = 10.0,
        clock: Clock | None = None,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        for what, value in (("cluster", cluster), ("node id", node_id)):
            if not value or "/" in value:
                raise CoordError(f"{what} {value!r}: must be non-empty and contain no '/'")
        if shard_count < 1:
            raise CoordError("shard_count must be at least 1")
        if isinstance(endpoints, str):  # "http://a:2379,http://b:2379" from a flag or env
            endpoints = [e for e in endpoints.split(",") if e.strip()]
        self.endpoints = tuple(endpoints)
        self.cluster = cluster
        self.node_id = node_id
        self.shard_count = shard_count
        self.ttl = ttl
        self.connect_timeout = connect_timeout
        self._clock: Clock = clock or SystemClock()
        self._target = channel_target(self.endpoints)
        self._ttl_request = max(2, math.ceil(ttl))  # etcd grants whole seconds, at least 2

        self._prefix = f"/clockd/{cluster}/"
        self._k_leader = self._prefix + "leader"
        self._members_prefix = self._prefix + "members/"
        self._shards_prefix = self._prefix + "shards/"

        self.leadership_changes = 0
        self.shard_moves = 0
        self.etcd_up = False
        self._reachability_known = False

        self._etcd: _Etcd | None = None
        self._running = False
        # stop() was called (and start() not since): no client is made any more, status()
        # answers "unreachable" without connecting, a start-up in progress is abandoned.
        self._stopped = False
        self._starting: asyncio.Task[None] | None = None  # start()'s connect-and-register
        self._lead = False
        self._materialize = False
        self._modes: tuple[str, ...] = ()
        self._tasks: list[asyncio.Task[None]] = []

        # leadership: token is None unless this node holds it
        self._leader_token: int | None = None
        self._leader_lease_id: int | None = None
        self._leader_deadline = 0.0
        self._leader_ttl = self._ttl_request

        # session: member key + owner keys
        self._session_id: int | None = None
        self._session_deadline = 0.0
        self._session_ttl = self._ttl_request
        self._owned: dict[int, int] = {}  # shard -> token
        # stand_by(): while set, hold no role and advertise no leader/materializer mode
        self._standby: str | None = None
        self._member_stale = False  # the member key does not show _standby / _clock_reading yet
        self._clock_reading: ClockReading | None = None  # publish_clock(): shown in the member key

        # leases dropped in-process whose server side we still want to revoke
        self._orphans: dict[int, float] = {}  # lease id -> give up at (monotonic)

        self._leader_wake = asyncio.Event()
        self._shard_wake = asyncio.Event()
        self._session_wake = asyncio.Event()

    # -- the port ----------------------------------------------------------------------

    async def start(self, *, lead: bool, materialize: bool, modes: Sequence[str]) -> None:
        """See the port. A ``stop()`` during the start-up (SIGTERM while etcd is slow or
        down) ends it: ``start()`` then raises ``CoordError`` ("stopped during start-up")
        at once, having made no background task and holding nothing. A cancelled
        ``start()`` stops the coordinator the same way before it re-raises."""
        if self._running or self._starting is not None:
            raise CoordError("coordinator already started")
        self._stopped = False
        self._lead, self._materialize = lead, materialize
        # The assignment counts members registered with "materializer"; register it
        # exactly when this node will claim shards, or shards would be left unowned.
        mode_list = [m for m in modes if m != MATERIALIZER]
        if materialize:
            mode_list.append(MATERIALIZER)
        self._modes = tuple(mode_list)

        loop = asyncio.get_running_loop()
        # A task of its own, so that stop() can cancel the start-up without cancelling
        # the caller of start().
        connect = loop.create_task(self._connect(), name=f"clockd-coord-connect-{self.node_id}")
        self._starting = connect
        try:
            await asyncio.wait({connect})
        except asyncio.CancelledError:
            await self.stop()
            raise
        finally:
            self._starting = None
        if self._stopped:
            # stop() ran meanwhile: it cancelled the start-up, or found it done and
            # dropped and revoked what it had registered. Checked with no await before
            # the tasks are made, so a stop() cannot slip in between.
            if not connect.cancelled():
                connect.exception()  # retrieved: the stop is what start() reports
            raise CoordError("coordinator stopped during start-up")
        connect.result()  # CoordError when etcd stayed unreachable

        self._running = True
        names = {"session": self._session_loop(), "watch": self._watch_loop()}
        if lead:
            names["leader"] = self._leader_loop()
        if materialize:
            names["shards"] = self._shard_loop()
            self._shard_wake.set()
        self._tasks = [
            loop.create_task(coro, name=f"clockd-coord-{name}-{self.node_id}") for name, coro in names.items()
        ]

    async def _connect(self) -> None:
        """Reach etcd and register the member key, retrying until ``connect_timeout``."""
        etcd = self._client()
        # Waiting for I/O is measured on the loop's clock; the injected clock is for lease
        # deadlines (a manual clock in a test must not make this loop spin forever).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        while True:
            try:
                await etcd.get(self._k_leader, min(RPC_TIMEOUT, max(deadline - loop.time(), 0.05)))
                await self._register(min(RPC_TIMEOUT, max(deadline - loop.time(), 0.5)))
                break
            except CoordError as exc:
                if loop.time() >= deadline:
                    await self._close_client()
                    raise CoordError(
                        f"etcd unreachable at {', '.join(self.endpoints)}: start etcd or pass --etcd ({exc})"
                    ) from exc
                await asyncio.sleep(min(0.2, max(deadline - loop.time(), 0.0)))

    async def stop(self) -> None:
        """Release everything and close the client. Returns within ``STOP_BOUND`` seconds
        (4 s) whatever etcd does — answering, refusing connections, or frozen — and at
        once when called again: roles are dropped in-process first, so nothing is held
        when it returns even if etcd never hears of it (the leases then expire by TTL).
        It ends what ``start()`` made, a start-up still in progress included, and no
        client is opened after it (``status()`` then answers unreachable)."""
        self._stopped = True
        self._running = False
        # 1. drop every role in-process before any await
        self._drop_leader("stopping")
        self._drop_session("stopping")
        # 2. stop the background tasks and a start-up in progress (anything in flight is
        # fenced by its token)
        tasks, self._tasks = self._tasks, []
        if self._starting is not None and not self._starting.done():
            tasks.append(self._starting)
        await _cancel_all(tasks, STOP_TASKS_TIMEOUT)
        # a start-up may have registered its session as it ended: that goes too
        self._drop_session("stopping")
        # 3. revoke, so successors take over in milliseconds instead of a TTL
        if self._etcd is not None and self._orphans:
            orphans, self._orphans = list(self._orphans), {}
            etcd = self._etcd
            await _bounded(
                asyncio.gather(*(etcd.revoke(lid, REVOKE_TIMEOUT) for lid in orphans), return_exceptions=True),
                REVOKE_TIMEOUT,
                "revoke the leases",
            )
        await self._close_client()

    def leader_lease(self) -> Lease | None:
        token = self._leader_token
        if token is None:
            return None
        deadline = self._leader_deadline
        if self._now() >= deadline:
            return None
        return Lease(LEADER, token, deadline)

    def shard_leases(self) -> list[Lease]:
        if self._session_id is None or not self._owned:
            return []
        deadline = self._session_deadline
        if self._now() >= deadline:
            return []
        return [Lease(shard_resource(s), t, deadline) for s, t in sorted(self._owned.items())]

    def lost(self, lease: Lease) -> None:
        if lease.resource == LEADER:
            if self._leader_token == lease.token:
                self._drop_leader("fenced out")
            return
        shard = lease.shard
        if shard is not None and self._owned.get(shard) == lease.token:
            self._drop_shard(shard, "fenced out")
            self._shard_wake.set()

    def stand_by(self, reason: str | None) -> None:
        if (reason is None) == (self._standby is None):
            return  # no transition (a new reason for the same stand-by changes nothing)
        self._standby = reason
        if reason is not None:
            self._drop_leader(f"standing by: {reason}")
            for shard in sorted(self._owned):
                self._drop_shard(shard, "standing by")
        self._member_stale = True
        self._shard_wake.set()
        self._leader_wake.set()

    def publish_clock(self, reading: ClockReading) -> None:
        self._clock_reading = reading
        self._member_stale = True
        self._session_wake.set()  # the session loop rewrites the member key

    def _member_value(self) -> bytes:
        """The member key's value. Standing by, the node does not list the leader and
        materializer modes, so no node assigns it shards, and says why. A worker lists
        the capabilities it honours (clockd.core.capabilities)."""
        modes = [m for m in self._modes if self._standby is None or m not in (MATERIALIZER, "leader")]
        doc: dict[str, object] = {"node": self.node_id, "modes": modes}
        if caps := advertised(self._modes):
            doc["capabilities"] = list(caps)
        if self._standby is not None:
            doc["standby"] = self._standby
        if (clock := self._clock_reading) is not None:
            doc["clock"] = {"offset": clock.offset, "limit": clock.limit, "at": clock.measured_at.isoformat()}
        return json.dumps(doc).encode()

    async def _put_member(self, session: int) -> None:
        """Rewrite the member key if it is stale (a stand-by or a clock reading since)."""
        if not self._member_stale:
            return
        self._member_stale = False
        try:
            await self._client().put(self._members_prefix + self.node_id, self._member_value(), session, RPC_TIMEOUT)
        except CoordError:
            self._member_stale = True
            raise

    async def status(self) -> CoordStatus:
        """What etcd says now; unreachable (without connecting) once ``stop()`` was called."""
        try:
            _, kvs = await self._client().get_prefix(self._prefix, RPC_TIMEOUT)
        except CoordError:
            return CoordStatus(reachable=False, leader_node=None, leader_token=None)
        leader_node: str | None = None
        leader_token: int | None = None
        modes: dict[str, tuple[str, ...]] = {}
        standby: dict[str, str] = {}
        caps: dict[str, tuple[str, ...]] = {}
        clocks: dict[str, ClockReading] = {}
        shards: dict[str, list[int]] = {}
        for kv in kvs:
            if kv.key == self._k_leader:
                leader_node = str(_json(kv.value).get("node", "")) or None
                leader_token = kv.create_revision
            elif kv.key.startswith(self._members_prefix):
                info = _json(kv.value)
                node = kv.key[len(self._members_prefix) :]
                raw_modes = info.get("modes")
                modes[node] = tuple(str(m) for m in raw_modes) if isinstance(raw_modes, list) else ()
                if isinstance(info.get("standby"), str):
                    standby[node] = str(info["standby"])
                raw_caps = info.get("capabilities")
                caps[node] = tuple(str(c) for c in raw_caps) if isinstance(raw_caps, list) else ()
                if (reading := _clock_reading(info.get("clock"))) is not None:
                    clocks[node] = reading
            else:
                shard = self._owner_shard(kv.key)
                if shard is not None:
                    shards.setdefault(kv.value.decode("utf-8", "replace"), []).append(shard)
        members = tuple(
            Member(
                node,
                modes.get(node, ()),
                tuple(sorted(shards.get(node, ()))),
                standby.get(node),
                caps.get(node, ()),
                clocks.get(node),
            )
            for node in sorted(set(modes) | set(shards))
        )
        return CoordStatus(reachable=True, leader_node=leader_node, leader_token=leader_token, members=members)

    # -- in-process state changes (synchronous: no await between check and act) ---------

    def _drop_leader(self, reason: str) -> None:
        token = self._leader_token
        if token is None:
            return
        self._leader_token = None
        self._leader_deadline = 0.0
        if self._leader_lease_id is not None:
            self._orphan(self._leader_lease_id, self._leader_ttl)
        self._leader_lease_id = None
        self.leadership_changes += 1
        log.log(
            logging.INFO if reason == "stopping" else logging.WARNING,
            "leadership lost (%s), token %d",
            reason,
            token,
            extra={"action": "leadership_lost", "node": self.node_id, "token": token, "reason": reason},
        )
        self._leader_wake.set()

    def _drop_shard(self, shard: int, reason: str) -> None:
        token = self._owned.pop(shard, None)
        if token is None:
            return
        self.shard_moves += 1
        log.info(
            "shard %d released (%s), token %d",
            shard,
            reason,
            token,
            extra={"action": "shard_released", "node": self.node_id, "shard": shard, "token": token, "reason": reason},
        )

    def _drop_session(self, reason: str) -> None:
        for shard in sorted(self._owned):
            self._drop_shard(shard, reason)
        if self._session_id is not None:
            self._orphan(self._session_id, self._session_ttl)
        self._session_id = None
        self._session_deadline = 0.0
        self._session_wake.set()
        self._shard_wake.set()

    def _orphan(self, lease_id: int, ttl: int) -> None:
        # Past its TTL (plus slack) the server has dropped it anyway.
        self._orphans[lease_id] = self._now() + ttl + 2 * RPC_TIMEOUT

    def _reachable(self, up: bool, detail: str) -> None:
        if up == self.etcd_up and self._reachability_known:
            return
        self._reachability_known = True
        self.etcd_up = up
        if up:
            log.info(
                "etcd reachable at %s",
                ", ".join(self.endpoints),
                extra={"action": "etcd_reachable", "node": self.node_id},
            )
        else:
            log.warning(
                "etcd unreachable at %s: %s",
                ", ".join(self.endpoints),
                detail,
                extra={"action": "etcd_unreachable", "node": self.node_id, "error": detail},
            )

    # -- background tasks --------------------------------------------------------------------

    async def _leader_loop(self) -> None:
        backoff = _Backoff()
        while self._running:
            if self._leader_token is not None:
                await self._hold_leader()
                continue
            await self._revoke_orphans()
            if self._standby is not None:
                await _wait(self._leader_wake, POLL_INTERVAL)
                continue
            try:
                won = await self._campaign()
            except CoordError:
                await _wait(self._leader_wake, backoff.next())
                continue
            backoff.reset()
            if not won:
                # The watch wakes us on DELETE of P/leader; the poll is the backstop.
                await _wait(self._leader_wake, POLL_INTERVAL)

    async def _campaign(self) -> bool:
        etcd = self._client()
        if await etcd.get(self._k_leader, RPC_TIMEOUT) is not None:
            return False
        t_send = self._now()
        lease_id, ttl = await etcd.grant(self._ttl_request, RPC_TIMEOUT)
        self._orphan(lease_id, ttl)  # until it is ours for good
        value = json.dumps({"node": self.node_id, "lease": f"{lease_id:x}"}).encode()
        ok, kv = await etcd.create(self._k_leader, value, lease_id, RPC_TIMEOUT)
        if not ok or kv is None or not self._running or self._leader_token is not None or self._standby:
            await self._revoke_orphans()
            return False
        self._orphans.pop(lease_id, None)
        self._leader_lease_id = lease_id
        self._leader_ttl = ttl
        self._leader_deadline = t_send + ttl - MARGIN
        self._leader_token = kv.create_revision
        self.leadership_changes += 1
        log.info(
            "leadership acquired, token %d",
            kv.create_revision,
            extra={"action": "leadership_acquired", "node": self.node_id, "token": kv.create_revision},
        )
        return True

    async def _hold_leader(self) -> None:
        token, lease_id = self._leader_token, self._leader_lease_id
        if token is None or lease_id is None:
            return
        interval = self._leader_ttl / 3
        next_refresh = self._now() + interval

        def holding() -> bool:
            return self._leader_token == token

        while holding():
            await _wait(self._leader_wake, next_refresh - self._now())
            if not holding():
                return
            if self._now() < next_refresh:
                continue  # woken by an unrelated event
            result = await self._refresh(lease_id, lambda: self._leader_deadline, holding)
            if not holding():
                return
            if isinstance(result, str):
                self._drop_leader(result)
                return
            t_send, ttl = result
            self._leader_deadline = t_send + ttl - MARGIN
            next_refresh = t_send + interval

    async def _refresh(
        self, lease_id: int, deadline: Callable[[], float], holding: Callable[[], bool]
    ) -> tuple[float, int] | str:
        """Refresh until it succeeds (→ (t_send, TTL)) or the role is lost (→ reason).

        Attempts overlap (see RETRY_INTERVAL): one starts at once, then one every
        RETRY_INTERVAL until an answer comes; an attempt that fails at once (refused,
        no route) is not repeated sooner. The deadline an answer gives is counted from
        that attempt's own send, as for a single one."""
        etcd = self._client()
        pending: dict[asyncio.Task[int], float] = {}  # attempts in flight → their t_send
        next_send = self._now()
        try:
            while holding():
                now = self._now()
                left = deadline() - now
                if left <= 0:
                    return "deadline passed without a successful refresh"
                if now >= next_send:
                    pending[asyncio.create_task(etcd.refresh(lease_id, min(RPC_TIMEOUT, left)))] = now
                    next_send = now + RETRY_INTERVAL
                wait = max(0.0, min(next_send, deadline()) - self._now())
                if not pending:
                    await asyncio.sleep(wait)
                    continue
                done, _ = await asyncio.wait(pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                answers: list[tuple[float, int]] = []
                for attempt in done:
                    t_send = pending.pop(attempt)
                    with contextlib.suppress(CoordError):  # failed: the others or the next try
                        answers.append((t_send, attempt.result()))
                if any(ttl <= 0 for _, ttl in answers):
                    return "lease expired"
                if answers:
                    return max(answers)  # the latest send: the furthest deadline
            return "dropped"
        finally:
            for attempt in pending:  # answers no longer wanted
                _let_go(attempt)

    async def _register(self, budget: float) -> None:
        etcd = self._client()
        t_send = self._now()
        lease_id, ttl = await etcd.grant(self._ttl_request, budget)
        self._orphan(lease_id, ttl)
        await etcd.put(self._members_prefix + self.node_id, self._member_value(), lease_id, budget)
        self._orphans.pop(lease_id, None)
        self._session_id = lease_id
        self._session_ttl = ttl
        self._session_deadline = t_send + ttl - MARGIN
        self._shard_wake.set()

    async def _session_loop(self) -> None:
        backoff = _Backoff()
        while self._running:
            lease_id = self._session_id
            if lease_id is None:
                await self._revoke_orphans()
                try:
                    await self._register(RPC_TIMEOUT)
                    backoff.reset()
                except CoordError:
                    await _wait(self._session_wake, backoff.next())
                continue
            interval = self._session_ttl / 3

            def holding(lid: int = lease_id) -> bool:
                return self._session_id == lid

            next_refresh = self._now() + interval
            while holding():
                await _wait(self._session_wake, next_refresh - self._now())
                if holding() and self._member_stale:
                    with contextlib.suppress(CoordError):  # retried on the next wake
                        await self._put_member(lease_id)
                if not holding() or self._now() < next_refresh:
                    continue
                result = await self._refresh(lease_id, lambda: self._session_deadline, holding)
                if not holding():
                    break
                if isinstance(result, str):
                    self._drop_session(result)
                    break
                t_send, ttl = result
                self._session_deadline = t_send + ttl - MARGIN
                next_refresh = t_send + interval

    async def _watch_loop(self) -> None:
        backoff = _Backoff()
        etcd = self._client()
        while self._running:
            try:
                watch = await etcd.watch_prefix(self._prefix, RPC_TIMEOUT)
            except CoordError:
                await asyncio.sleep(backoff.next())
                continue
            backoff.reset()
            # Events may have been missed while there was no watch: everyone re-reads.
            self._leader_wake.set()
            self._shard_wake.set()
            try:
                async for event in watch.events():
                    self._on_event(event)
            except CoordError:
                pass
            finally:
                await watch.cancel()
            await asyncio.sleep(backoff.next())

    def _on_event(self, event: _Event) -> None:
        kv = event.kv
        if kv.key == self._k_leader:
            token = self._leader_token
            # Events older than our term (e.g. the predecessor's DELETE) are ignored.
            if token is not None and kv.mod_revision > token:
                if event.deleted:
                    self._drop_leader("leader key deleted")
                elif kv.create_revision != token:
                    self._drop_leader("leader key re-created by another term")
            if event.deleted:
                self._leader_wake.set()
        elif kv.key.startswith(self._members_prefix):
            self._shard_wake.set()
        else:
            shard = self._owner_shard(kv.key)
            if shard is None:
                return
            token = self._owned.get(shard)
            if token is not None and kv.mod_revision > token:
                if event.deleted:
                    self._drop_shard(shard, "owner key deleted")
                elif kv.create_revision != token:
                    self._drop_shard(shard, "owner key re-created by another term")
            if event.deleted:
                self._shard_wake.set()

    async def _shard_loop(self) -> None:
        while self._running:
            await _wait(self._shard_wake, POLL_INTERVAL)
            with contextlib.suppress(CoordError):
                await self._rebalance()

    async def _rebalance(self) -> None:
        session = self._session_id
        if session is None or self._now() >= self._session_deadline:
            return
        etcd = self._client()
        await self._put_member(session)
        revision, kvs = await etcd.get_prefix(self._prefix, RPC_TIMEOUT)
        if self._session_id != session:
            return
        materializers: list[str] = []
        owners: dict[int, _KV] = {}
        for kv in kvs:
            if kv.key.startswith(self._members_prefix):
                modes = _json(kv.value).get("modes")
                if isinstance(modes, list) and MATERIALIZER in modes:
                    materializers.append(kv.key[len(self._members_prefix) :])
            else:
                shard = self._owner_shard(kv.key)
                if shard is not None:
                    owners[shard] = kv

        # What we think we own must still be there, as our incarnation.
        for shard, token in list(self._owned.items()):
            current = owners.get(shard)
            if revision >= token and (current is None or current.create_revision != token):
                self._drop_shard(shard, "owner key gone")

        mine = assign_shards(materializers, self.shard_count).get(self.node_id, frozenset())
        if self._standby is not None:
            mine = frozenset()
        mine = frozenset(s for s in mine if s < self.shard_count)

        # Release first (stop in-process, then delete), so others can claim. Keys bound to
        # our session that we do not count as owned (a term ended by lost(), a claim whose
        # reply was lost) are deleted too, and claimed afresh with a new token if ours.
        releases: list[Awaitable[bool]] = []
        for shard, kv in sorted(owners.items()):
            ours = self._owned.get(shard) == kv.create_revision
            if ours and shard not in mine:
                self._drop_shard(shard, "reassigned")
            elif ours or kv.lease != session:
                continue
            releases.append(etcd.delete_if(self._owner_key(shard), kv.create_revision, RPC_TIMEOUT))
            del owners[shard]
        if releases:
            await asyncio.gather(*releases, return_exceptions=True)

        claims = [s for s in sorted(mine) if s not in self._owned and s not in owners]
        if claims and self._session_id == session:
            await asyncio.gather(*(self._claim(s, session) for s in claims), return_exceptions=True)

    async def _claim(self, shard: int, session: int) -> None:
        ok, kv = await self._client().create(self._owner_key(shard), self.node_id.encode(), session, RPC_TIMEOUT)
        if not ok or kv is None:
            return
        if self._session_id != session or not self._running or shard in self._owned or self._standby:
            return  # the session was dropped meanwhile: the key dies with its lease
        self._owned[shard] = kv.create_revision
        self.shard_moves += 1
        log.info(
            "shard %d acquired, token %d",
            shard,
            kv.create_revision,
            extra={"action": "shard_acquired", "node": self.node_id, "shard": shard, "token": kv.create_revision},
        )

    async def _revoke_orphans(self) -> None:
        if not self._orphans or self._stopped:
            return  # stop() revokes what is left itself
        etcd = self._client()
        now = self._now()
        for lease_id, give_up in list(self._orphans.items()):
            if now >= give_up:
                self._orphans.pop(lease_id, None)
                continue
            try:
                await etcd.revoke(lease_id, REVOKE_TIMEOUT)
            except CoordError:
                continue
            self._orphans.pop(lease_id, None)

    # -- helpers -----------------------------------------------------------------------

    def _now(self) -> float:
        return self._clock.monotonic()

    def _client(self) -> _Etcd:
        if self._stopped:
            raise CoordError("the coordinator is stopped")
        if self._etcd is None:
            self._etcd = _Etcd(self._target, self._reachable)
        return self._etcd

    async def _close_client(self) -> None:
        etcd, self._etcd = self._etcd, None
        if etcd is not None:
            await etcd.close()

    def _owner_key(self, shard: int) -> str:
        return f"{self._shards_prefix}{shard}/owner"

    def _owner_shard(self, key: str) -> int | None:
        if not key.startswith(self._shards_prefix) or not key.endswith("/owner"):
            return None
        middle = key[len(self._shards_prefix) : -len("/owner")]
        return int(middle) if middle.isdigit() else None


def _clock_reading(value: object) -> ClockReading | None:
    """A member record's ``clock`` (see the module docstring); None when absent or malformed."""
    if not isinstance(value, dict):
        return None
    offset, limit, at = value.get("offset"), value.get("limit"), value.get("at")
    if not isinstance(offset, int | float) or not isinstance(limit, int | float) or not isinstance(at, str):
        return None
    try:
        measured_at = datetime.fromisoformat(at)
    except ValueError:
        return None
    return ClockReading(float(offset), float(limit), measured_at)


def _json(value: bytes) -> dict[str, object]:
    try:
        data = json.loads(value)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
