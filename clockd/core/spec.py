"""One interface for the three schedule kinds, used by the materializer and the CLI.

* ``cron`` — a cron expression evaluated in the schedule's IANA zone under the
  time contract (:class:`~clockd.core.timeline.CronTimeline`);
* ``once`` — one instant (stored as canonical UTC ISO 8601 ending in ``Z``);
* ``every`` — a fixed rate: ``anchor + k·interval`` for k ≥ 1, counting elapsed
  time, so it does not move with daylight saving; the interval is at least 1s.

Invariants of every :class:`Spec`:
* ``next_after(t)`` is the first fire strictly after ``t`` (aware UTC), or
  ``None`` when the schedule never fires again; ``fires_after(t)`` yields the
  same instants in strictly increasing order;
* naive datetimes are refused (``ValueError``);
* :func:`compile_spec` is cached per (kind, expr, tz, anchor), so a spec is
  built once however many schedules share it; specs are immutable apart from
  the timeline's resumable-enumeration cache, which never changes results;
  :func:`validate_definition` is cached per (kind, expr, tz) likewise.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Protocol
from zoneinfo import ZoneInfo

from clockd.core.cron import parse_cron
from clockd.core.durations import format_duration, parse_duration
from clockd.core.instants import format_instant, parse_instant
from clockd.core.model import ScheduleKind
from clockd.core.timeline import CronTimeline, Fire, Skip, as_utc, is_unique_wall
from clockd.core.zones import get_zone
from clockd.errors import InvalidInput, NeverFires

__all__ = [
    "MIN_INTERVAL",
    "CronSpec",
    "EverySpec",
    "Fire",
    "OnceSpec",
    "Skip",
    "Spec",
    "compile_spec",
    "fires_at",
    "validate_definition",
]

MIN_INTERVAL = timedelta(seconds=1)
_EPSILON = timedelta(microseconds=1)
# validate_definition checks that a cron schedule fires in its zone from here on.
_REFERENCE = datetime(2000, 1, 1, tzinfo=UTC)
# A naive wall time from this day on is after _REFERENCE in every zone (offsets < 26 h).
_AFTER_REFERENCE_ANYWHERE = datetime(2000, 1, 3)  # noqa: DTZ001  naive wall time on purpose


class Spec(Protocol):
    """A compiled schedule definition: when it fires."""

    @property
    def kind(self) -> ScheduleKind: ...

    def next_after(self, instant: datetime) -> datetime | None:
        """First fire strictly after ``instant`` (aware UTC), or None: it never fires again."""
        ...

    def fires_after(self, instant: datetime) -> Iterator[Fire]:
        """Fires strictly after ``instant``, strictly increasing."""
        ...

    def events_after(self, instant: datetime) -> Iterator[Fire | Skip]:
        """Fires, plus a :class:`Skip` for each wall time lost in a gap (cron only)."""
        ...

    def describe(self) -> str:
        """One line of English."""
        ...

    def __hash__(self) -> int:
        """By identity (``object``'s): a spec is immutable, so memos may key on it."""
        ...


class CronSpec:
    """A cron expression in a zone (the time contract lives in ``CronTimeline``)."""

    __slots__ = ("expr", "timeline", "tz")

    def __init__(self, expr: str, tz: str) -> None:
        self.tz = tz
        self.timeline = CronTimeline(parse_cron(expr), get_zone(tz))
        self.expr = self.timeline.expr.normalized

    @property
    def kind(self) -> ScheduleKind:
        return ScheduleKind.CRON

    def next_after(self, instant: datetime) -> datetime | None:
        return self.timeline.next_after(instant)

    def fires_after(self, instant: datetime) -> Iterator[Fire]:
        return self.timeline.fires_after(instant)

    def events_after(self, instant: datetime) -> Iterator[Fire | Skip]:
        return self.timeline.events_after(instant)

    def describe(self) -> str:
        return f"{self.timeline.expr.describe()} ({self.tz})"

    def __repr__(self) -> str:
        return f"CronSpec({self.expr!r}, {self.tz!r})"


class OnceSpec:
    """Fires exactly once, at ``at`` (aware UTC)."""

    __slots__ = ("at", "tz", "zone")

    def __init__(self, at: datetime, tz: str) -> None:
        self.at = as_utc(at)
        self.tz = tz
        self.zone: ZoneInfo = get_zone(tz)

    @property
    def kind(self) -> ScheduleKind:
        return ScheduleKind.ONCE

    def next_after(self, instant: datetime) -> datetime | None:
        return self.at if self.at > as_utc(instant) else None

    def fires_after(self, instant: datetime) -> Iterator[Fire]:
        if self.at > as_utc(instant):
            yield Fire(self.at, self.at.astimezone(self.zone))

    def events_after(self, instant: datetime) -> Iterator[Fire | Skip]:
        yield from self.fires_after(instant)

    def describe(self) -> str:
        local = self.at.astimezone(self.zone)
        return f"Once, at {format_instant(self.at)} ({local:%Y-%m-%d %H:%M:%S} {self.tz})"

    def __repr__(self) -> str:
        return f"OnceSpec({format_instant(self.at)!r}, {self.tz!r})"


class EverySpec:
    """Fires at ``anchor + k·interval`` for k ≥ 1: elapsed time, never moved by DST."""

    __slots__ = ("anchor", "interval", "tz", "zone")

    def __init__(self, interval: timedelta, anchor: datetime, tz: str) -> None:
        if interval < MIN_INTERVAL:
            raise InvalidInput(
                f"every: the interval must be at least {format_duration(MIN_INTERVAL)}, got {format_duration(interval)}"
            )
        self.interval = interval
        self.anchor = as_utc(anchor)
        self.tz = tz
        self.zone: ZoneInfo = get_zone(tz)

    @property
    def kind(self) -> ScheduleKind:
        return ScheduleKind.EVERY

    def next_after(self, instant: datetime) -> datetime | None:
        elapsed = as_utc(instant) - self.anchor
        k = 1 if elapsed < self.interval else elapsed // self.interval + 1
        try:
            return self.anchor + k * self.interval
        except OverflowError:
            return None

    def fires_after(self, instant: datetime) -> Iterator[Fire]:
        current = self.next_after(instant)
        while current is not None:
            yield Fire(current, current.astimezone(self.zone))
            try:
                current = current + self.interval
            except OverflowError:
                return

    def events_after(self, instant: datetime) -> Iterator[Fire | Skip]:
        yield from self.fires_after(instant)

    def describe(self) -> str:
        return (
            f"Every {format_duration(self.interval)} from {format_instant(self.anchor)} "
            "(elapsed time; not moved by daylight saving)"
        )

    def __repr__(self) -> str:
        return f"EverySpec({format_duration(self.interval)!r}, {format_instant(self.anchor)!r})"


def fires_at(spec: Spec, instant: datetime) -> bool:
    """Whether ``instant`` is one of ``spec``'s fires (instants are to the microsecond)."""
    return spec.next_after(instant - _EPSILON) == instant


def _kind(kind: ScheduleKind | str) -> ScheduleKind:
    try:
        return ScheduleKind(kind)
    except ValueError:
        raise InvalidInput(f"unknown schedule kind {kind!r} (cron, once or every)") from None


def compile_spec(kind: ScheduleKind | str, expr: str, tz: str, anchor: datetime | None = None) -> Spec:
    """The :class:`Spec` for a definition; ``anchor`` (aware) is needed by ``every`` only.

    Cached: cron and once specs are shared whatever the anchor. Raises
    InvalidCron / UnknownZone / NeverFires / InvalidInput for a bad definition.
    """
    resolved = _kind(kind)
    if resolved is ScheduleKind.EVERY:
        if anchor is None:
            raise ValueError("an every schedule needs its anchor")
        return _compile(resolved, expr, tz, as_utc(anchor))
    return _compile(resolved, expr, tz, None)


@lru_cache(maxsize=16384)
def _compile(kind: ScheduleKind, expr: str, tz: str, anchor: datetime | None) -> Spec:
    if kind is ScheduleKind.CRON:
        return CronSpec(expr, tz)
    if kind is ScheduleKind.ONCE:
        return OnceSpec(parse_instant(expr, tz), tz)
    assert anchor is not None
    # Every schedule has its own anchor, so with more every schedules due than this cache
    # holds, each one misses: the interval is then cached by its expression, not parsed
    # again (that parse was a sixth of the materializer's CPU in bench/materializer.py).
    return EverySpec(_interval(expr), anchor, tz)


_interval = lru_cache(maxsize=4096)(parse_duration)  # a refusal is not cached: raised again


# Entries are small (the key and a short string); an apply of 100,000 schedules has ~30,000
# distinct (expression, zone) pairs, and an LRU smaller than the pairs of a file applied
# again misses on every one of them (each is evicted before it comes round again).
@lru_cache(maxsize=65536)
def validate_definition(kind: ScheduleKind | str, expr: str, tz: str) -> str:
    """Check a definition and return its canonical expression.

    cron → the normalized five fields (macros expanded), and it must fire in
    ``tz`` (a schedule whose every match falls in a DST gap is refused);
    once → UTC ISO 8601 ending in ``Z`` (a local time is read in ``tz``);
    every → the canonical duration (``90m`` → ``1h30m``), at least 1s.

    A pure function of its arguments, cached: ``clockctl apply`` validates thousands of
    definitions sharing a few expressions, and the cron check evaluates the timeline.
    A refusal is not cached (it is raised again, the same, on the next call).
    """
    resolved = _kind(kind)
    zone = get_zone(tz)
    if resolved is ScheduleKind.CRON:
        cron = parse_cron(expr)
        if not _fires_at_probe(cron.probe_wall, zone) and CronTimeline(cron, zone).next_after(_REFERENCE) is None:
            raise NeverFires(
                f"{cron.normalized} never fires in {tz}: every matching local time falls in a clock-change gap"
            )
        return cron.normalized
    if resolved is ScheduleKind.ONCE:
        return format_instant(parse_instant(expr, tz))
    interval = parse_duration(expr)
    if interval < MIN_INTERVAL:
        raise InvalidInput(
            f"every: the interval must be at least {format_duration(MIN_INTERVAL)}, got {format_duration(interval)}"
        )
    return format_duration(interval)


def _fires_at_probe(wall: datetime | None, zone: ZoneInfo) -> bool:
    """Whether the parse-time probe's first matching wall time already proves that a cron
    fires in ``zone`` after ``_REFERENCE``: it is late enough, and unique in the zone (then
    it is a fire). This answers most expressions without enumerating the timeline, so a
    plan evaluates each (expression, zone) once — for its first run — not twice; when it
    does not prove it, the caller enumerates from ``_REFERENCE`` as before."""
    return wall is not None and wall >= _AFTER_REFERENCE_ANYWHERE and is_unique_wall(zone, wall)
