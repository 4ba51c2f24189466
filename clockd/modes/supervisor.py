"""Supervisor: runs the modes a process was asked for, and stops them in order.

Which modes exist and how each is built is ``clockd.wiring`` (``MODES``); the
supervisor only starts the coordinator, runs what it was given and stops it.

Start: the coordinator first (file lock or etcd registration), then every mode.
A stop during the coordinator's start-up (SIGTERM while etcd is down or slow)
ends the start-up at once: nothing was started, ``run`` returns, the process
exits 0 — it does not wait out the connect timeout to fail.
Stop (``stopping`` set): every mode sees the same event; the materializer,
relay and leader finish their current tick; the worker stops claiming, drains
its running jobs within the grace period and releases what it never started;
then notifications still in flight get ``NOTIFY_DRAIN`` seconds; then the
coordinator gives up its leases so successors take over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from clockd.coord import Coordinator
from clockd.errors import CoordError

log = logging.getLogger(__name__)

NOTIFY_DRAIN = 10.0  # seconds the shutdown waits for notifications in flight


class Service(Protocol):
    async def run(self, stopping: asyncio.Event) -> None: ...


class Supervisor:
    """Runs ``services`` (built by ``clockd.wiring.build_modes``: name → mode) under
    ``coord``, which campaigns for leadership only when ``"leader"`` is among ``modes``
    and claims shards only when ``"materializer"`` is. It builds nothing itself."""

    def __init__(
        self,
        modes: Sequence[str],
        coord: Coordinator,
        services: Mapping[str, Service],
        drain: Sequence[Callable[[], Awaitable[None]]] = (),
    ) -> None:
        self.modes = tuple(modes)
        self.coord = coord
        self.services: dict[str, Service] = dict(services)
        # Awaited in order once every mode has returned, before the coordinator stops:
        # work of this process that must end while it still holds its leases.
        self.drain = tuple(drain)

    async def run(
        self,
        stopping: asyncio.Event,
        on_ready: Callable[[], Awaitable[None] | None] | None = None,
    ) -> None:
        if not await self._start_coordinator(stopping):
            return
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
            for finish in self.drain:
                await finish()
            await self.coord.stop()
        if failed is not None:
            raise failed

    async def _start_coordinator(self, stopping: asyncio.Event) -> bool:
        """Start the coordinator unless ``stopping`` comes first; False when it did (the
        start-up is ended by ``coord.stop()``, which leaves nothing registered)."""
        start = asyncio.create_task(
            self.coord.start(
                lead="leader" in self.modes,
                materialize="materializer" in self.modes,
                modes=self.modes,
            ),
            name="clockd-coord-start",
        )
        stop = asyncio.create_task(stopping.wait(), name="clockd-stop-during-start")
        try:
            await asyncio.wait({start, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not start.done():
            await self.coord.stop()
            with contextlib.suppress(CoordError):
                await start  # ends with the stop ("stopped during start-up")
            if not start.cancelled() and start.exception() is None:
                await self.coord.stop()  # it had finished first: give back what it took
            log.info("stopped during start-up", extra={"action": "stopped_during_start"})
            return False
        start.result()  # CoordError: etcd stayed unreachable
        return True
