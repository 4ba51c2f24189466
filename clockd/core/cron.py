"""Cron expressions: clockd's own parser and messages, cronsim as a naive wall-time enumerator.

This is the only module that imports ``cronsim`` (pinned). It is used for one
thing: enumerating **naive local wall-clock times** that match an expression.
``clockd.core.timeline`` turns those into real instants in a zone; cronsim's
own tz-aware mode never sees a datetime from us.

Syntax (Vixie cron, plus the common extensions):

* exactly five fields: minute (0-59), hour (0-23), day-of-month (1-31),
  month (1-12 or JAN-DEC), day-of-week (0-7 or SUN-SAT, 0 and 7 are Sunday);
  names are case-insensitive; a seconds field is refused;
* items: ``*``, ``a``, ``a-b`` (``a-a`` is ``a``), ``*/n``, ``a-b/n``, ``a/n``
  (``a`` up to the field's maximum), comma lists;
* day-of-month also takes ``L`` (last day), ``LW`` (last weekday) and ``nW``
  (the weekday nearest day ``n`` within the same month; a month without day
  ``n`` has no match, as for a plain ``n``); day-of-week also takes ``dL``
  (last weekday ``d`` of the month) and ``d#n`` (the n-th weekday ``d``, n 1-5);
* macros ``@yearly @annually @monthly @weekly @daily @midnight @hourly``;
  ``@reboot`` is refused (clockd has no boot event).

Semantics: when day-of-month or day-of-week begins with ``*`` a day must match
both, otherwise either (Vixie cron; cronsim's ``day_and``).

Enumeration: the expressions most schedules use — plain minutes and hours, every month,
and a day-of-month or a day-of-week that is ``*`` (``m h * * *``, ``m h * * 1-5``,
``m h d * *``) — are enumerated by :func:`_plain_walls`, a walk of the calendar's days
with the fields' sorted values: the first wall time after a start in 2-3 µs, against
3.5 µs (``* * * * *``) to 22 µs (``m h d * *``) for cronsim's general search, whose first
step was a third of ``clockctl apply``'s planning (issue 18). Every other
expression goes to cronsim. ``tests/unit/test_cron_walls.py`` holds the two to the same
answers for any plain expression and start.

Invariants:
* :func:`parse_cron` either returns a :class:`CronExpr` that fires at least
  once (checked statically and by a bounded enumeration) or raises
  :class:`~clockd.errors.InvalidCron` / :class:`~clockd.errors.NeverFires`
  with a message naming the field and the value;
* :meth:`CronExpr.walls_after` yields naive wall times strictly after its
  naive start, strictly increasing, and always terminates when no match exists
  within 50 years (cronsim's window) or at the end of the calendar.
"""

from __future__ import annotations

import calendar
import dataclasses
import re
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import lru_cache

from cronsim import CronSim, CronSimError
from cronsim.explain import Expression, ordinal

from clockd.errors import InvalidCron, NeverFires

__all__ = ["FIELD_NAMES", "MACROS", "CronExpr", "parse_cron"]

FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_FIELDS_HINT = f"expected 5 fields ({' '.join(FIELD_NAMES)})"

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_NAMES = {name: i + 1 for i, name in enumerate(_MONTHS)}
_DAY_NAMES = {name: i for i, name in enumerate(_DAYS)}
# Longest each month can be (February: 29, leap years).
_MONTH_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

_NUMBER = re.compile(r"[0-9]+")
# Past this many significant digits every cron range is exceeded anyway; and int()
# refuses digit strings over 4300 characters (a ValueError, not an InvalidCron).
_MAX_DIGITS = 9


def _int(text: str) -> int:
    """``int`` of a digit string, saturating at 10**9 instead of failing on huge input."""
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= _MAX_DIGITS else 10**_MAX_DIGITS


def _shown(text: str) -> str:
    return text if len(text) <= 20 else text[:20] + "…"


_W_ITEM = re.compile(r"([0-9]+)W")

# The fixed naive start of the parse-time "does it ever fire" enumeration.
_PROBE_START = datetime(2000, 1, 1)  # noqa: DTZ001  naive wall time on purpose: cronsim input
# Give up when no match exists this many years after the last one (cronsim uses 50 too).
_SEARCH_YEARS = 50


