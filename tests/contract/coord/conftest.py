"""Backends for the coordinator contract suite (``test_coordinator_contract.py``).

Each backend makes coordinators of **one cluster** (nodes that compete for the same
leadership and shards):

* ``local``: ``LocalCoordinator``s over one embedded SQLite store and its lock file
  (tokens from the store's counters), under ``tmp_path``;
* ``etcd``: ``EtcdCoordinator``s on the session's real etcd (``etcd_server`` in
  tests/conftest.py), in a cluster name of their own. A missing etcd binary skips
  these, except under ``CI=true`` where it fails them.

Adding a backend: a ``_make_<kind>`` below and an entry in ``_BACKENDS``.
Behaviours only one adapter has (etcd's rebalancing, lease expiry, failover of a
killed process) stay in that adapter's own test file.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from clockd.coord import Coordinator
from clockd.coord.etcd import EtcdCoordinator
from clockd.coord.local import LocalCoordinator
from clockd.errors import StoreLocked
from clockd.store.sqlite import SqliteStore

Made = tuple["CoordBackend", Callable[[], Awaitable[None]]]  # the backend, and how to close what it opened
SHARDS = 8  # enough to see ownership; the local adapter takes one token per shard


class CoordBackend:
    """Makes the coordinators of one cluster and stops them all at the end."""

    def __init__(
        self, kind: str, make: Callable[[str], Coordinator], exclusive: tuple[type[BaseException], ...] = ()
    ) -> None:
        self.kind = kind
        self._make = make
        # What ``start`` raises when another live node of the cluster holds it whole
        # (the embedded store runs one clockd per database: ``StoreLocked``).
        self.exclusive = exclusive
        self.made: list[Coordinator] = []

    def make(self, node: str) -> Coordinator:
        coord = self._make(node)
        self.made.append(coord)
        return coord

    async def start(self, coord: Coordinator, *, lead: bool, materialize: bool, modes: list[str]) -> bool:
        """Start ``coord``; False when the backend refused it because another node holds
        the cluster exclusively (then it holds nothing)."""
        try:
            await coord.start(lead=lead, materialize=materialize, modes=modes)
        except self.exclusive:
            return False
        return True

    async def close(self) -> None:
        # stop() is bounded by the adapters themselves (etcd: STOP_BOUND, tested in
        # test_etcd_coordinator.py), so teardown needs no bound of its own.
        await asyncio.gather(*(c.stop() for c in self.made), return_exceptions=True)


async def _make_local(tmp_path: Path, request: pytest.FixtureRequest) -> Made:
    store = SqliteStore(tmp_path / "clockd.db")
    await store.open()
    lock = tmp_path / "clockd.db.lock"
    backend = CoordBackend(
        "local", lambda node: LocalCoordinator(store, lock, node_id=node, shard_count=SHARDS), (StoreLocked,)
    )
    return backend, store.close


async def _make_etcd(tmp_path: Path, request: pytest.FixtureRequest) -> Made:
    server = request.getfixturevalue("etcd_server")
    cluster = f"t{uuid.uuid4().hex[:10]}"

    def make(node: str) -> Coordinator:
        return EtcdCoordinator(server.endpoints, cluster, node, shard_count=SHARDS, ttl=2.0)

    async def nothing() -> None:
        return None

    return CoordBackend("etcd", make), nothing


_BACKENDS = {"local": _make_local, "etcd": _make_etcd}
# Marks per backend, so `-m "not etcd"` deselects the server-backed half.
_MARKS = {"etcd": [pytest.mark.etcd]}


@pytest.fixture(params=[pytest.param(kind, marks=_MARKS.get(kind, [])) for kind in _BACKENDS])
async def coord_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CoordBackend]:
    backend, close = await _BACKENDS[request.param](tmp_path, request)
    try:
        yield backend
    finally:
        await backend.close()
        await close()
