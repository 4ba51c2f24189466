"""Cron parsing: the accepted syntax, our error messages (exactly), and the naive enumeration."""

from __future__ import annotations

from datetime import datetime
from itertools import islice

import pytest

from clockd.core.cron import CronExpr, parse_cron
from clockd.errors import InvalidCron, InvalidInput, NeverFires


def walls(expr: str, start: str, n: int = 4) -> list[str]:
    found = parse_cron(expr).walls_after(datetime.fromisoformat(start))
    return [w.isoformat(timespec="minutes") for w in islice(found, n)]


# -- messages ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "error", "message"),
    [
        ("61 * * * *", InvalidCron, "minute: 61 is out of range 0-59"),
        ("0 24 * * *", InvalidCron, "hour: 24 is out of range 0-23"),
        ("0 0 0 * *", InvalidCron, "day-of-month: 0 is out of range 1-31"),
        ("0 0 32 * *", InvalidCron, "day-of-month: 32 is out of range 1-31"),
        ("0 0 * 13 *", InvalidCron, "month: 13 is out of range 1-12"),
        ("0 0 * * 8", InvalidCron, "day-of-week: 8 is out of range 0-7"),
        ("0 0 31 2 *", NeverFires, "day-of-month: 31 never occurs in FEB"),
        ("0 0 30 2 *", NeverFires, "day-of-month: 30 never occurs in FEB"),
        ("0 0 31 4,6,9,11 *", NeverFires, "day-of-month: 31 never occurs in APR, JUN, SEP, NOV"),
        ("0 0 30,31 feb *", NeverFires, "day-of-month: 30,31 never occurs in FEB"),
        ("0 0 31W 2 *", NeverFires, "day-of-month: 31W never occurs in FEB"),
        ("0 5-3 * * *", InvalidCron, "hour: range 5-3 is reversed"),
        ("0 0 * * FRI-MON", InvalidCron, "day-of-week: range FRI-MON is reversed"),
        ("*/0 * * * *", InvalidCron, "minute: step 0 is not allowed"),
        ("0 1-5/0 * * *", InvalidCron, "hour: step 0 is not allowed"),
        ("*/x * * * *", InvalidCron, "minute: step 'x' is not a number"),
        ("0 0 * * * *", InvalidCron, "expected 5 fields (minute hour day-of-month month day-of-week), got 6"),
        ("0 0 * *", InvalidCron, "expected 5 fields (minute hour day-of-month month day-of-week), got 4"),
        ("", InvalidCron, "expected 5 fields (minute hour day-of-month month day-of-week), got 0"),
        ("0 0 * * FOO", InvalidCron, "day-of-week: unknown name 'FOO'"),
        ("0 0 * FOO *", InvalidCron, "month: unknown name 'FOO'"),
        ("x * * * *", InvalidCron, "minute: 'x' is not a number"),
        ("0 0 MON * *", InvalidCron, "day-of-month: 'MON' is not a number"),
        ("1,,2 * * * *", InvalidCron, "minute: empty item in the list"),
        ("1-2-3 * * * *", InvalidCron, "minute: '1-2-3' is not a valid range"),
        ("0 0 * * 1#6", InvalidCron, "day-of-week: occurrence 6 in '1#6' is out of range 1-5"),
        ("0 0 * * 1#x", InvalidCron, "day-of-week: '1#x' is not valid (use d#n, e.g. MON#2)"),
        ("0 0 * * L", InvalidCron, "day-of-week: 'L' needs a day before it, e.g. 5L (last Friday)"),
        ("0 0 L/2 * *", InvalidCron, "day-of-month: 'L' does not take a step"),
        ("0 0 1-5W * *", InvalidCron, "day-of-month: '1-5W' is not valid (nW takes one day, e.g. 15W)"),
        (
            "@reboot",
            InvalidCron,
            "@reboot is not supported: clockd has no boot event (use a systemd unit, or a `once` schedule)",
        ),
        (
            "@sometimes",
            InvalidCron,
            "unknown macro '@sometimes' (known: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)",
        ),
    ],
)
def test_validation_messages(expr: str, error: type[InvalidInput], message: str) -> None:
    with pytest.raises(error) as info:
        parse_cron(expr)
    assert info.value.message == message
    assert info.value.exit_code == 2


def test_never_fires_is_not_an_invalid_cron_but_is_invalid_input() -> None:
    with pytest.raises(NeverFires) as info:
        parse_cron("0 0 30 2 *")
    assert not isinstance(info.value, InvalidCron)
    assert isinstance(info.value, InvalidInput)


