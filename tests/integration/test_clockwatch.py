"""The clock watch against a real store's clock: a wall-clock jump between two
measurements is caught on the next check, not at the next measurement."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

from clockd.core.clock import ManualClock
from clockd.modes.clockwatch import ClockWatch
from tests.contract.store.support import Backend


async def test_a_jump_between_measurements_steps_down_at_once(store_backend: Backend) -> None:
    store = await store_backend.open_store()
    clock = ManualClock(datetime.now(UTC))
    changes: list[str | None] = []
    watch = ClockWatch(store, clock, timedelta(seconds=2), interval=3600, on_change=changes.append)
    assert watch.ok is False  # not measured yet: a node with a wrong clock must not act first
    await watch.measure()
    assert watch.ok is True and changes == []

    clock.set_wall(clock.now() + timedelta(hours=1))  # the wall clock jumps; monotonic does not
    assert watch.ok is False  # before any new measurement
    assert changes and changes[-1] is not None and "jumped +3600" in changes[-1]
    assert watch.reason is not None and "+3600" in watch.reason

    clock.set_wall(datetime.now(UTC))  # fixed (NTP steps it back)
    await watch.measure()
    assert watch.ok is True and changes[-1] is None and watch.reason is None


async def test_a_clock_put_right_resumes_within_a_tick_not_at_the_next_measurement(store_backend: Backend) -> None:
    # Regression: standing by, the node resumed only at its next periodic measurement
    # (every 10 s), though the check before each tick could see the clock was right.
    store = await store_backend.open_store()
    clock = ManualClock(datetime.now(UTC))
    changes: list[str | None] = []
    watch = ClockWatch(store, clock, timedelta(seconds=2), interval=3600, on_change=changes.append)
    stopping = asyncio.Event()
    running = asyncio.create_task(watch.run(stopping))
    try:
        deadline = time.monotonic() + 10
        while watch.offset is None:  # the first measurement
            assert time.monotonic() < deadline, "no first measurement"
            await asyncio.sleep(0.01)
        assert watch.ok is True

        clock.set_wall(clock.now() + timedelta(hours=1))
        assert watch.ok is False and changes[-1] is not None
        while watch.offset is None or abs(watch.offset) < 3000:  # re-measured at once: +1 h
            assert time.monotonic() < deadline, "no re-measure after the jump"
            await asyncio.sleep(0.01)

        clock.set_wall(datetime.now(UTC))  # NTP steps it back
        assert watch.ok is False  # the tick that sees it: still standing by until measured
        while changes[-1] is not None:
            assert time.monotonic() < deadline, "standing by until the next measurement (an hour)"
            await asyncio.sleep(0.01)
        assert watch.ok is True and watch.reason is None
    finally:
        stopping.set()
        await running
