"""The four modes in one process on a store under test, driven by a manual clock.

Like tests/integration/test_pipeline.py, but over the contract suite's ``backend`` (so
SQLite and PostgreSQL alike): each mode's ``tick`` is called directly, so a test decides
exactly when time moves. Also raw SQL on the backend, to break things on purpose.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from clockd.coord.local import LocalCoordinator
from clockd.core.clock import ManualClock
from clockd.core.model import AttemptOutcome, NoopTarget, ScheduleDef, ScheduleKind
from clockd.modes.leader import Leader
from clockd.modes.materializer import Materializer, MaterializerSettings
from clockd.modes.relay import Relay
from clockd.modes.worker import Worker, WorkerSettings
from clockd.runner import RunRequest, RunResult
from clockd.services.ops import Ops
from clockd.store import Store

from .conftest import PostgresBackend, SqliteBackend
from .support import Backend

# Saturday night before Europe/Paris springs forward (2026-03-29 01:00 UTC).
T0 = datetime(2026, 3, 28, 23, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


@dataclass
class ScriptedRunner:
    """Runs nothing. Schedules named in ``fail`` exit 3; those in ``hold`` run until released."""

    fail: set[str] = field(default_factory=set)
    hold: set[str] = field(default_factory=set)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    calls: list[RunRequest] = field(default_factory=list)

    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        self.calls.append(request)
        if request.schedule_name in self.hold:
            await self.release.wait()
        if request.schedule_name in self.fail:
            return RunResult(AttemptOutcome.FAILED, exit_code=3, output="boom\n", error="exit status 3", duration=0.5)
        return RunResult(AttemptOutcome.SUCCEEDED, exit_code=0, output="ok\n", duration=0.25)


@dataclass
class Pipeline:
    backend: Backend
    store: Store
    clock: ManualClock
    coord: LocalCoordinator
    runner: ScriptedRunner
    ops: Ops = field(init=False)
    materializer: Materializer = field(init=False)
    relay: Relay = field(init=False)
    worker: Worker = field(init=False)
    leader: Leader = field(init=False)

    def __post_init__(self) -> None:
        self.ops = Ops(self.store, self.clock, shard_count=4)
        self.materializer = Materializer(
            self.store, self.coord, self.clock, MaterializerSettings(horizon=timedelta(minutes=2))
        )
        self.relay = Relay(self.store, self.clock)
        self.worker = Worker(self.store, self.runner, self.clock, WorkerSettings(concurrency=100))
        self.leader = Leader(self.store, self.coord, self.clock)

    async def cycle(self) -> None:
        """One pass of every mode; jobs that are not held finish and are recorded."""
        while await self.materializer.tick():
            pass
        await self.relay.tick()
        await self.leader.tick()
        claims = await self.store.claim(("default",), "w1", 100, timedelta(minutes=30), self.clock.now())
        for claim in claims:
            self.worker._start(claim)
        tasks = [
            e.task for e in self.worker.running.values() if e.task and e.claim.schedule_name not in self.runner.hold
        ]
        if tasks:
            await asyncio.gather(*tasks)
        await self.worker._flush_all()

    async def advance(self, delta: timedelta, step: timedelta = MIN) -> None:
        end = self.clock.now() + delta
        while self.clock.now() < end:
            self.clock.advance(min(step, end - self.clock.now()))
            await self.cycle()

    async def finish_held(self) -> None:
        self.runner.release.set()
        tasks = [e.task for e in self.worker.running.values() if e.task]
        if tasks:
            await asyncio.gather(*tasks)
        await self.worker._flush_all()

    async def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Raw SQL on the database under test; ``?`` placeholders (``%s`` for PostgreSQL)."""
        if isinstance(self.backend, SqliteBackend):
            conn = sqlite3.connect(self.backend.path)
            try:
                with conn:
                    return conn.execute(query, params).fetchall()
            finally:
                conn.close()
        assert isinstance(self.backend, PostgresBackend)
        async with await psycopg.AsyncConnection.connect(self.backend.dsn, autocommit=True) as pg:
            cur = await pg.execute(query.replace("?", "%s"), params)
            return await cur.fetchall() if cur.description else []

    def us(self, instant: datetime) -> Any:
        """An instant as the backend stores it (SQLite: µs since the epoch)."""
        if isinstance(self.backend, SqliteBackend):
            return int((instant - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))
        return instant


@pytest.fixture
async def pipeline(backend: Backend, tmp_path: Path) -> AsyncIterator[Pipeline]:
    store = await backend.open_store()
    clock = ManualClock(T0)
    coord = LocalCoordinator(store, tmp_path / "pipeline.lock", "n1", shard_count=4)
    await coord.start(lead=True, materialize=True, modes=("leader", "materializer", "relay", "worker"))
    made = Pipeline(backend, store, clock, coord, ScriptedRunner())
    try:
        yield made
    finally:
        made.runner.release.set()
        await coord.stop()


def cron(name: str, expr: str, tz: str = "UTC", **kw: Any) -> ScheduleDef:
    return ScheduleDef(name=name, kind=ScheduleKind.CRON, expr=expr, tz=tz, target=NoopTarget(), **kw)
