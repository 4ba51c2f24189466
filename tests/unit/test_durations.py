"""Durations: parse what people write, format canonically, refuse the rest clearly."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clockd.core.durations import format_duration, parse_duration
from clockd.errors import InvalidInput


@pytest.mark.parametrize(
    ("text", "value", "canonical"),
    [
        ("90m", timedelta(minutes=90), "1h30m"),
        ("1h30m", timedelta(hours=1, minutes=30), "1h30m"),
        ("30s", timedelta(seconds=30), "30s"),
        ("2d", timedelta(days=2), "2d"),
        ("500ms", timedelta(milliseconds=500), "500ms"),
        ("1h 30m", timedelta(hours=1, minutes=30), "1h30m"),
        ("1H", timedelta(hours=1), "1h"),
        ("0s", timedelta(0), "0s"),
        ("1d2h3m4s5ms6us", timedelta(days=1, hours=2, minutes=3, seconds=4, microseconds=5006), "1d2h3m4s5ms6us"),
        ("3600s", timedelta(hours=1), "1h"),
        ("1500ms", timedelta(seconds=1, milliseconds=500), "1s500ms"),
    ],
)
def test_parse_and_format(text: str, value: timedelta, canonical: str) -> None:
    assert parse_duration(text) == value
    assert format_duration(value) == canonical


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty duration (e.g. 90m, 1h30m, 30s, 2d, 500ms)"),
        ("90", "duration '90' has no unit (e.g. 90m, 1h30m, 30s, 2d, 500ms)"),
        ("-5m", "duration '-5m' is negative"),
        ("1.5h", "duration '1.5h': use whole numbers, e.g. 1h30m rather than 1.5h"),
        ("30m1h", "duration '30m1h': units must go from largest to smallest, each at most once (d h m s ms us)"),
        ("1m1m", "duration '1m1m': units must go from largest to smallest, each at most once (d h m s ms us)"),
        ("5 minutes", "duration '5 minutes': cannot read '5 minutes' (e.g. 90m, 1h30m, 30s, 2d, 500ms)"),
        ("2w", "duration '2w': cannot read '2w' (e.g. 90m, 1h30m, 30s, 2d, 500ms)"),
        ("soon", "duration 'soon': cannot read 'soon' (e.g. 90m, 1h30m, 30s, 2d, 500ms)"),
    ],
)
def test_bad_durations_are_refused_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_duration(text)
    assert info.value.message == message


def test_format_negative_duration() -> None:
    assert format_duration(timedelta(minutes=-90)) == "-1h30m"


@settings(max_examples=300, deadline=None, database=None)
@given(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=100_000)))
def test_format_is_the_inverse_of_parse(value: timedelta) -> None:
    text = format_duration(value)
    assert parse_duration(text) == value
    assert format_duration(parse_duration(text)) == text