@dataclass(frozen=True, slots=True)
class _Field:
    index: int
    name: str
    low: int
    high: int
    names: dict[str, int] | None

    def value(self, text: str) -> int:
        """One value (number or name), checked against the field's range."""
        upper = text.upper()
        if self.names is not None and upper in self.names:
            return self.names[upper]
        if not _NUMBER.fullmatch(text):
            if text == "":
                raise InvalidCron(f"{self.name}: missing value")
            if self.names is not None and text.isalpha():
                raise InvalidCron(f"{self.name}: unknown name {text!r}")
            raise InvalidCron(f"{self.name}: {text!r} is not a number")
        number = _int(text)
        if not self.low <= number <= self.high:
            raise InvalidCron(f"{self.name}: {_shown(text.lstrip('0') or '0')} is out of range {self.low}-{self.high}")
        return number

    def step(self, text: str) -> int:
        if not _NUMBER.fullmatch(text):
            raise InvalidCron(f"{self.name}: step {text!r} is not a number")
        number = _int(text)
        if number == 0:
            raise InvalidCron(f"{self.name}: step 0 is not allowed")
        return number


_SPECS = (
    _Field(0, "minute", 0, 59, None),
    _Field(1, "hour", 0, 23, None),
    _Field(2, "day-of-month", 1, 31, None),
    _Field(3, "month", 1, 12, _MONTH_NAMES),
    _Field(4, "day-of-week", 0, 7, _DAY_NAMES),
)


@dataclass(frozen=True, slots=True)
class _Parsed:
    """One field: the numeric texts for cronsim and for its explain(), and what the day
    filter needs."""

    cronsim: str
    explain: str
    values: frozenset[int]  # plain values (ranges and steps expanded); DOW 7 folded to 0
    last: bool = False  # day-of-month L
    last_weekday: bool = False  # day-of-month LW
    nearest: tuple[int, ...] = ()  # day-of-month nW


def _parse_item(spec: _Field, item: str) -> tuple[str, set[int], str | None, int | None]:
    """One comma-separated item → (numeric text, plain values, special kind, W day)."""
    if item == "":
        raise InvalidCron(f"{spec.name}: empty item in the list")
    upper = item.upper()
    if spec.index == 2:
        if upper == "L":
            return "L", set(), "L", None
        if upper == "LW":
            return "LW", set(), "LW", None
        if match := _W_ITEM.fullmatch(upper):
            day = spec.value(match.group(1))
            # cronsim has no nW: it gets the candidate days, the day filter picks the real one.
            return f"{max(1, day - 2)}-{min(31, day + 2)}", set(), "W", day
        if "W" in upper and not upper.isalpha():
            raise InvalidCron(f"{spec.name}: {item!r} is not valid (nW takes one day, e.g. 15W)")
    if spec.index == 4:
        if "#" in item:
            day_text, nth_text = item.split("#", 1)
            day = spec.value(day_text) % 7
            if not _NUMBER.fullmatch(nth_text):
                raise InvalidCron(f"{spec.name}: {item!r} is not valid (use d#n, e.g. MON#2)")
            nth = _int(nth_text)
            if not 1 <= nth <= 5:
                raise InvalidCron(f"{spec.name}: occurrence {_shown(nth_text)} in {_shown(item)!r} is out of range 1-5")
            return f"{day}#{nth}", set(), "#", None
        if upper.endswith("L") and upper not in _DAY_NAMES:
            if upper == "L":
                raise InvalidCron(f"{spec.name}: 'L' needs a day before it, e.g. 5L (last Friday)")
            day = spec.value(item[:-1]) % 7
            return f"{day}L", set(), "dL", None

    base, slash, step_text = item.partition("/")
    step = spec.step(step_text) if slash else 1
    if base == "*":
        low, high = spec.low, spec.high
        text = f"*/{step}" if slash else "*"
    elif "-" in base:
        first, _, last = base.partition("-")
        if "-" in last:
            raise InvalidCron(f"{spec.name}: {item!r} is not a valid range")
        low = spec.value(first)
        high = spec.value(last)
        if spec.index == 4 and high == 0 and low > 0 and last.upper() == "SUN":
            high = 7  # "FRI-SUN": Sunday closing a range is day 7, not a reversed range
        if high < low:
            raise InvalidCron(f"{spec.name}: range {base} is reversed")
        if low == high and not slash:
            text = str(low)
        else:
            text = f"{low}-{high}" + (f"/{step}" if slash else "")
    else:
        if spec.index == 2 and (base.upper() in ("L", "LW") or _W_ITEM.fullmatch(base.upper())):
            raise InvalidCron(f"{spec.name}: {base!r} does not take a step")
        low = spec.value(base)
        high = spec.high if slash else low
        text = f"{low}/{step}" if slash else str(low)
    values = set(range(low, high + 1, step))
    if spec.index == 4:
        values = {v % 7 for v in values}
    return text, values, None, None