# -- accepted syntax -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "normalized", "interval"),
    [
        ("@yearly", "0 0 1 1 *", False),
        ("@annually", "0 0 1 1 *", False),
        ("@monthly", "0 0 1 * *", False),
        ("@weekly", "0 0 * * 0", False),
        ("@daily", "0 0 * * *", False),
        ("@midnight", "0 0 * * *", False),
        ("@hourly", "0 * * * *", True),
        ("@HOURLY", "0 * * * *", True),
        ("  0   9 * *   mon-fri ", "0 9 * * MON-FRI", False),
        ("*/15 * * * *", "*/15 * * * *", True),
        ("0 */2 * * *", "0 */2 * * *", True),
        ("0 1-23/2 * * *", "0 1-23/2 * * *", False),
        ("30 2 * * *", "30 2 * * *", False),
        ("0 0 29 2 *", "0 0 29 2 *", False),
    ],
)
def test_normalized_form_and_interval_kind(expr: str, normalized: str, interval: bool) -> None:
    parsed = parse_cron(expr)
    assert isinstance(parsed, CronExpr)
    assert parsed.source == expr
    assert parsed.normalized == normalized
    assert parsed.is_interval is interval


def test_parse_is_cached() -> None:
    assert parse_cron("7 7 * * *") is parse_cron("7 7 * * *")


@pytest.mark.parametrize(
    ("expr", "start", "expected"),
    [
        # names, case-insensitive; DOW 7 and 0 are Sunday
        ("0 9 * * mon-fri", "2026-03-27T10:00", "2026-03-30T09:00 2026-03-31T09:00 2026-04-01T09:00 2026-04-02T09:00"),
        ("0 9 * JAN,jul 7", "2026-01-01T00:00", "2026-01-04T09:00 2026-01-11T09:00 2026-01-18T09:00 2026-01-25T09:00"),
        ("0 9 * * 0", "2026-01-01T00:00", "2026-01-04T09:00 2026-01-11T09:00 2026-01-18T09:00 2026-01-25T09:00"),
        ("0 12 * * FRI-SUN", "2026-03-26T00:00", "2026-03-27T12:00 2026-03-28T12:00 2026-03-29T12:00 2026-04-03T12:00"),
        # lists, ranges, steps; a-a is a single value; a/n runs to the field's end
        ("5,10-12 3 * * *", "2026-01-01T00:00", "2026-01-01T03:05 2026-01-01T03:10 2026-01-01T03:11 2026-01-01T03:12"),
        ("0 4-4 * * *", "2026-01-01T00:00", "2026-01-01T04:00 2026-01-02T04:00 2026-01-03T04:00 2026-01-04T04:00"),
        ("50/5 1 * * *", "2026-01-01T00:00", "2026-01-01T01:50 2026-01-01T01:55 2026-01-02T01:50 2026-01-02T01:55"),
        ("0 8-18/5 * * *", "2026-01-01T00:00", "2026-01-01T08:00 2026-01-01T13:00 2026-01-01T18:00 2026-01-02T08:00"),
        # L, LW, nW
        ("0 0 L * *", "2026-01-01T00:00", "2026-01-31T00:00 2026-02-28T00:00 2026-03-31T00:00 2026-04-30T00:00"),
        ("0 0 L 2 *", "2027-03-01T00:00", "2028-02-29T00:00 2029-02-28T00:00 2030-02-28T00:00 2031-02-28T00:00"),
        # last weekday: 2026-01-31 is a Saturday, 2026-05-31 a Sunday
        ("0 0 LW * *", "2026-01-01T00:00", "2026-01-30T00:00 2026-02-27T00:00 2026-03-31T00:00 2026-04-30T00:00"),
        # nearest weekday to the 15th: 2026-02-15 and 2026-03-15 are Sundays, 2026-08-15 a Saturday
        ("0 0 15W * *", "2026-02-01T00:00", "2026-02-16T00:00 2026-03-16T00:00 2026-04-15T00:00 2026-05-15T00:00"),
        ("0 0 15W 8 *", "2026-01-01T00:00", "2026-08-14T00:00 2027-08-16T00:00 2028-08-15T00:00 2029-08-15T00:00"),
        # 1W never leaves the month: 2026-08-01 is a Saturday → Monday the 3rd
        ("0 0 1W 8 *", "2026-01-01T00:00", "2026-08-03T00:00 2027-08-02T00:00 2028-08-01T00:00 2029-08-01T00:00"),
        # 31W: 2026-05-31 is a Sunday → Friday the 29th; months without a 31st do not match
        ("0 0 31W * *", "2026-04-01T00:00", "2026-05-29T00:00 2026-07-31T00:00 2026-08-31T00:00 2026-10-30T00:00"),
        ("0 0 1W,L * *", "2026-08-01T00:00", "2026-08-03T00:00 2026-08-31T00:00 2026-09-01T00:00 2026-09-30T00:00"),
        # dL (last Friday), d#n (second Monday); names allowed
        ("0 0 * * 5L", "2026-01-01T00:00", "2026-01-30T00:00 2026-02-27T00:00 2026-03-27T00:00 2026-04-24T00:00"),
        ("0 0 * * FRIL", "2026-01-01T00:00", "2026-01-30T00:00 2026-02-27T00:00 2026-03-27T00:00 2026-04-24T00:00"),
        ("0 0 * * MON#2", "2026-01-01T00:00", "2026-01-12T00:00 2026-02-09T00:00 2026-03-09T00:00 2026-04-13T00:00"),
        ("0 0 * * 7#1", "2026-01-01T00:00", "2026-01-04T00:00 2026-02-01T00:00 2026-03-01T00:00 2026-04-05T00:00"),
        # Vixie: both day fields restricted → either matches (the 13th, or any Friday)
        ("0 0 13 * 5", "2026-02-01T00:00", "2026-02-06T00:00 2026-02-13T00:00 2026-02-20T00:00 2026-02-27T00:00"),
        # ... one begins with * → both must match (Friday the 13th)
        ("0 0 13 * */1", "2026-01-01T00:00", "2026-01-13T00:00 2026-02-13T00:00 2026-03-13T00:00 2026-04-13T00:00"),
        ("0 0 */1 * 5", "2026-02-01T00:00", "2026-02-06T00:00 2026-02-13T00:00 2026-02-20T00:00 2026-02-27T00:00"),
        # nW with Vixie "either": the weekday nearest the 15th, or any Sunday
        ("0 0 15W * 0", "2026-02-01T00:00", "2026-02-08T00:00 2026-02-15T00:00 2026-02-16T00:00 2026-02-22T00:00"),
        # Feb 29 exists in leap years only
        ("0 0 29 2 *", "2026-01-01T00:00", "2028-02-29T00:00 2032-02-29T00:00 2036-02-29T00:00 2040-02-29T00:00"),
    ],
)
def test_enumerates_naive_wall_times(expr: str, start: str, expected: str) -> None:
    assert walls(expr, start, len(expected.split())) == expected.split()


