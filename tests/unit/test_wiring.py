"""Composition of ``clockd run`` (``clockd.wiring``): which services a mode list builds,
the modes table against the modes the settings accept, and the one test hook."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from clockd.config import ALL_MODES, Settings
from clockd.coord.local import LocalCoordinator
from clockd.errors import InvalidInput
from clockd.modes.materializer import Materializer
from clockd.modes.supervisor import Supervisor
from clockd.store.postgres import PostgresStore
from clockd.store.sqlite import SqliteStore
from clockd.wiring import MODES, OPERATOR_STALL_LIMIT, Faults, build_daemon, make_store


def test_every_mode_the_settings_accept_has_a_builder() -> None:
    assert tuple(MODES) == ALL_MODES


@pytest.mark.parametrize(
    ("modes", "services"),
    [
        (ALL_MODES, ["clock-watch", "leader", "materializer", "relay", "worker", "api"]),
        (("worker",), ["clock-watch", "worker"]),
        (("relay", "leader"), ["clock-watch", "leader", "relay"]),
        (("materializer",), ["clock-watch", "materializer"]),
        (("api",), ["api"]),
    ],
)
async def test_a_daemon_runs_the_modes_it_was_asked_for(
    tmp_path: Path, modes: tuple[str, ...], services: list[str]
) -> None:
    settings = Settings(store=f"sqlite:///{tmp_path}/clockd.db", modes=modes, api_addr="127.0.0.1:0")
    daemon = build_daemon(settings)
    try:
        assert list(daemon.supervisor.services) == services
        assert daemon.supervisor.modes == modes
        assert daemon.location.kind == "sqlite"
    finally:
        await daemon.runner.aclose()
        api = daemon.supervisor.services.get("api")
        if api is not None:
            api.sock.close()  # type: ignore[attr-defined]  # bound at composition, never served here


async def test_the_fault_hook_reaches_the_materializer_and_is_off_by_default(tmp_path: Path) -> None:
    settings = Settings(store=f"sqlite:///{tmp_path}/clockd.db", modes=("materializer",))
    for faults, held in ((None, None), (Faults(hold_while=str(tmp_path / "hold")), str(tmp_path / "hold"))):
        daemon = build_daemon(settings, faults=faults)
        try:
            materializer = daemon.supervisor.services["materializer"]
            assert isinstance(materializer, Materializer)
            assert materializer.settings.hold_while == held
        finally:
            await daemon.runner.aclose()


def test_faults_are_read_from_the_environment_in_one_place() -> None:
    assert Faults.from_environ({}) == Faults()
    assert Faults.from_environ({"CLOCKD_FAULT_HOLD_WHILE": "/run/hold"}).hold_while == "/run/hold"
    assert Faults.from_environ({"CLOCKD_FAULT_HOLD_WHILE": ""}) == Faults()


def test_a_postgresql_store_without_etcd_is_refused_before_anything_starts() -> None:
    with pytest.raises(InvalidInput, match="pass --etcd"):
        build_daemon(Settings(store="postgresql://clockd@127.0.0.1:1/clockd"))


@pytest.mark.parametrize(("lease_ttl", "visibility_timeout", "limit"), [(10, 30, 10), (10, 4, 4)])
async def test_a_daemon_on_postgresql_limits_how_long_a_session_sits_inside_a_transaction(
    lease_ttl: int, visibility_timeout: int, limit: int
) -> None:
    # A stalled process's row locks must not outlive what they protect: its shard lease
    # and its runs' leases (tests/contract/store: the stalled worker whose run is reaped).
    settings = Settings(
        store="postgresql://clockd@127.0.0.1:1/clockd",
        etcd=("http://127.0.0.1:1",),
        modes=("worker",),
        lease_ttl=timedelta(seconds=lease_ttl),
        visibility_timeout=timedelta(seconds=visibility_timeout),
        heartbeat=timedelta(seconds=1),
    )
    daemon = build_daemon(settings)  # composes only: nothing is reached yet
    try:
        assert isinstance(daemon.store, PostgresStore)
        assert daemon.store.driver.idle_in_transaction_timeout == timedelta(seconds=limit)
    finally:
        await daemon.runner.aclose()


def test_an_operators_connections_are_limited_too_but_generously() -> None:
    # clockctl suspended (Ctrl-Z) inside its transaction must not hold its row locks for
    # as long as it stays suspended; a minute is far above any gap between its statements.
    store = make_store("postgresql://clockd@127.0.0.1:1/clockd")  # composes only
    assert isinstance(store, PostgresStore)
    assert store.driver.idle_in_transaction_timeout == OPERATOR_STALL_LIMIT == timedelta(minutes=1)


async def test_the_supervisor_drains_while_it_still_holds_its_leases(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "clockd.db")
    await store.open()
    coord = LocalCoordinator(store, tmp_path / "clockd.db.lock", node_id="a", shard_count=4)
    held_during_drain: list[bool] = []

    async def drain() -> None:
        held_during_drain.append(coord.leader_lease() is not None and len(coord.shard_leases()) == 4)

    class StopsAtOnce:
        async def run(self, stopping: asyncio.Event) -> None:
            stopping.set()  # the one mode ends: drain, then stop the coordinator

    stopping = asyncio.Event()
    try:
        await Supervisor(("leader", "materializer"), coord, {"stops": StopsAtOnce()}, drain=[drain]).run(stopping)
        assert held_during_drain == [True]
        assert coord.leader_lease() is None and coord.shard_leases() == []
    finally:
        await store.close()


async def test_a_stop_while_etcd_is_unreachable_ends_the_start_up_at_once() -> None:
    """SIGTERM while the coordinator's start-up retries an etcd that is down: the daemon
    stops then (exit 0, nothing started), not at the connect timeout with an error."""
    from clockd.coord.etcd import EtcdCoordinator
    from tests.harness import free_port

    coord = EtcdCoordinator([f"http://127.0.0.1:{free_port()}"], "drill", "a", connect_timeout=30.0)
    ran: list[str] = []

    class Mode:
        async def run(self, stopping: asyncio.Event) -> None:
            ran.append("mode")

    stopping = asyncio.Event()
    supervising = asyncio.create_task(Supervisor(("leader",), coord, {"leader": Mode()}).run(stopping))
    await asyncio.sleep(0.3)  # where the stop lands (start-up retrying), not a wait for an event
    stopping.set()
    async with asyncio.timeout(3):
        await supervising
    assert ran == [] and coord.leader_lease() is None
