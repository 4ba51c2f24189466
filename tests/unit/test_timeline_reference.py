"""Differential test: the timeline against a brute-force reading of the contract.

The reference walks every minute of real (UTC) time, converts it to the zone's
wall clock, and applies DESIGN.md §2 literally: a minute fires when its local
wall time matches every field (Vixie day rule included); gap minutes never
appear because no real instant shows them; a fixed-hour job drops a match whose
wall time already matched earlier (the second pass of a repeated hour).
It shares no code with clockd's parser: expressions are generated from a
structure that also gives the reference its sets.

Also home of the expression generator the property tests use.
"""

from __future__ import annotations

import calendar
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from itertools import islice, takewhile

import pytest

from clockd.core.cron import parse_cron
from clockd.core.timeline import CronTimeline, Fire, Skip
from clockd.core.zones import get_zone
from clockd.errors import NeverFires
from tests.unit.test_timeline_zonedata import transitions

# Zones with many or unusual changes (30-minute, 2-hour, midnight, whole-day), and UTC.
ZONES = [
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Tehran",
    "Pacific/Apia",
    "America/Havana",
    "Africa/Casablanca",
    "Antarctica/Troll",
    "Asia/Gaza",
    "America/Nuuk",
    "Pacific/Chatham",
    "Antarctica/Casey",
    "Europe/Moscow",
    "UTC",
]
MONTHS = "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split()
DAYS = "SUN MON TUE WED THU FRI SAT".split()


