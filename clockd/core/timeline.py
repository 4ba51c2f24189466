"""The time contract (DESIGN.md §2): a cron expression in an IANA zone → real UTC instants.

``cronsim`` only enumerates naive local wall times (``CronExpr.raw_walls``);
this module maps each wall time ``w`` to the real instants that show ``w`` on
the zone's clocks, trying ``fold=0`` and ``fold=1`` and keeping only those that
round-trip (UTC → local gives ``w`` back):

* none — ``w`` falls in a gap (spring forward, or a skipped day such as
  Pacific/Apia 2011-12-30): the time is **skipped**, never moved;
* one — the usual case;
* two — ``w`` is repeated (fall back): a fixed-hour job runs **once**, at the
  first (earlier) instant; an interval job (hour field ``*`` or ``*/n``) runs at
  **both**.

Invariants of every iterator and of ``next_after`` here:
* results are aware UTC datetimes, strictly after the start instant and
  strictly increasing;
* every result's local wall time exists and matches the expression; a
  fixed-hour job never yields two instants with the same local wall time;
* the set of fires does not depend on the start instant: starting inside a
  repeated hour yields exactly the fires after the start, never an earlier or
  equal instant;
* evaluation terminates: iteration ends when no fire is found for 50 years of
  wall time (or the calendar ends); ``next_after`` then returns ``None``.

The fast check: a wall time ``w`` is unique and real when the zone's offset at
``w`` equals its offset at ``w + 26h`` (fold 0); otherwise the fold 0/1 round
trip decides.

How the start is chosen: the enumeration begins at the start instant's local
wall time, stepped back by the size of a fall-back transition within the next
26 hours, if any (so walls that come around again after a fall-back are not
missed). This relies on two facts about the zone data, checked for every zone
by the test suite: a clock change shifts by at most 24 hours, and two changes
are more than 26 hours apart, both in real time and in wall time (so one
look-up 26 hours ahead tells whether a change lies in between, and by how much).
The same facts make the first instant of each wall time increase with the wall
time, which is how a result is known to be final before the next one is seen.

Chained calls (``t = next_after(t)``) resume a cached enumeration keyed by the
fire last returned: a pure cache, results never depend on it.

Comparing: use ``Fire.utc`` (or ``local.astimezone(UTC)``); Python never treats a
time inside a repeated hour as equal to one in another zone (PEP 495).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import chain
from zoneinfo import ZoneInfo

from clockd.core.cron import CronExpr

__all__ = ["CronTimeline", "Fire", "Skip", "as_utc"]

# No two clock changes of any zone are closer than this (checked by the tests),
# and no shift is larger than it: one look-up at start + _AHEAD finds a fall-back.
_AHEAD = timedelta(hours=26)
# Stop looking when this many years of wall time pass without a fire.
_SEARCH_YEARS = 50
# Naive UTC ↔ aware UTC by arithmetic: several times cheaper than datetime.replace().
_EPOCH = datetime(1970, 1, 1)  # noqa: DTZ001  naive UTC on purpose (internal arithmetic)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
# How many resumable chains (see next_after) one timeline keeps. Chains that share a
# timeline meet at the same instants, so a few slots serve many schedules; the bound
# keeps memory small however many timelines are cached (~1 KB per slot).
_MAX_CURSORS = 8


@dataclass(frozen=True, slots=True)
class Fire:
    """One real firing instant: ``utc`` (aware UTC), ``local`` (aware, in the zone), a note.

    ``note`` is set when the wall time is repeated (fall back), saying how the
    contract resolved it; ``None`` otherwise.
    """

    utc: datetime
    local: datetime
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Skip:
    """A matching wall time that does not exist in the zone (a gap), so it does not run.

    ``wall`` is the **naive** local wall time that was skipped (it has no real
    instant, so it cannot be aware); ``note`` says so in one line, e.g.
    ``DST gap: 02:30 does not exist on 2026-03-29, skipped``.
    """

    wall: datetime
    note: str


def as_utc(instant: datetime) -> datetime:
    """``instant`` as aware UTC; naive datetimes are refused (ValueError)."""
    if instant.tzinfo is UTC:
        # The usual case (stored instants are decoded as UTC): no offset lookup, no copy.
        # It was ~12 % of a materializer pass's planning CPU (py-spy, bench.materializer).
        return instant
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"an aware datetime is required, got naive {instant.isoformat()}")
    return instant.astimezone(UTC)


def is_unique_wall(zone: ZoneInfo, wall: datetime) -> bool:
    """Whether the naive ``wall`` time shows exactly once in ``zone`` with no clock change
    within a day after it — the test the enumeration uses to take a matching wall time as
    a fire at its one instant without resolving it (so such a match *is* a fire)."""
    try:
        return zone.utcoffset(wall) == zone.utcoffset(wall + _AHEAD)
    except OverflowError:
        return False


class CronTimeline:
    """A cron expression evaluated in a zone, under the contract above."""

    __slots__ = ("_cursors", "expr", "zone")

    def __init__(self, expr: CronExpr, zone: ZoneInfo) -> None:
        self.expr = expr
        self.zone = zone
        # Resumable enumerations keyed by the fire ``next_after`` returned: a pure cache
        # (taking one is an atomic dict.pop, so concurrent callers never share one).
        self._cursors: dict[datetime, Iterator[datetime]] = {}

    def __repr__(self) -> str:
        return f"CronTimeline({self.expr.normalized!r}, {self.zone.key!r})"

    # -- the hot path ------------------------------------------------------------

    def next_after(self, instant: datetime) -> datetime | None:
        """The first fire strictly after ``instant`` (aware UTC), or None if it never fires again.

        Chained calls (``t = next_after(t)``, as the materializer makes them) resume
        the enumeration where the previous call stopped instead of starting over.
        """
        cursors = self._cursors
        it = cursors.pop(instant, None)  # atomic: one caller owns a cursor
        if it is not None:
            # Resuming after a unique wall time: every later wall time maps to later
            # instants, so the first unique one is the answer.
            zone = self.zone
            try:
                wall = next(it)
                off0 = zone.utcoffset(wall)
                unique = off0 == zone.utcoffset(wall + _AHEAD)
            except (StopIteration, OverflowError):
                return None
            if unique:
                assert off0 is not None  # zoneinfo always knows the offset
                result = _EPOCH_UTC + (wall - off0 - _EPOCH)
                if len(cursors) >= _MAX_CURSORS:
                    cursors.clear()
                cursors[result] = it
                return result
            return self._scan(chain((wall,), it), None, wall.year)
        start, start_wall = self._start(instant)
        if start_wall is None:
            return None
        return self._scan(self.expr.raw_walls(start_wall), start, start_wall.year)

    def _scan(self, it: Iterator[datetime], start: datetime | None, year: int) -> datetime | None:
        """The earliest instant after ``start`` (naive UTC; None: no bound) from wall times ``it``."""
        zone = self.zone
        interval = self.expr.is_interval
        limit = year + _SEARCH_YEARS
        best: datetime | None = None  # naive UTC; only set around a fall-back
        try:
            for wall in it:
                off0 = zone.utcoffset(wall)
                if off0 == zone.utcoffset(wall + _AHEAD):
                    assert off0 is not None
                    first = wall - off0
                    if start is not None and first <= start:
                        continue
                    if best is not None and best < first:
                        return _EPOCH_UTC + (best - _EPOCH)
                    result = _EPOCH_UTC + (first - _EPOCH)
                    # A unique wall time after every pending instant: later wall times map
                    # to later instants, so the enumeration can resume from here.
                    if len(self._cursors) >= _MAX_CURSORS:
                        self._cursors.clear()
                    self._cursors[result] = it
                    return result
                found = self._resolve(wall)
                if found:
                    first = found[0]
                    for u in found if interval else found[:1]:
                        if (start is None or u > start) and (best is None or u < best):
                            best = u
                    # Later wall times map to instants after ``first``: ``best`` is final.
                    if best is not None and best <= first:
                        return _EPOCH_UTC + (best - _EPOCH)
                if wall.year > limit:
                    break
        except OverflowError:
            pass
        return None if best is None else _EPOCH_UTC + (best - _EPOCH)

    # -- iteration -----------------------------------------------------------------

    def fires_after(self, instant: datetime) -> Iterator[Fire]:
        """Every fire strictly after ``instant``, in order (an infinite schedule is endless)."""
        for event in self._events(instant, skips=False):
            if isinstance(event, Fire):
                yield event

    def events_after(self, instant: datetime) -> Iterator[Fire | Skip]:
        """Like :meth:`fires_after`, with a :class:`Skip` for each matching wall time in a gap.

        A skip comes in order, before the first fire after the gap. Skipped wall
        times are reported only when the gap lies after ``instant``.
        """
        return self._events(instant, skips=True)

    def _events(self, instant: datetime, *, skips: bool) -> Iterator[Fire | Skip]:
        start, start_wall = self._start(instant)
        if start_wall is None:
            return
        zone = self.zone
        interval = self.expr.is_interval
        # Instants waiting for their turn (only around a fall-back, for interval jobs,
        # where wall order and real order differ): (naive UTC, wall, note).
        pending: list[tuple[datetime, datetime, str | None]] = []
        last_year = start_wall.year
        try:
            for wall in self.expr.raw_walls(start_wall):
                off0 = zone.utcoffset(wall)
                if off0 == zone.utcoffset(wall + _AHEAD):
                    assert off0 is not None
                    u = wall - off0
                    if u <= start:
                        continue
                    while pending and pending[0][0] < u:
                        yield self._fire(*heapq.heappop(pending))
                    last_year = wall.year
                    yield self._fire(u, wall, None)
                    continue
                found = self._resolve(wall)
                if not found:
                    # A gap. Under the 26-hour separation no fall-back is pending here.
                    if wall.year > last_year + _SEARCH_YEARS:
                        return
                    assert off0 is not None
                    if skips and wall - off0 > start:
                        while pending:
                            yield self._fire(*heapq.heappop(pending))
                        yield Skip(wall, _gap_note(wall, zone))
                    continue
                first = found[0]
                if interval and len(found) == 2:
                    label = wall.strftime("%H:%M")
                    notes = (
                        f"repeated hour: runs at both {label}s (first)",
                        f"repeated hour: runs at both {label}s (second)",
                    )
                    for u, note in zip(found, notes, strict=True):
                        if u > start:
                            heapq.heappush(pending, (u, wall, note))
                else:
                    note = None
                    if len(found) == 2:
                        note = f"repeated hour: runs once, at the first {wall:%H:%M}"
                    if first > start:
                        heapq.heappush(pending, (first, wall, note))
                # Every later wall time maps to instants after ``first``.
                while pending and pending[0][0] <= first:
                    last_year = wall.year
                    yield self._fire(*heapq.heappop(pending))
                if wall.year > last_year + _SEARCH_YEARS:
                    return
        except OverflowError:
            pass
        while pending:
            yield self._fire(*heapq.heappop(pending))

    # -- helpers ---------------------------------------------------------------------

    def _start(self, instant: datetime) -> tuple[datetime, datetime | None]:
        """(start as naive UTC, the naive wall time to enumerate from, or None at the calendar's end)."""
        start = as_utc(instant)
        try:
            local = start.astimezone(self.zone)
            ahead = (start + _AHEAD).astimezone(self.zone).utcoffset()
        except OverflowError:
            return _EPOCH + (start - _EPOCH_UTC), None
        offset = local.utcoffset()
        assert offset is not None and ahead is not None
        wall = local.replace(tzinfo=None)
        if ahead < offset:
            # A fall-back lies ahead: its walls come around again from (wall - shift).
            try:
                wall -= offset - ahead
            except OverflowError:
                wall = datetime.min  # noqa: DTZ901  naive wall time on purpose: cronsim input
        return _EPOCH + (start - _EPOCH_UTC), wall

    def _resolve(self, wall: datetime) -> tuple[datetime, ...]:
        """The real instants (naive UTC, ascending) showing ``wall``: none, one or two.

        Tries the offsets of ``fold=0`` and ``fold=1`` and keeps those that round-trip.
        """
        zone = self.zone
        off0 = zone.utcoffset(wall)
        off1 = zone.utcoffset(wall.replace(fold=1))
        assert off0 is not None and off1 is not None
        found = []
        for offset in sorted({off0, off1}, reverse=True):  # larger offset = earlier instant
            u = wall - offset
            back = u.replace(tzinfo=UTC).astimezone(zone).replace(tzinfo=None)
            if back == wall:
                found.append(u)
        return tuple(found)

    def _fire(self, u: datetime, wall: datetime, note: str | None) -> Fire:
        utc = _EPOCH_UTC + (u - _EPOCH)
        return Fire(utc, utc.astimezone(self.zone), note)


def _gap_note(wall: datetime, zone: ZoneInfo) -> str:
    before = wall.replace(tzinfo=zone)
    after = before.replace(fold=1)
    kind = "DST gap" if before.dst() != after.dst() else "clock change gap"
    return f"{kind}: {wall:%H:%M} does not exist on {wall:%Y-%m-%d}, skipped"
