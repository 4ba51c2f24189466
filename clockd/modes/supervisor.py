"""Supervisor: runs the modes a process was asked for, and stops them in order.

Start: the coordinator first (file lock or etcd registration), then every mode.
Stop (``stopping`` set): every mode sees the same event; the materializer,
relay and leader finish their current tick; the worker stops claiming, drains
its running jobs within the grace period and releases what it never started;
then notifications still in flight get ``NOTIFY_DRAIN`` seconds; then the
coordinator gives up its leases so successors take over at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Protocol

from clockd.coord import Coordinator
from clockd.core.clock import Clock
from clockd.modes.clockwatch import ClockWatch
from clockd.modes.leader import Leader, LeaderSettings
from clockd.modes.materializer import Materializer, MaterializerSettings
from clockd.modes.relay import Relay, RelaySettings
from clockd.modes.worker import Worker, WorkerSettings
from clockd.runner import Runner
from clockd.runner.notify import Notifier
from clockd.store import Store

log = logging.getLogger(__name__)

NOTIFY_DRAIN = 10.0  # seconds the shutdown waits for notifications in flight


class Service(Protocol):
    async def run(self, stopping: asyncio.Event) -> None: ...


class Supervisor:
    def __init__(
        self,
        modes: Sequence[str],
        store: Store,
        coord: Coordinator,
        runner: Runner,
        clock: Clock,
        *,
        leader: LeaderSettings | None = None,
        materializer: MaterializerSettings | None = None,
        relay: RelaySettings | None = None,
        worker: WorkerSettings | None = None,
        max_clock_skew: timedelta = timedelta(seconds=2),
    ) -> None:
        self.modes = tuple(modes)
        self.store, self.coord = store, coord
        self.services: dict[str, Service] = {}
        self.clock_watch = ClockWatch(store, clock, max_clock_skew)
        if "leader" in self.modes or "materializer" in self.modes:
            self.services["clock-watch"] = self.clock_watch
        # One notifier for every mode of this process: it sends through the worker's runner.
        self.notifier = Notifier(runner, store.get_schedule_by_id)
        if "leader" in self.modes:
            self.services["leader"] = Leader(store, coord, clock, leader, self.clock_watch, self.notifier)
        if "materializer" in self.modes:
            self.services["materializer"] = Materializer(
                store, coord, clock, materializer, self.clock_watch, self.notifier
            )
        if "relay" in self.modes:
            self.services["relay"] = Relay(store, clock, relay)
        if "worker" in self.modes:
            self.services["worker"] = Worker(store, runner, clock, worker, notifier=self.notifier)

    async def run(
        self,
        stopping: asyncio.Event,
        on_ready: Callable[[], Awaitable[None] | None] | None = None,
    ) -> None:
        await self.coord.start(
            lead="leader" in self.modes,
            materialize="materializer" in self.modes,
            modes=self.modes,
        )
        tasks = {
            asyncio.create_task(svc.run(stopping), name=f"clockd-{name}"): name for name, svc in self.services.items()
        }
        log.info(
            "clockd running: %s",
            ", ".join(self.modes),
            extra={"action": "started", "modes": ",".join(self.modes)},
        )
        if on_ready is not None:
            result = on_ready()
            if result is not None:
                await result
        failed: BaseException | None = None
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    exc = task.exception()
                    if exc is not None and failed is None:
                        failed = exc
                        log.error(
                            "mode %s crashed: %r; stopping",
                            tasks[task],
                            exc,
                            extra={"action": "mode_crashed", "mode": tasks[task]},
                        )
                        stopping.set()
        finally:
            await self.notifier.drain(NOTIFY_DRAIN)
            await self.coord.stop()
        if failed is not None:
            raise failed