def _parse_field(spec: _Field, text: str) -> _Parsed:
    cronsim_parts: list[str] = []
    explain_parts: list[str] = []
    values: set[int] = set()
    last = last_weekday = False
    nearest: list[int] = []
    for item in text.split(","):
        item_text, item_values, special, w_day = _parse_item(spec, item)
        explain_parts.append(str(w_day) if w_day is not None else item_text)
        if special is None and "/" in item_text and not item_text.startswith("*"):
            # cronsim reads "a-a/n" as "a/n" (a to the end); spell the values out instead.
            cronsim_parts.append(",".join(str(v) for v in sorted(item_values)))
        else:
            cronsim_parts.append(item_text)
        values |= item_values
        if special == "L":
            last = True
        elif special == "LW":
            last_weekday = True
        elif w_day is not None:
            nearest.append(w_day)
    return _Parsed(
        ",".join(cronsim_parts),
        ",".join(explain_parts),
        frozenset(values),
        last,
        last_weekday,
        tuple(sorted(nearest)),
    )


@lru_cache(maxsize=4096)
def _parsed_field(index: int, text: str) -> _Parsed:
    """``_parse_field`` of field ``index``, cached by its text (a pure function; ``_Parsed``
    is immutable; a refusal is not cached, it is raised again). Expressions share their
    fields — ``*``, ``1-5``, one of 60 minutes — and parsing the five fields was half of a
    parse: an apply of 100,000 schedules parses ~12,000 distinct expressions (47 µs each
    before this cache, 2026-12-07)."""
    return _parse_field(_SPECS[index], text)


def _nearest_weekday(year: int, month: int, day: int) -> int | None:
    """The weekday (Mon-Fri) nearest ``day`` within the month; None if the month is shorter."""
    length = calendar.monthrange(year, month)[1]
    if day > length:
        return None
    weekday = date(year, month, day).weekday()
    if weekday == 5:  # Saturday → Friday before, unless that leaves the month
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday → Monday after, unless that leaves the month
        return day + 1 if day < length else day - 2
    return day


def _last_weekday(year: int, month: int) -> int:
    length = calendar.monthrange(year, month)[1]
    weekday = date(year, month, length).weekday()
    return length - max(0, weekday - 4)


@dataclass(frozen=True, slots=True)
class CronExpr:
    """A parsed, validated cron expression (immutable, cached by :func:`parse_cron`).

    * ``source`` — the text as given;
    * ``normalized`` — the five fields after macro expansion, upper-cased,
      single-spaced (names kept): what clockd stores;
    * ``is_interval`` — the hour field starts with ``*`` (``*`` or ``*/n``):
      the job fires at every real instant that matches, both passes of a
      repeated hour included; otherwise it is a fixed-hour job and a repeated
      wall time runs once, at its first instant (DESIGN.md §2).
    """

    source: str
    normalized: str
    is_interval: bool
    fields: tuple[str, str, str, str, str]
    _cronsim_expr: str = field(repr=False, compare=False)
    _explain_expr: str = field(repr=False, compare=False)
    _nearest: tuple[int, ...] = field(repr=False, compare=False)
    # cronsim's parsed expression, cloned for each enumeration; None for a plain one (its
    # walls come from _plain_walls; _new_iterator parses one when a test asks).
    _proto: CronSim | None = field(repr=False, compare=False, hash=False)
    _day_ok: Callable[[date], bool] | None = field(repr=False, compare=False, hash=False)
    # The fields as _plain_walls takes them, when the expression is one it enumerates.
    _plain: _PlainFields | None = field(default=None, repr=False, compare=False, hash=False)
    # The first naive wall time after _PROBE_START that matches (the parse-time probe's
    # answer, kept: ``validate_definition`` reads it instead of enumerating again).
    probe_wall: datetime | None = field(default=None, repr=False, compare=False, hash=False)

    def walls_after(self, start: datetime) -> Iterator[datetime]:
        """Naive wall times matching the expression, strictly after the naive ``start``.

        Strictly increasing; ends when nothing matches for 50 years after the
        last match (or the calendar ends). ``start`` must be naive.
        """
        if start.tzinfo is not None:
            raise ValueError("walls_after takes a naive wall time")
        iterator = self.raw_walls(start)
        try:
            yield from iterator
        except OverflowError:
            return

    def raw_walls(self, start: datetime) -> Iterator[datetime]:
        """Like :meth:`walls_after` but may raise ``OverflowError`` at the end of the calendar.

        The hot path of the timeline: no extra generator layer for plain expressions.
        """
        if self._plain is not None:
            return _plain_walls(self._plain, start)
        it = self._new_iterator(start)
        if self._day_ok is None:
            return it
        return self._filtered(it, self._day_ok)

    @staticmethod
    def _filtered(it: CronSim, day_ok: Callable[[date], bool]) -> Iterator[datetime]:
        # cronsim was given candidate days around each nW day; keep the real ones.
        # The candidates include every real match; the year bound is a second guard.
        last_year = it.dt.year
        for wall in it:
            if day_ok(wall.date()):
                last_year = wall.year
                yield wall
            elif wall.year > last_year + _SEARCH_YEARS:
                return

    def _new_iterator(self, start: datetime) -> CronSim:
        # Re-parsing the expression for each call costs as much as several steps;
        # clone the parsed prototype instead (cronsim is pinned; tests cover this).
        # Attributes are set one by one, in __init__'s order, so the clone keeps CPython's
        # shared-key instance layout (a dict.update() clone iterates ~30% slower).
        proto = self._proto if self._proto is not None else _cronsim(self._cronsim_expr)
        it: CronSim = object.__new__(CronSim)
        for name, value in proto.__dict__.items():
            setattr(it, name, value)
        it.dt = start.replace(microsecond=0) if start.microsecond else start
        it.skip_initial_tick = False
        return it

    def first_wall_after(self, start: datetime) -> datetime | None:
        return next(iter(self.walls_after(start)), None)

    def describe(self) -> str:
        """One line of English, e.g. ``At 09:00 on Monday through Friday``. Never raises."""
        try:
            return _describe(self)
        except Exception:  # cronsim's explain() is best-effort text; never fail for it
            return f"cron {self.normalized}"

    def __str__(self) -> str:
        return self.normalized


