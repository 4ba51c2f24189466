"""The two enumerations of a cron expression's wall times give the same answers: the
calendar walk (``clockd.core.cron._plain_walls``) that plain expressions use, and cronsim,
the reference, for any plain expression and any start — the first times after it, across
month, year and leap-day boundaries, and at the end of the calendar."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from itertools import islice

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clockd.core.cron import CronExpr, parse_cron


def wall(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, us)  # noqa: DTZ001  naive wall times are enumerated


DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


def _item(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    shown = value.map(str) if not names else st.one_of(value.map(str), st.sampled_from(names))
    return st.one_of(
        shown,
        st.tuples(value, value).map(lambda p: f"{min(p)}-{max(p)}"),
        st.integers(1, high - low + 1).map(lambda n: f"*/{n}"),
        st.tuples(value, value, st.integers(1, 9)).map(lambda p: f"{min(p[0], p[1])}-{max(p[0], p[1])}/{p[2]}"),
        st.tuples(value, st.integers(1, 9)).map(lambda p: f"{p[0]}/{p[1]}"),
    )


def _field(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    return st.one_of(st.just("*"), st.lists(_item(low, high, names), min_size=1, max_size=3).map(",".join))


@st.composite
def plain_expressions(draw: st.DrawFn) -> str:
    minute, hour = draw(_field(0, 59)), draw(_field(0, 23))
    if draw(st.booleans()):
        dom, dow = draw(_field(1, 31)), "*"
    else:
        dom, dow = "*", draw(_field(0, 7, DAY_NAMES))
    return f"{minute} {hour} {dom} * {dow}"


starts = st.one_of(
    st.datetimes(min_value=wall(1970, 1, 1), max_value=wall(2200, 12, 31)),
    st.datetimes(min_value=wall(9999, 10, 1), max_value=wall(9999, 12, 31, 23, 59, 59)),
    st.datetimes(min_value=wall(2024, 2, 27), max_value=wall(2024, 3, 2)),
)


def _reference(expr: CronExpr, start: datetime) -> Iterator[datetime]:
    """cronsim's enumeration of the same expression (what raw_walls used for every one)."""
    try:
        yield from expr._new_iterator(start)
    except OverflowError:
        return


def _walk(expr: CronExpr, start: datetime) -> Iterator[datetime]:
    return expr.walls_after(start)


@settings(max_examples=400, deadline=None)
@given(plain_expressions(), starts)
def test_the_calendar_walk_gives_cronsims_wall_times(text: str, start: datetime) -> None:
    expr = parse_cron(text)
    assert expr._plain is not None, text  # the walk is what is tested
    assert list(islice(_walk(expr, start), 40)) == list(islice(_reference(expr, start), 40))


@pytest.mark.parametrize(
    ("text", "start", "first"),
    [
        ("30 9 * * 1-5", wall(2026, 12, 4, 9, 30), wall(2026, 12, 7, 9, 30)),  # Friday → Monday
        ("0 0 31 * *", wall(2026, 2, 1), wall(2026, 3, 31)),
        ("0 8 * * FRI-SUN", wall(2026, 12, 7, 12), wall(2026, 12, 11, 8)),  # Monday → Friday; SUN closes at 7
        ("0 8 * * FRI-SUN", wall(2026, 12, 12, 9), wall(2026, 12, 13, 8)),  # Saturday → Sunday
        ("0 12 29 * *", wall(2025, 2, 1), wall(2025, 3, 29, 12)),  # no 29 February in 2025
        ("* * * * *", wall(2026, 12, 31, 23, 59, 30, 500), wall(2027, 1, 1)),
        ("59 23 * * *", wall(9999, 12, 31, 23, 59), None),  # the end of the calendar
    ],
)
def test_first_wall_times(text: str, start: datetime, first: datetime | None) -> None:
    expr = parse_cron(text)
    assert expr._plain is not None
    assert expr.first_wall_after(start) == first
    assert next(_reference(expr, start), None) == first


@pytest.mark.parametrize(
    "text", ["0 0 1 JAN *", "0 0 15 * MON", "0 0 L * *", "0 0 15W * *", "0 0 * * 5L", "0 0 * * MON#2"]
)
def test_other_expressions_stay_with_cronsim(text: str) -> None:
    assert parse_cron(text)._plain is None
