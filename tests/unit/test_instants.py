"""Instants: ISO 8601 with Z or offset, local times in a zone, and now-relative forms."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from clockd.core.instants import format_instant, parse_instant
from clockd.core.zones import get_zone
from clockd.errors import InvalidInput, UnknownZone

NOW = datetime(2026, 3, 28, 12, 0, 0, tzinfo=UTC)
EG = "(e.g. 2026-03-28T09:00:00Z, 2026-03-28T10:00+01:00 or now+90m)"


@pytest.mark.parametrize(
    ("text", "tz", "expected"),
    [
        ("2026-03-28T09:00:00Z", None, "2026-03-28T09:00:00Z"),
        ("2026-03-28T10:00+01:00", None, "2026-03-28T09:00:00Z"),
        ("2026-03-28 10:00:00+01:00", None, "2026-03-28T09:00:00Z"),
        ("2026-03-28T09:00:00.250Z", None, "2026-03-28T09:00:00.250000Z"),
        ("2026-03-28T09:00:00-05:30", "Europe/Paris", "2026-03-28T14:30:00Z"),  # offset wins
        # Local wall times are read in the zone.
        ("2026-03-28T10:00", "Europe/Paris", "2026-03-28T09:00:00Z"),
        ("2026-07-01T10:00", "Europe/Paris", "2026-07-01T08:00:00Z"),
        ("2026-07-01", "America/New_York", "2026-07-01T04:00:00Z"),
        # Fall back: 02:30 happens twice in Paris on 2026-10-25; the first is meant.
        ("2026-10-25T02:30", "Europe/Paris", "2026-10-25T00:30:00Z"),
        ("2026-11-01T01:30", "America/New_York", "2026-11-01T05:30:00Z"),
        # Lord Howe repeats 01:30-02:00 (30-minute shift).
        ("2026-04-05T01:45", "Australia/Lord_Howe", "2026-04-04T14:45:00Z"),
    ],
)
def test_iso_instants(text: str, tz: str | None, expected: str) -> None:
    result = parse_instant(text, tz)
    assert result.tzinfo is UTC
    assert format_instant(result) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("NOW", NOW),
        ("now+2s", NOW + timedelta(seconds=2)),
        ("now+90m", NOW + timedelta(minutes=90)),
        ("now + 1h30m", NOW + timedelta(minutes=90)),
        ("now-5m", NOW - timedelta(minutes=5)),
    ],
)
def test_relative_instants(text: str, expected: datetime) -> None:
    assert parse_instant(text, now=NOW) == expected


def test_relative_instant_converts_now_to_utc() -> None:
    paris_now = NOW.astimezone(get_zone("Europe/Paris"))
    result = parse_instant("now+1s", now=paris_now)
    assert result.tzinfo is UTC and result == NOW + timedelta(seconds=1)


@pytest.mark.parametrize(
    ("text", "tz", "message"),
    [
        ("", None, f"empty instant {EG}"),
        ("tomorrow", None, f"not an ISO 8601 instant: 'tomorrow' {EG}"),
        ("2026-02-30T00:00Z", None, f"not an ISO 8601 instant: '2026-02-30T00:00Z' {EG}"),
        (
            "2026-03-28T09:00",
            None,
            "instant '2026-03-28T09:00' has no UTC offset: add Z or an offset such as +01:00, or give a time zone",
        ),
        (
            "2026-03-29T02:30",
            "Europe/Paris",
            "2026-03-29T02:30:00 does not exist in Europe/Paris (the clocks skip it at a DST change); "
            "give an offset or another time",
        ),
        ("now+", None, "not an instant: 'now+' (relative forms: now, now+90m, now-2s)"),
        ("now*2", None, "not an instant: 'now*2' (relative forms: now, now+90m, now-2s)"),
        ("now+1.5h", None, "duration '1.5h': use whole numbers, e.g. 1h30m rather than 1.5h"),
    ],
)
def test_bad_instants_are_refused_with_a_clear_message(text: str, tz: str | None, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_instant(text, tz, now=NOW)
    assert info.value.message == message


def test_relative_instant_needs_now() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_instant("now+2s")
    assert info.value.message == "relative instant 'now+2s' needs the current time"


def test_local_time_in_an_unknown_zone() -> None:
    with pytest.raises(UnknownZone):
        parse_instant("2026-03-28T09:00", "Europe/Pari")


def test_format_instant() -> None:
    assert format_instant(datetime(2026, 3, 28, 2, 30, tzinfo=UTC)) == "2026-03-28T02:30:00Z"
    with pytest.raises(ValueError):
        format_instant(datetime(2026, 3, 28))  # noqa: DTZ001  naive on purpose: refused
