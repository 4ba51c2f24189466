"""The time contract at real transitions, as tables of ISO strings WITH offsets (cronsim-style).

Gap (spring forward): a fixed time that does not exist that day is skipped, never
moved. Overlap (fall back): a fixed time that occurs twice runs once, at its first
instant; interval jobs (hour ``*`` or ``*/n``) run at both.

Transitions used (tzdata 2026):
* Europe/Paris 2026: 03-29 02:00→03:00; 10-25 03:00→02:00.
* America/New_York 2026: 03-08 02:00→03:00; 11-01 02:00→01:00.
* Australia/Lord_Howe 2026 (30-minute shift): 04-05 02:00→01:30; 10-04 02:00→02:30.
* America/Santiago 2026 (at midnight): 04-04 24:00→23:00; 09-06 00:00→01:00.
* Asia/Tehran 2021 (at midnight; DST abolished in 2022): 03-22 00:00→01:00; 09-22 00:00→09-21 23:00.
* Pacific/Apia 2011: 04-02 04:00→03:00; 09-24 03:00→04:00; 12-30 skipped entirely (-10 → +14).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise

import pytest

from clockd.core.cron import parse_cron
from clockd.core.timeline import CronTimeline, Fire, Skip
from clockd.core.zones import get_zone


def timeline(expr: str, tz: str) -> CronTimeline:
    return CronTimeline(parse_cron(expr), get_zone(tz))


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def local_times(expr: str, tz: str, start: str, n: int) -> list[str]:
    return [f.local.isoformat() for f in islice(timeline(expr, tz).fires_after(instant(start)), n)]


def chained(expr: str, tz: str, start: str, n: int) -> list[str]:
    tl = timeline(expr, tz)
    zone = get_zone(tz)
    out: list[str] = []
    t: datetime | None = instant(start)
    for _ in range(n):
        assert t is not None
        t = tl.next_after(t)
        if t is None:
            break
        assert t.tzinfo is UTC
        out.append(t.astimezone(zone).isoformat())
    return out


# The tables keep one case per entry, wrapped by hand; the formatter leaves them alone.
# fmt: off
TABLE = [
    # --- Europe/Paris -------------------------------------------------------------------
    ("30 2 * * *", "Europe/Paris", "2026-03-28T00:00:00Z",
     ["2026-03-28T02:30:00+01:00", "2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00"]),
    ("0 2 * * *", "Europe/Paris", "2026-03-28T12:00:00Z",
     ["2026-03-30T02:00:00+02:00"]),
    ("59 2 * * *", "Europe/Paris", "2026-03-28T12:00:00Z",
     ["2026-03-30T02:59:00+02:00"]),
    ("0 3 * * *", "Europe/Paris", "2026-03-28T12:00:00Z",
     ["2026-03-29T03:00:00+02:00", "2026-03-30T03:00:00+02:00"]),
    ("15 2 * * SUN", "Europe/Paris", "2026-03-22T12:00:00Z",
     ["2026-04-05T02:15:00+02:00"]),
    ("30 2 * * *", "Europe/Paris", "2026-10-24T00:00:00Z",
     ["2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]),
    ("30 1 * * *", "Europe/Paris", "2026-10-24T00:00:00Z",
     ["2026-10-25T01:30:00+02:00", "2026-10-26T01:30:00+01:00"]),
    ("0 2 * * *", "Europe/Paris", "2026-10-24T12:00:00Z",
     ["2026-10-25T02:00:00+02:00", "2026-10-26T02:00:00+01:00"]),
    ("*/15 2 * * *", "Europe/Paris", "2026-10-24T12:00:00Z",
     ["2026-10-25T02:00:00+02:00", "2026-10-25T02:15:00+02:00", "2026-10-25T02:30:00+02:00",
      "2026-10-25T02:45:00+02:00", "2026-10-26T02:00:00+01:00"]),
    ("*/30 * * * *", "Europe/Paris", "2026-03-29T00:00:00Z",
     ["2026-03-29T01:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"]),
    ("*/30 * * * *", "Europe/Paris", "2026-10-24T23:30:00Z",
     ["2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-25T02:00:00+01:00",
      "2026-10-25T02:30:00+01:00", "2026-10-25T03:00:00+01:00"]),
    ("0 * * * *", "Europe/Paris", "2026-10-24T23:00:00Z",
     ["2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00"]),
    ("0 */2 * * *", "Europe/Paris", "2026-10-24T22:30:00Z",
     ["2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T04:00:00+01:00"]),
    ("0 */2 * * *", "Europe/Paris", "2026-03-28T23:30:00Z",
     ["2026-03-29T04:00:00+02:00", "2026-03-29T06:00:00+02:00"]),
    ("0 0 * * *", "Europe/Paris", "2026-03-28T12:00:00Z",
     ["2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00"]),
    # --- America/New_York -----------------------------------------------------------------
    ("30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z",
     ["2026-03-07T02:30:00-05:00", "2026-03-09T02:30:00-04:00"]),
    ("30 1 * * *", "America/New_York", "2026-10-31T00:00:00Z",
     ["2026-10-31T01:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]),
    ("0 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
     ["2026-11-01T01:00:00-04:00", "2026-11-02T01:00:00-05:00"]),
    ("*/30 * * * *", "America/New_York", "2026-11-01T04:45:00Z",
     ["2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00",
      "2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00"]),
    ("0 * * * *", "America/New_York", "2026-03-08T05:30:00Z",
     ["2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"]),
    ("0 * * * *", "America/New_York", "2026-11-01T04:30:00Z",
     ["2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"]),
    ("0 */2 * * *", "America/New_York", "2026-11-01T03:30:00Z",
     ["2026-11-01T00:00:00-04:00", "2026-11-01T02:00:00-05:00", "2026-11-01T04:00:00-05:00"]),
    ("0 0 * * *", "America/New_York", "2026-03-07T12:00:00Z",
     ["2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00"]),
    # --- Australia/Lord_Howe: 30-minute shifts ----------------------------------------------------
    ("30 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z",
     ["2026-04-05T01:30:00+11:00", "2026-04-06T01:30:00+10:30"]),
    ("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z",
     ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"]),
    ("15 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z",
     ["2026-04-05T01:15:00+11:00", "2026-04-06T01:15:00+10:30"]),
    ("*/15 * * * *", "Australia/Lord_Howe", "2026-04-04T14:20:00Z",
     ["2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00", "2026-04-05T01:30:00+10:30",
      "2026-04-05T01:45:00+10:30", "2026-04-05T02:00:00+10:30"]),
    ("0 2 * * *", "Australia/Lord_Howe", "2026-10-02T00:00:00Z",
     ["2026-10-03T02:00:00+10:30", "2026-10-05T02:00:00+11:00"]),
    ("15 2 * * *", "Australia/Lord_Howe", "2026-10-02T00:00:00Z",
     ["2026-10-03T02:15:00+10:30", "2026-10-05T02:15:00+11:00"]),
    ("45 2 * * *", "Australia/Lord_Howe", "2026-10-02T00:00:00Z",
     ["2026-10-03T02:45:00+10:30", "2026-10-04T02:45:00+11:00"]),
    ("*/15 * * * *", "Australia/Lord_Howe", "2026-10-03T15:15:00Z",
     ["2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00"]),
    # --- America/Santiago: transitions at midnight ----------------------------------------
    ("0 0 * * *", "America/Santiago", "2026-09-04T12:00:00Z",
     ["2026-09-05T00:00:00-04:00", "2026-09-07T00:00:00-03:00"]),
    ("30 0 * * *", "America/Santiago", "2026-09-04T12:00:00Z",
     ["2026-09-05T00:30:00-04:00", "2026-09-07T00:30:00-03:00"]),
    ("0 1 * * *", "America/Santiago", "2026-09-04T12:00:00Z",
     ["2026-09-05T01:00:00-04:00", "2026-09-06T01:00:00-03:00"]),
    ("0 * * * *", "America/Santiago", "2026-09-06T02:30:00Z",
     ["2026-09-05T23:00:00-04:00", "2026-09-06T01:00:00-03:00", "2026-09-06T02:00:00-03:00"]),
    ("30 23 * * *", "America/Santiago", "2026-04-03T12:00:00Z",
     ["2026-04-03T23:30:00-03:00", "2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00"]),
    ("0 0 * * *", "America/Santiago", "2026-04-03T12:00:00Z",
     ["2026-04-04T00:00:00-03:00", "2026-04-05T00:00:00-04:00"]),
    ("0 * * * *", "America/Santiago", "2026-04-05T01:30:00Z",
     ["2026-04-04T23:00:00-03:00", "2026-04-04T23:00:00-04:00", "2026-04-05T00:00:00-04:00"]),
    # --- Asia/Tehran 2021 (midnight transitions), and no DST any more in 2026 ---------------
    ("0 0 * * *", "Asia/Tehran", "2021-03-20T00:00:00Z",
     ["2021-03-21T00:00:00+03:30", "2021-03-23T00:00:00+04:30"]),
    ("30 0 * * *", "Asia/Tehran", "2021-03-20T00:00:00Z",
     ["2021-03-21T00:30:00+03:30", "2021-03-23T00:30:00+04:30"]),
    ("30 23 * * *", "Asia/Tehran", "2021-09-20T00:00:00Z",
     ["2021-09-20T23:30:00+04:30", "2021-09-21T23:30:00+04:30", "2021-09-22T23:30:00+03:30"]),
    ("0 0 * * *", "Asia/Tehran", "2021-09-20T00:00:00Z",
     ["2021-09-21T00:00:00+04:30", "2021-09-22T00:00:00+03:30"]),
    ("0 * * * *", "Asia/Tehran", "2021-09-21T17:00:00Z",
     ["2021-09-21T22:00:00+04:30", "2021-09-21T23:00:00+04:30", "2021-09-21T23:00:00+03:30",
      "2021-09-22T00:00:00+03:30"]),
    ("0 0 * * *", "Asia/Tehran", "2026-03-20T00:00:00Z",
     ["2026-03-21T00:00:00+03:30", "2026-03-22T00:00:00+03:30", "2026-03-23T00:00:00+03:30"]),
    # --- Pacific/Apia: 2011-12-30 never happened --------------------------------------------
    ("0 0 * * *", "Pacific/Apia", "2011-12-28T00:00:00Z",
     ["2011-12-28T00:00:00-10:00", "2011-12-29T00:00:00-10:00", "2011-12-31T00:00:00+14:00"]),
    ("0 12 * * *", "Pacific/Apia", "2011-12-28T00:00:00Z",
     ["2011-12-28T12:00:00-10:00", "2011-12-29T12:00:00-10:00", "2011-12-31T12:00:00+14:00"]),
    ("0 */6 * * *", "Pacific/Apia", "2011-12-30T03:00:00Z",
     ["2011-12-29T18:00:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T06:00:00+14:00"]),
    ("0 0 30 12 *", "Pacific/Apia", "2011-01-01T00:00:00Z",
     ["2012-12-30T00:00:00+14:00", "2013-12-30T00:00:00+14:00"]),
    ("30 3 * * *", "Pacific/Apia", "2011-04-01T00:00:00Z",
     ["2011-04-01T03:30:00-10:00", "2011-04-02T03:30:00-10:00", "2011-04-03T03:30:00-11:00"]),
    ("30 3 * * *", "Pacific/Apia", "2011-09-23T00:00:00Z",
     ["2011-09-23T03:30:00-11:00", "2011-09-25T03:30:00-10:00"]),
]
# fmt: on


@pytest.mark.parametrize(("expr", "tz", "start", "expected"), TABLE)
def test_dst_table(expr: str, tz: str, start: str, expected: list[str]) -> None:
    assert local_times(expr, tz, start, len(expected)) == expected
    assert chained(expr, tz, start, len(expected)) == expected


@pytest.mark.parametrize(("expr", "tz", "start", "expected"), TABLE)
def test_results_are_aware_utc_and_match_local(expr: str, tz: str, start: str, expected: list[str]) -> None:
    zone = get_zone(tz)
    for fire in islice(timeline(expr, tz).fires_after(instant(start)), len(expected)):
        assert fire.utc.tzinfo is UTC
        assert fire.local.tzinfo is zone
        # (not ``fire.local == fire.utc``: Python never equates a time in a repeated
        # hour with one in another zone, PEP 495)
        assert fire.local.astimezone(UTC) == fire.utc
        assert fire.utc > instant(start)


# -- skips and notes (what preview shows) --------------------------------------------------


def events(expr: str, tz: str, start: str, n: int) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for event in islice(timeline(expr, tz).events_after(instant(start)), n):
        if isinstance(event, Skip):
            out.append((event.wall.isoformat(timespec="minutes"), event.note))
        else:
            assert isinstance(event, Fire)
            out.append((event.local.isoformat(), event.note))
    return out


@pytest.mark.parametrize(
    ("expr", "tz", "start", "expected"),
    [
        (
            "30 2 * * *",
            "Europe/Paris",
            "2026-03-28T00:00:00Z",
            [
                ("2026-03-28T02:30:00+01:00", None),
                ("2026-03-29T02:30", "DST gap: 02:30 does not exist on 2026-03-29, skipped"),
                ("2026-03-30T02:30:00+02:00", None),
            ],
        ),
        (
            "30 2 * * *",
            "Europe/Paris",
            "2026-10-24T12:00:00Z",
            [
                ("2026-10-25T02:30:00+02:00", "repeated hour: runs once, at the first 02:30"),
                ("2026-10-26T02:30:00+01:00", None),
            ],
        ),
        (
            "30 * * * *",
            "Europe/Paris",
            "2026-10-24T23:00:00Z",
            [
                ("2026-10-25T01:30:00+02:00", None),
                ("2026-10-25T02:30:00+02:00", "repeated hour: runs at both 02:30s (first)"),
                ("2026-10-25T02:30:00+01:00", "repeated hour: runs at both 02:30s (second)"),
                ("2026-10-25T03:30:00+01:00", None),
            ],
        ),
        (
            "*/30 * * * *",
            "Europe/Paris",
            "2026-03-29T00:15:00Z",
            [
                ("2026-03-29T01:30:00+01:00", None),
                ("2026-03-29T02:00", "DST gap: 02:00 does not exist on 2026-03-29, skipped"),
                ("2026-03-29T02:30", "DST gap: 02:30 does not exist on 2026-03-29, skipped"),
                ("2026-03-29T03:00:00+02:00", None),
            ],
        ),
        (
            "0 0 * * *",
            "America/Santiago",
            "2026-09-05T12:00:00Z",
            [
                ("2026-09-06T00:00", "DST gap: 00:00 does not exist on 2026-09-06, skipped"),
                ("2026-09-07T00:00:00-03:00", None),
            ],
        ),
        (
            "0 0 * * *",
            "Pacific/Apia",
            "2011-12-29T12:00:00Z",
            [
                ("2011-12-30T00:00", "clock change gap: 00:00 does not exist on 2011-12-30, skipped"),
                ("2011-12-31T00:00:00+14:00", None),
            ],
        ),
    ],
)
def test_events_mark_gaps_and_repeated_hours(
    expr: str, tz: str, start: str, expected: list[tuple[str, str | None]]
) -> None:
    assert events(expr, tz, start, len(expected)) == expected


def test_a_gap_before_the_start_is_not_reported() -> None:
    # 01:10Z is 03:10 CEST, just after the gap: nothing about 02:30 that day.
    assert events("30 2 * * *", "Europe/Paris", "2026-03-29T01:10:00Z", 1) == [("2026-03-30T02:30:00+02:00", None)]


# -- starting inside a repeated hour -----------------------------------------------------

# fmt: off
REPEATED = [
    # (zone, first instant of the repeated wall hour in UTC, its length)
    ("Europe/Paris", "2026-10-25T00:00:00Z", timedelta(hours=1)),
    ("America/New_York", "2026-11-01T05:00:00Z", timedelta(hours=1)),
    ("Australia/Lord_Howe", "2026-04-04T14:30:00Z", timedelta(minutes=30)),
    ("America/Santiago", "2026-04-05T02:00:00Z", timedelta(hours=1)),
    ("Asia/Tehran", "2021-09-21T18:30:00Z", timedelta(hours=1)),
]
# fmt: on


@pytest.mark.parametrize(("tz", "begin", "shift"), REPEATED)
@pytest.mark.parametrize(
    "expr",
    [
        "* * * * *",
        "*/5 * * * *",
        "0 * * * *",
        "30 * * * *",
        "*/10 0-3,22,23 * * *",
        "0,30 1 * * *",
        "45 2 * * *",
        "15 23 * * *",
        "*/7 1,2 * * *",
    ],
)
def test_start_inside_a_repeated_hour_never_yields_earlier_or_equal(
    expr: str, tz: str, begin: str, shift: timedelta
) -> None:
    tl = timeline(expr, tz)
    zone = get_zone(tz)
    first = instant(begin)
    step = timedelta(minutes=5)
    t = first - step
    while t <= first + 2 * shift + step:
        for start in (t, t + timedelta(seconds=1), t - timedelta(microseconds=1)):
            fires = list(islice(tl.fires_after(start), 6))
            assert fires, (expr, tz, start)
            assert all(f.utc > start for f in fires)
            assert all(a.utc < b.utc for a, b in pairwise(fires))
            assert tl.next_after(start) == fires[0].utc
            if not tl.expr.is_interval:
                walls = [f.local.replace(tzinfo=None) for f in fires]
                assert len(set(walls)) == len(walls)
            # The set of fires does not depend on where we start.
            later = list(islice(tl.fires_after(fires[0].utc), 5))
            assert [f.utc for f in later] == [f.utc for f in fires[1:]]
            assert all(f.local.tzinfo is zone for f in fires)
        t += step


def test_fixed_job_started_between_the_two_passes_waits_for_the_next_day() -> None:
    # 01:15Z is the second 02:15 (CET): the first 02:30 (00:30Z) already ran.
    assert local_times("30 2 * * *", "Europe/Paris", "2026-10-25T01:15:00Z", 1) == ["2026-10-26T02:30:00+01:00"]
    # Exactly at the first 02:30: the second 02:30 is not a run of a fixed job.
    assert local_times("30 2 * * *", "Europe/Paris", "2026-10-25T00:30:00Z", 1) == ["2026-10-26T02:30:00+01:00"]
    # ... but it is one for an interval job.
    assert local_times("*/30 * * * *", "Europe/Paris", "2026-10-25T00:30:00Z", 2) == [
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T02:30:00+01:00",
    ]


@pytest.mark.parametrize(
    ("expr", "tz", "start", "n"),
    [
        ("*/20 * * * *", "Europe/Paris", "2026-03-27T00:00:00Z", 1000),
        ("*/20 * * * *", "Europe/Paris", "2026-10-23T00:00:00Z", 1000),
        ("30 1 * * *", "America/New_York", "2026-01-01T00:00:00Z", 800),
        ("*/15 * * * *", "Australia/Lord_Howe", "2026-04-03T00:00:00Z", 600),
        ("*/15 * * * *", "Australia/Lord_Howe", "2026-10-02T00:00:00Z", 600),
        ("0 0 * * *", "America/Santiago", "2026-01-01T00:00:00Z", 800),
        ("0 */2 * * *", "Asia/Tehran", "2021-01-01T00:00:00Z", 5000),
    ],
)
def test_chained_next_after_matches_fires_after(expr: str, tz: str, start: str, n: int) -> None:
    tl = timeline(expr, tz)
    fires = [f.utc for f in islice(tl.fires_after(instant(start)), n)]
    t: datetime | None = instant(start)
    for expected in fires:
        assert t is not None
        t = tl.next_after(t)
        assert t == expected


def test_a_schedule_that_only_matches_gap_times_terminates() -> None:
    # The last Sunday of March at 02:30 never exists in Paris (since 1996).
    tl = timeline("30 2 * 3 0L", "Europe/Paris")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert tl.next_after(start) is None
    assert list(tl.fires_after(start)) == []
    skips = list(tl.events_after(start))
    assert skips and all(isinstance(s, Skip) for s in skips)
    assert len(skips) <= 52


def test_end_of_calendar_terminates() -> None:
    tl = timeline("0 0 1 1 *", "Europe/Paris")
    assert tl.next_after(datetime(9999, 6, 1, tzinfo=UTC)) is None
    assert list(tl.fires_after(datetime(9999, 6, 1, tzinfo=UTC))) == []
    assert tl.next_after(datetime(9999, 12, 31, 23, tzinfo=UTC)) is None


def test_naive_start_is_refused() -> None:
    with pytest.raises(ValueError):
        timeline("0 9 * * *", "UTC").next_after(datetime(2026, 1, 1))  # noqa: DTZ001  refused on purpose


def test_interleaved_chains_on_one_timeline_stay_correct() -> None:
    # Several schedules share one (cached) timeline; their chains resume cached cursors.
    tl = timeline("*/10 * * * *", "Europe/Paris")
    reference = timeline("*/10 * * * *", "Europe/Paris")
    starts = [instant("2026-10-24T20:00:00Z") + timedelta(minutes=7 * k) for k in range(12)]
    cursors: list[datetime | None] = list(starts)
    for _ in range(60):
        for i, t in enumerate(cursors):
            assert t is not None
            nxt = tl.next_after(t)
            assert nxt == next(iter(reference.fires_after(t))).utc
            cursors[i] = nxt