def test_enumeration_is_strictly_after_the_start() -> None:
    assert walls("0 9 * * *", "2026-01-01T09:00", 1) == ["2026-01-02T09:00"]
    assert walls("0 9 * * *", "2026-01-01T08:59:59.999999", 1) == ["2026-01-01T09:00"]
    assert walls("* * * * *", "2026-01-01T09:00:30", 1) == ["2026-01-01T09:01"]


def test_enumeration_needs_a_naive_start() -> None:
    from datetime import UTC

    with pytest.raises(ValueError):
        next(iter(parse_cron("0 9 * * *").walls_after(datetime(2026, 1, 1, tzinfo=UTC))))


def test_enumeration_ends_at_the_end_of_the_calendar() -> None:
    assert walls("0 0 1 1 *", "9998-06-01T00:00", 5) == ["9999-01-01T00:00"]


def test_cloned_iterators_are_independent() -> None:
    expr = parse_cron("*/10 * * * *")
    a = expr.walls_after(datetime(2026, 1, 1))  # noqa: DTZ001  naive wall time on purpose
    b = expr.walls_after(datetime(2026, 6, 1))  # noqa: DTZ001  naive wall time on purpose
    assert next(a).isoformat() == "2026-01-01T00:10:00"
    assert next(b).isoformat() == "2026-06-01T00:10:00"
    assert next(a).isoformat() == "2026-01-01T00:20:00"


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        ("0 9 * * *", "At 09:00 every day"),
        ("0 9 * * MON-FRI", "At 09:00 on Monday through Friday"),
        ("*/15 * * * *", "Every 15th minute of every hour"),
        ("@hourly", "At the start of every hour"),
        ("0 0 L * *", "At 00:00 on the last day of every month"),
        ("0 0 15W * *", "At 00:00 on the weekday nearest the 15th day of every month"),
        ("0 0 * * 5L", "At 00:00 on the last Friday of the month"),
        ("0 0 * * MON#2", "At 00:00 on the second Monday of the month"),
    ],
)
def test_describe(expr: str, text: str) -> None:
    assert parse_cron(expr).describe() == text


def test_describe_never_raises() -> None:
    for expr in ["0 0 1W,15W,L * *", "1-59/7 */3 1,15W 1-6/2 1#2,5L", "0 0 LW * 0"]:
        assert parse_cron(expr).describe()
