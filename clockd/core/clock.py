"""Clocks. Wall time (aware UTC) for comparing with due instants; monotonic time for leases.

Services take a ``Clock`` so tests drive time with ``ManualClock`` instead of sleeping.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Aware UTC wall time."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps; only differences mean anything."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to. Both views advance together."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, delta: timedelta | float) -> None:
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        if seconds < 0:
            raise ValueError("a manual clock only moves forward; use set_wall() to jump wall time")
        self._now += timedelta(seconds=seconds)
        self._mono += seconds

    def set_wall(self, when: datetime) -> None:
        """Jump the wall clock (as NTP might), leaving monotonic time alone."""
        self._now = when.astimezone(UTC)