@dataclass
class Reference:
    """What an expression means, built independently of clockd's parser."""

    text: str = ""
    minutes: set[int] = field(default_factory=set)
    hours: set[int] = field(default_factory=set)
    months: set[int] = field(default_factory=set)
    dom_star: bool = False
    dow_star: bool = False
    dom_days: set[int] = field(default_factory=set)
    dom_last: bool = False
    dom_last_weekday: bool = False
    dom_nearest: set[int] = field(default_factory=set)
    dow_days: set[int] = field(default_factory=set)  # 0 = Sunday
    dow_last: set[int] = field(default_factory=set)
    dow_nth: set[tuple[int, int]] = field(default_factory=set)
    interval: bool = False

    def day_matches(self, d: date) -> bool:
        length = calendar.monthrange(d.year, d.month)[1]
        weekday = (d.weekday() + 1) % 7  # 0 = Sunday
        dom = d.day in self.dom_days
        if self.dom_last and d.day == length:
            dom = True
        if self.dom_last_weekday and d.day == max(
            day for day in range(length - 2, length + 1) if date(d.year, d.month, day).weekday() < 5
        ):
            dom = True
        for n in self.dom_nearest:
            if n <= length and d.day == _closest_weekday(d.year, d.month, n, length):
                dom = True
        dow = weekday in self.dow_days
        if weekday in self.dow_last and d.day + 7 > length:
            dow = True
        if (weekday, (d.day - 1) // 7 + 1) in self.dow_nth:
            dow = True
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow

    def matches(self, wall: datetime) -> bool:
        return (
            wall.minute in self.minutes
            and wall.hour in self.hours
            and wall.month in self.months
            and self.day_matches(wall.date())
        )


def _closest_weekday(year: int, month: int, n: int, length: int) -> int:
    """The Monday-Friday day of the month closest to n (earlier wins a tie, never leaves the month)."""
    candidates = [d for d in range(1, length + 1) if date(year, month, d).weekday() < 5]
    return min(candidates, key=lambda d: (abs(d - n), d))


def _plain(r: random.Random, low: int, high: int, names: list[str] | None, offset: int) -> tuple[str, set[int], bool]:
    """One list item of a plain field → (text, values, starts with *)."""

    def label(v: int) -> str:
        if names is not None and r.random() < 0.3 and 0 <= v - offset < len(names):
            name = names[v - offset]
            return name if r.random() < 0.5 else name.lower()
        return str(v)

    kind = r.choice(["single", "single", "range", "step", "star_step", "start_step"])
    if kind == "single":
        v = r.randint(low, high)
        return label(v), {v}, False
    if kind == "star_step":
        n = r.choice([1, 2, 3, 5, 7, 10, 15, 20, 30])
        return f"*/{n}", set(range(low, high + 1, n)), True
    a = r.randint(low, high)
    b = r.randint(a, high)
    if kind == "range":
        return f"{label(a)}-{label(b)}", set(range(a, b + 1)), False
    n = r.randint(1, max(1, (high - low) // 2))
    if kind == "step":
        return f"{label(a)}-{label(b)}/{n}", set(range(a, b + 1, n)), False
    return f"{a}/{n}", set(range(a, high + 1, n)), False


def _field(
    r: random.Random, low: int, high: int, names: list[str] | None, offset: int, star: float
) -> tuple[str, set[int], bool]:
    if r.random() < star:
        return "*", set(range(low, high + 1)), True
    items = [_plain(r, low, high, names, offset) for _ in range(r.choice([1, 1, 1, 2, 3]))]
    if len(items) > 1:  # a list starting with */n still "begins with *"
        items = [i for i in items if not i[2]] or items[:1]
    values: set[int] = set().union(*(i[1] for i in items))
    return ",".join(i[0] for i in items), values, items[0][2]


def random_expression(r: random.Random) -> Reference:
    """A random valid expression (that fires at least once), with its meaning."""
    while True:
        ref = Reference()
        minute, ref.minutes, _ = _field(r, 0, 59, None, 0, 0.15)
        if r.random() < 0.5:  # aim at the hours where clocks change
            hour_values = sorted(r.sample([0, 1, 2, 3, 4, 22, 23], r.choice([1, 1, 2])))
            hour = ",".join(map(str, hour_values))
            ref.hours = set(hour_values)
        else:
            hour, ref.hours, _ = _field(r, 0, 23, None, 0, 0.3)
        month, ref.months, _ = _field(r, 1, 12, MONTHS, 1, 0.75)

        # day-of-month
        if r.random() < 0.6:
            dom, ref.dom_star = "*", True
            ref.dom_days = set(range(1, 32))
        else:
            items = []
            for _ in range(r.choice([1, 1, 2])):
                kind = r.choice(["plain", "plain", "L", "LW", "W"])
                if kind == "L":
                    items.append("L")
                    ref.dom_last = True
                elif kind == "LW":
                    items.append("LW")
                    ref.dom_last_weekday = True
                elif kind == "W":
                    n = r.randint(1, 31)
                    items.append(f"{n}W")
                    ref.dom_nearest.add(n)
                else:
                    text, values, starred = _plain(r, 1, 31, None, 0)
                    if starred:
                        continue
                    items.append(text)
                    ref.dom_days |= values
            if not items:
                items, ref.dom_days = ["1"], {1}
            dom = ",".join(items)

        # day-of-week
        if r.random() < 0.6:
            dow, ref.dow_star = "*", True
            ref.dow_days = set(range(7))
        else:
            items = []
            for _ in range(r.choice([1, 1, 2])):
                kind = r.choice(["plain", "plain", "last", "nth"])
                d = r.randint(0, 7)
                name = DAYS[d % 7] if r.random() < 0.4 else str(d)
                if kind == "last":
                    items.append(f"{name}L")
                    ref.dow_last.add(d % 7)
                elif kind == "nth":
                    n = r.randint(1, 5)
                    items.append(f"{name}#{n}")
                    ref.dow_nth.add((d % 7, n))
                else:
                    text, values, starred = _plain(r, 0, 7, DAYS, 0)
                    if starred:
                        if items:
                            continue
                        ref.dow_star = True
                    items.append(text)
                    ref.dow_days |= {v % 7 for v in values}
            dow = ",".join(items)
        ref.text = f"{minute} {hour} {dom} {month} {dow}"
        ref.interval = hour.startswith("*")
        try:
            parse_cron(ref.text)
        except NeverFires:
            continue
        return ref


def brute_force(ref: Reference, tz: str, start: datetime, end: datetime) -> list[str]:
    """Fires in (start, end) by walking every real minute (see the module docstring)."""
    zone = get_zone(tz)
    seen: set[datetime] = set()
    out: list[str] = []
    u = start.replace(second=0, microsecond=0) - timedelta(hours=26)
    while u < end:
        local = u.astimezone(zone)
        wall = local.replace(tzinfo=None, fold=0)
        if ref.matches(wall):
            first_time = wall not in seen
            seen.add(wall)
            if u > start and (ref.interval or first_time):
                out.append(local.isoformat())
        u += timedelta(minutes=1)
    return out


def timeline_fires(ref: Reference, tz: str, start: datetime, end: datetime) -> list[str]:
    tl = CronTimeline(parse_cron(ref.text), get_zone(tz))
    fires = takewhile(lambda f: f.utc < end, tl.fires_after(start))
    return [f.local.isoformat() for f in islice(fires, 5000)]


def _case(seed: int) -> tuple[Reference, str, datetime, datetime]:
    """A random expression, zone and 3-day window around one of the zone's changes.

    The expression is drawn again until some day of the window matches its day and
    month fields, so most windows have fires to compare."""
    r = random.Random(seed)
    tz = r.choice(ZONES[:-1])
    changes = transitions(tz, 1970, 2038)
    if changes and r.random() < 0.9:
        center = r.choice(changes)
    else:
        center = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=r.randint(0, 365 * 67))
    start = center - timedelta(hours=36) + timedelta(seconds=r.randint(0, 12 * 3600))
    if r.random() < 0.3:
        start = start.replace(second=0)
    days = [(start + timedelta(days=k)).date() for k in range(-1, 5)]
    for _ in range(50):
        ref = random_expression(r)
        if any(d.month in ref.months and ref.day_matches(d) for d in days):
            break
    return ref, tz, start, start + timedelta(days=3)


@pytest.mark.parametrize("batch", range(8))
def test_timeline_agrees_with_brute_force(batch: int) -> None:
    # 8 batches × 25 cases = 200 random (expression, zone, 3-day window near a change).
    for seed in range(batch * 25, batch * 25 + 25):
        ref, tz, start, end = _case(seed)
        expected = brute_force(ref, tz, start, end)
        assert timeline_fires(ref, tz, start, end) == expected, (seed, ref.text, tz, start.isoformat())


@pytest.mark.parametrize(
    ("text", "tz", "start"),
    [
        ("*/7 * * * *", "Europe/Paris", "2026-10-24T22:00:00+00:00"),
        ("*/10 0-3 * * *", "Australia/Lord_Howe", "2026-04-04T12:00:00+00:00"),
        ("5,35 1,2 * * *", "Australia/Lord_Howe", "2026-10-02T12:00:00+00:00"),
        ("0,30 23,0 * * *", "America/Santiago", "2026-04-03T12:00:00+00:00"),
        ("0,30 23,0 * * *", "America/Santiago", "2026-09-04T12:00:00+00:00"),
        ("*/15 * 29-31 12 *", "Pacific/Apia", "2011-12-28T12:00:00+00:00"),
        ("0 * * * *", "Antarctica/Troll", "2026-03-28T12:00:00+00:00"),
        ("0 * * * *", "Antarctica/Troll", "2026-10-24T12:00:00+00:00"),
        ("*/20 0,1 * * *", "America/Havana", "2026-03-07T12:00:00+00:00"),
        ("45 * * * *", "Pacific/Chatham", "2026-04-04T00:00:00+00:00"),
        ("30 * * * *", "Antarctica/Casey", "2018-03-09T00:00:00+00:00"),
        ("30 1-4 * * *", "Antarctica/Casey", "2018-03-09T00:00:00+00:00"),
    ],
)
def test_known_hard_cases_agree_with_brute_force(text: str, tz: str, start: str) -> None:
    expr = parse_cron(text)
    ref = Reference(text=text, interval=expr.is_interval)
    ref.minutes, ref.hours = _expand(text.split()[0], 0, 59), _expand(text.split()[1], 0, 23)
    ref.months = _expand(text.split()[3], 1, 12)
    ref.dom_days, ref.dom_star = _expand(text.split()[2], 1, 31), True
    ref.dow_days, ref.dow_star = set(range(7)), True
    begin = datetime.fromisoformat(start)
    assert timeline_fires(ref, tz, begin, begin + timedelta(days=3)) == brute_force(
        ref, tz, begin, begin + timedelta(days=3)
    )


def _expand(text: str, low: int, high: int) -> set[int]:
    out: set[int] = set()
    for item in text.split(","):
        base, _, step = item.partition("/")
        if base == "*":
            a, b = low, high
        else:
            first, _, last = base.partition("-")
            a, b = int(first), int(last or first)
        out |= set(range(a, b + 1, int(step) if step else 1))
    return out


def test_skips_are_exactly_the_matching_wall_times_that_do_not_exist() -> None:
    cases: list[tuple[str, str, str]] = [
        ("*/10 2 * * *", "Europe/Paris", "2026-03-28T12:00:00+00:00"),
        ("0 0 * * *", "America/Santiago", "2026-09-05T12:00:00+00:00"),
        ("*/15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00+00:00"),
        ("0 */4 * * *", "Pacific/Apia", "2011-12-29T00:00:00+00:00"),
    ]
    for text, tz, start in cases:
        zone = get_zone(tz)
        tl = CronTimeline(parse_cron(text), zone)
        begin = datetime.fromisoformat(start)
        end = begin + timedelta(days=2)
        skipped = []
        for event in tl.events_after(begin):
            if isinstance(event, Fire) and event.utc >= end:
                break
            if isinstance(event, Skip):
                skipped.append(event.wall)
        # Every matching wall time in the window that no real instant shows.
        expected = []
        wall = (begin.astimezone(zone).replace(tzinfo=None) + timedelta(minutes=1)).replace(second=0, microsecond=0)
        ref = _walls_matching(text)
        while wall < end.astimezone(zone).replace(tzinfo=None):
            real = [wall.replace(tzinfo=zone, fold=f) for f in (0, 1)]
            exists = any(r.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall for r in real)
            if ref(wall) and not exists:
                expected.append(wall)
            wall += timedelta(minutes=1)
        assert skipped == expected and expected, (text, tz)


def _walls_matching(text: str) -> Callable[[datetime], bool]:
    minute, hour, dom, month, _ = text.split()
    minutes, hours = _expand(minute, 0, 59), _expand(hour, 0, 23)
    days, months = _expand(dom, 1, 31), _expand(month, 1, 12)
    return lambda w: w.minute in minutes and w.hour in hours and w.day in days and w.month in months