def _describe(expr: CronExpr) -> str:
    text: str = Expression(expr._explain_expr.split()).explain()
    nearest = expr._nearest
    for day in nearest:
        nth = ordinal(day)
        replaced = text.replace(f"the {nth} day of", f"the weekday nearest the {nth} day of", 1)
        if replaced == text:
            replaced = re.sub(
                rf"\b(January|February|March|April|May|June|July|August|September|October|"
                rf"November|December) {day}\b",
                rf"the weekday nearest \1 {day}",
                text,
                count=1,
            )
        if replaced == text:
            replaced = f"{text} (day {day}: the nearest weekday)"
        text = replaced
    return text


def _split(expr: str) -> list[str]:
    text = expr.strip()
    if text.startswith("@"):
        macro = text.lower()
        if macro == "@reboot":
            raise InvalidCron(
                "@reboot is not supported: clockd has no boot event (use a systemd unit, or a `once` schedule)"
            )
        if macro not in MACROS:
            known = ", ".join(MACROS)
            raise InvalidCron(f"unknown macro {text!r} (known: {known})")
        text = MACROS[macro]
    fields = text.split()
    if len(fields) != 5:
        raise InvalidCron(f"{_FIELDS_HINT}, got {len(fields)}")
    return fields


def _check_days_exist(dom_text: str, dom: _Parsed, month: _Parsed, day_and: bool) -> None:
    """``0 0 31 2 *``: the day-of-month never occurs in any selected month."""
    if not day_and or dom_text.startswith("*") or dom.last or dom.last_weekday:
        return
    days = set(dom.values) | set(dom.nearest)
    if not days:
        return
    months = sorted(month.values)
    if any(min(days) <= _MONTH_DAYS[m] for m in months):
        return
    names = ", ".join(_MONTHS[m - 1] for m in months)
    raise NeverFires(f"day-of-month: {dom_text.upper()} never occurs in {names}")


def _make_day_filter(dom: _Parsed, proto: CronSim) -> Callable[[date], bool]:
    plain = dom.values
    nearest = dom.nearest
    last = dom.last
    last_weekday = dom.last_weekday
    day_and = bool(proto.day_and)
    match_dow: Callable[[date], bool] = proto.match_dow

    def dom_ok(d: date) -> bool:
        if d.day in plain:
            return True
        if last and d.day == calendar.monthrange(d.year, d.month)[1]:
            return True
        if last_weekday and d.day == _last_weekday(d.year, d.month):
            return True
        return any(_nearest_weekday(d.year, d.month, n) == d.day for n in nearest)

    if day_and:
        return lambda d: dom_ok(d) and match_dow(d)
    return lambda d: dom_ok(d) or match_dow(d)


