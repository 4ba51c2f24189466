"""The leader vacuums the queue every ``queue_vacuum_every`` (monotonic time, a manual
clock), says once when its database role may not, and leaves it alone when told to."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clockd.coord.local import LocalCoordinator
from clockd.core.clock import ManualClock
from clockd.modes.leader import Leader, LeaderSettings
from clockd.store.sqlite.store import SqliteStore

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


class CountingStore(SqliteStore):
    """The embedded store, answering ``vacuum_queue`` as a PostgreSQL role that may
    (``allowed``) or may not vacuum the queue would, and counting the calls."""

    def __init__(self, path: Path, allowed: bool) -> None:
        super().__init__(path)
        self.allowed = allowed
        self.vacuums = 0

    async def vacuum_queue(self) -> bool:
        self.vacuums += 1
        return self.allowed


@pytest.fixture(params=[True, False], ids=["owner", "not-owner"])
async def store(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[CountingStore]:
    made = CountingStore(tmp_path / "clockd.db", allowed=request.param)
    await made.open()
    yield made
    await made.close()


@pytest.fixture
async def coord(store: CountingStore, tmp_path: Path) -> AsyncIterator[LocalCoordinator]:
    made = LocalCoordinator(store, tmp_path / "clockd.db.lock", "n1", shard_count=4)
    await made.start(lead=True, materialize=False, modes=("leader",))
    yield made
    await made.stop()


def _refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", "") == "queue_vacuum_refused"]


async def test_the_leader_vacuums_the_queue_every_queue_vacuum_every(
    store: CountingStore, coord: LocalCoordinator, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(T0)
    leader = Leader(store, coord, clock, LeaderSettings(queue_vacuum_every=2.0))
    calls = []
    for _ in range(5):  # ticks at 0, 1, 2, 3, 4 s
        await leader.tick()
        calls.append(store.vacuums)
        clock.advance(1.0)
    if store.allowed:
        assert calls == [1, 1, 2, 2, 3]
        assert _refusals(caplog) == []
    else:  # asked once; one warning that says what to do; never asked again
        assert calls == [1, 1, 1, 1, 1]
        (refusal,) = _refusals(caplog)
        assert refusal.levelno == logging.WARNING
        assert "owner" in refusal.getMessage() and "queue_vacuum_every: 0s" in refusal.getMessage()


async def test_queue_vacuum_every_0_leaves_the_queue_to_autovacuum(
    store: CountingStore, coord: LocalCoordinator, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(T0)
    leader = Leader(store, coord, clock, LeaderSettings(queue_vacuum_every=0.0))
    for _ in range(3):
        await leader.tick()
        clock.advance(5.0)
    assert store.vacuums == 0
    assert _refusals(caplog) == []
