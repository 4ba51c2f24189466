"""The facts about the zone data that ``clockd.core.timeline`` relies on, checked for every zone.

The timeline decides with one look-up 26 hours ahead whether a clock change is
near (see its module docstring). That is exact as long as, in the pinned tzdata:

* no clock change shifts the clocks by more than 24 hours;
* two clock changes are more than 26 hours apart in real time, and the wall
  times they affect (the gap or the repeated span) are more than 26 hours apart.

A new tzdata release that breaks one of these fails here, not in production.
Also home of :func:`transitions`, which other timeline tests use to aim at changes.
"""

from __future__ import annotations

import importlib.resources
import struct
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import pairwise

from clockd.core.zones import available_zones, get_zone

AHEAD = timedelta(hours=26)
MAX_SHIFT = timedelta(hours=24)


@cache
def _tzif(name: str) -> tuple[list[tuple[int, int, int]], str]:
    """Explicit transitions (utc seconds, offset before, offset after) and the TZ footer."""
    package, _, leaf = ("tzdata.zoneinfo/" + name).rpartition("/")
    data = importlib.resources.files(package.replace("/", ".")).joinpath(leaf).read_bytes()
    header = struct.Struct(">4sc15x6l")

    def counts(offset: int) -> tuple[int, int, int, int, int, int]:
        _, _, isut, isstd, leap, timecnt, typecnt, charcnt = header.unpack_from(data, offset)
        return isut, isstd, leap, timecnt, typecnt, charcnt

    isut, isstd, leap, timecnt, typecnt, charcnt = counts(0)
    if data[4:5] == b"\x00":  # version 1 only: 32-bit data
        size, offset, fmt = 4, header.size, "l"
    else:
        offset = header.size + timecnt * 5 + typecnt * 6 + charcnt + leap * 8 + isstd + isut
        isut, isstd, leap, timecnt, typecnt, charcnt = counts(offset)
        size, offset, fmt = 8, offset + header.size, "q"
    times = struct.unpack_from(f">{timecnt}{fmt}", data, offset)
    offset += timecnt * size
    indices = data[offset : offset + timecnt]
    offset += timecnt
    types = [struct.unpack_from(">lbB", data, offset + 6 * i) for i in range(typecnt)]
    offset += typecnt * 6 + charcnt + leap * (size + 4) + isstd + isut
    footer = data[offset:].decode().strip() if size == 8 else ""
    result: list[tuple[int, int, int]] = []
    before = types[0][0]
    for when, index in zip(times, indices, strict=True):
        after = types[index][0]
        if after != before:
            result.append((when, before, after))
        before = after
    return result, footer


def transitions(name: str, year_from: int = 1900, year_to: int = 2100) -> list[datetime]:
    """Instants (aware UTC) at which ``name`` changes its UTC offset, in [year_from, year_to)."""
    low = datetime(year_from, 1, 1, tzinfo=UTC)
    high = datetime(year_to, 1, 1, tzinfo=UTC)
    found = [
        datetime.fromtimestamp(when, UTC) for when, _, _ in _tzif(name)[0] if low.timestamp() <= when < high.timestamp()
    ]
    last = datetime.fromtimestamp(_tzif(name)[0][-1][0], UTC) if _tzif(name)[0] else low
    # Past the explicit list, the footer rule applies: find its changes by scanning.
    zone = get_zone(name)
    t = max(low, last + timedelta(hours=1))
    step = timedelta(days=1)  # footer rules change twice a year at most, months apart
    previous = t.astimezone(zone).utcoffset()
    while t < high and _tzif(name)[1].count(",") >= 2:
        nxt = t + step
        offset = nxt.astimezone(zone).utcoffset()
        if offset != previous:
            lo, hi = t, nxt
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(zone).utcoffset() == previous:
                    lo = mid
                else:
                    hi = mid
            found.append(hi.replace(second=0, microsecond=0))
            previous = offset
        t = nxt
    return sorted(found)


def test_the_parser_reads_known_transitions() -> None:
    paris = [t.isoformat() for t in transitions("Europe/Paris", 2026, 2027)]
    assert paris == ["2026-03-29T01:00:00+00:00", "2026-10-25T01:00:00+00:00"]
    apia = [t.isoformat() for t in transitions("Pacific/Apia", 2011, 2012)]
    assert apia[-1] == "2011-12-30T10:00:00+00:00"
    assert transitions("Asia/Tehran", 2023, 2030) == []


def _changes(name: str) -> list[tuple[int, int, int]]:
    """Every offset change: explicit ones, then the footer rule's for 30 years (its pattern
    repeats with the 28-year calendar cycle)."""
    explicit = _tzif(name)[0]
    zone = get_zone(name)
    out = list(explicit)
    last = explicit[-1][0] if explicit else int(datetime(1900, 1, 1, tzinfo=UTC).timestamp())
    last_year = datetime.fromtimestamp(last, UTC).year
    for t in transitions(name, max(1900, last_year), max(1900, last_year) + 30):
        when = int(t.timestamp())
        if when > last:
            offset_before = (t - timedelta(seconds=1)).astimezone(zone).utcoffset()
            offset_after = t.astimezone(zone).utcoffset()
            assert offset_before is not None and offset_after is not None  # aware: astimezone(zone)
            out.append((when, int(offset_before.total_seconds()), int(offset_after.total_seconds())))
    return out


def test_zone_data_meets_the_timeline_assumptions() -> None:
    problems = []
    for name in sorted(available_zones()):
        changes = _changes(name)
        for when, before, after in changes:
            if abs(after - before) > MAX_SHIFT.total_seconds():
                problems.append(f"{name}: shift at {datetime.fromtimestamp(when, UTC)}")
        for (t1, b1, a1), (t2, b2, a2) in pairwise(changes):
            at = datetime.fromtimestamp(t1, UTC)
            if t2 - t1 <= AHEAD.total_seconds():
                problems.append(f"{name}: changes at {at} too close in real time")
            # Wall-time spans affected by each change (the gap, or the repeated span).
            if (t2 + min(b2, a2)) - (t1 + max(b1, a1)) <= AHEAD.total_seconds():
                problems.append(f"{name}: changes at {at} too close in wall time")
    assert problems == []