@lru_cache(maxsize=16384)
def parse_cron(expr: str) -> CronExpr:
    """Parse and validate a cron expression (cached: it is on the hot path; ~1 KB each for
    a plain one, so fewer than ``validate_definition`` keeps of its small entries — a
    100,000-schedule apply has ~12,000 distinct expressions, and 4,096 had the validator
    parse again).

    Raises :class:`InvalidCron` for bad syntax and :class:`NeverFires` for an
    expression with no matching date, messages naming field and value, e.g.
    ``minute: 61 is out of range 0-59``, ``day-of-month: 31 never occurs in FEB``.
    """
    fields = _split(expr)
    parsed = [_parsed_field(index, text) for index, text in enumerate(fields)]
    day_and = fields[2].startswith("*") or fields[4].startswith("*")
    _check_days_exist(fields[2], parsed[2], parsed[3], day_and)

    cronsim_expr = " ".join(p.cronsim for p in parsed)
    plain = _plain_fields(fields, parsed)
    proto: CronSim | None = None
    day_ok = None
    if plain is None:  # a plain expression never reaches cronsim (a fifth of a parse, ~3 KB)
        try:
            proto = _cronsim(cronsim_expr)
        except CronSimError as exc:  # pragma: no cover - our parser rejects first
            raise InvalidCron(f"{' '.join(fields)}: {exc}") from None
        day_ok = _make_day_filter(parsed[2], proto) if parsed[2].nearest else None
    upper = [f.upper() for f in fields]
    normalized = " ".join(upper)
    result = CronExpr(
        source=expr,
        normalized=normalized,
        is_interval=fields[1].startswith("*"),
        fields=(upper[0], upper[1], upper[2], upper[3], upper[4]),
        _cronsim_expr=cronsim_expr,
        _explain_expr=" ".join(p.explain for p in parsed),
        _nearest=parsed[2].nearest,
        _proto=proto,
        _day_ok=day_ok,
        _plain=plain,
    )
    probe_wall = result.first_wall_after(_PROBE_START)
    if probe_wall is None:
        raise NeverFires(f"{normalized}: no date ever matches every field")
    return dataclasses.replace(result, probe_wall=probe_wall)


def _cronsim(cronsim_expr: str) -> CronSim:
    return CronSim(cronsim_expr, _PROBE_START)


@dataclass(frozen=True, slots=True)
class _PlainFields:
    """An expression :func:`_plain_walls` enumerates: sorted minutes and hours, and the
    day rule — days of the month (None: any) and days of the week, 0 = Sunday (None: any)."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    month_days: frozenset[int] | None
    weekdays: frozenset[int] | None


def _plain_fields(fields: list[str], parsed: list[_Parsed]) -> _PlainFields | None:
    """The fields for :func:`_plain_walls`, or None for an expression left to cronsim: a
    month other than ``*``, a day-of-month and a day-of-week both not ``*`` (Vixie's "either"
    rule, and days that may be years apart), or ``L``/``W``/``#`` items."""
    dom, dow = fields[2], fields[4]
    if fields[3] != "*" or (dom != "*" and dow != "*"):
        return None
    if parsed[2].last or parsed[2].last_weekday or parsed[2].nearest or any(c in dow.upper() for c in "#L"):
        return None
    return _PlainFields(
        tuple(sorted(parsed[0].values)),
        tuple(sorted(parsed[1].values)),
        None if dom == "*" else parsed[2].values,
        None if dow == "*" else parsed[4].values,
    )


_DAY = timedelta(days=1)
_MINUTE = timedelta(minutes=1)


def _plain_walls(plain: _PlainFields, start: datetime) -> Iterator[datetime]:
    """The matching wall times strictly after the naive ``start``, in order, as cronsim
    gives them: a walk of the days from ``start``'s, each day that matches giving its
    hours and minutes in order. Every month is allowed and one of the day fields is ``*``,
    so a match comes within 62 days; the walk ends with ``OverflowError`` at the end of
    the calendar (``raw_walls``' contract)."""
    first = start.replace(second=0, microsecond=0) + _MINUTE
    minutes, hours = plain.minutes, plain.hours
    month_days, weekdays = plain.month_days, plain.weekdays
    day = first.date()
    hour_from, minute_from = first.hour, first.minute
    while True:
        if (month_days is None or day.day in month_days) and (weekdays is None or (day.weekday() + 1) % 7 in weekdays):
            y, mo, d = day.year, day.month, day.day
            for h in hours[bisect_left(hours, hour_from) :]:
                for m in minutes[bisect_left(minutes, minute_from if h == hour_from else 0) :]:
                    yield datetime(y, mo, d, h, m)  # noqa: DTZ001  naive wall time on purpose (module docstring)
        day += _DAY
        hour_from = minute_from = 0
