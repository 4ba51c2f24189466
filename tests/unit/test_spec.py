"""One interface for cron, once and every schedules (what the materializer and the CLI use)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice

import pytest

from clockd.core import spec as spec_module
from clockd.core.cron import parse_cron
from clockd.core.model import ScheduleKind
from clockd.core.spec import (
    CronSpec,
    EverySpec,
    OnceSpec,
    compile_spec,
    validate_definition,
)
from clockd.core.timeline import CronTimeline, Skip
from clockd.core.zones import get_zone
from clockd.errors import InvalidCron, InvalidInput, NeverFires, UnknownZone

ANCHOR = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


# -- cron ----------------------------------------------------------------------------------


def test_cron_spec_follows_the_time_contract() -> None:
    spec = compile_spec(ScheduleKind.CRON, "30 2 * * *", "Europe/Paris", ANCHOR)
    assert isinstance(spec, CronSpec)
    assert spec.kind is ScheduleKind.CRON
    start = datetime(2026, 3, 28, tzinfo=UTC)
    assert [f.local.isoformat() for f in islice(spec.fires_after(start), 2)] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-30T02:30:00+02:00",
    ]
    assert iso(spec.next_after(start)) == "2026-03-28T01:30:00+00:00"
    events = list(islice(spec.events_after(start), 3))
    assert isinstance(events[1], Skip)
    assert spec.describe() == "At 02:30 every day (Europe/Paris)"


def test_cron_spec_accepts_the_kind_as_text_and_ignores_the_anchor() -> None:
    a = compile_spec("cron", "@daily", "UTC", ANCHOR)
    b = compile_spec(ScheduleKind.CRON, "@daily", "UTC", ANCHOR + timedelta(days=3))
    assert a is b
    assert iso(a.next_after(ANCHOR)) == "2026-03-02T00:00:00+00:00"


def test_compiled_specs_are_cached() -> None:
    first = compile_spec(ScheduleKind.EVERY, "90m", "UTC", ANCHOR)
    assert compile_spec(ScheduleKind.EVERY, "90m", "UTC", ANCHOR) is first
    assert compile_spec(ScheduleKind.EVERY, "90m", "UTC", ANCHOR + timedelta(seconds=1)) is not first


# -- once ----------------------------------------------------------------------------------


def test_once_fires_once() -> None:
    spec = compile_spec(ScheduleKind.ONCE, "2026-03-28T10:00:00+01:00", "Europe/Paris", ANCHOR)
    assert isinstance(spec, OnceSpec)
    at = datetime(2026, 3, 28, 9, tzinfo=UTC)
    assert spec.next_after(at - timedelta(microseconds=1)) == at
    assert spec.next_after(at) is None
    assert spec.next_after(at + timedelta(days=1)) is None
    fires = list(spec.fires_after(ANCHOR))
    assert [(f.utc.isoformat(), f.local.isoformat()) for f in fires] == [
        ("2026-03-28T09:00:00+00:00", "2026-03-28T10:00:00+01:00")
    ]
    assert list(spec.fires_after(at)) == []
    assert spec.describe() == "Once, at 2026-03-28T09:00:00Z (2026-03-28 10:00:00 Europe/Paris)"


def test_once_reads_a_local_time_in_the_zone() -> None:
    spec = compile_spec(ScheduleKind.ONCE, "2026-07-01T09:00", "America/New_York", ANCHOR)
    assert iso(spec.next_after(ANCHOR)) == "2026-07-01T13:00:00+00:00"


# -- every ---------------------------------------------------------------------------------


def test_every_counts_elapsed_time_and_ignores_dst() -> None:
    anchor = datetime(2026, 3, 28, 22, 0, tzinfo=UTC)  # 23:00 in Paris, the night before the gap
    spec = compile_spec(ScheduleKind.EVERY, "90m", "Europe/Paris", anchor)
    assert isinstance(spec, EverySpec)
    fires = list(islice(spec.fires_after(anchor), 4))
    assert [f.utc.isoformat() for f in fires] == [
        "2026-03-28T23:30:00+00:00",
        "2026-03-29T01:00:00+00:00",
        "2026-03-29T02:30:00+00:00",
        "2026-03-29T04:00:00+00:00",
    ]
    assert [f.local.isoformat() for f in fires] == [
        "2026-03-29T00:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T04:30:00+02:00",
        "2026-03-29T06:00:00+02:00",
    ]
    assert spec.describe() == ("Every 1h30m from 2026-03-28T22:00:00Z (elapsed time; not moved by daylight saving)")


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ("2026-03-01T00:00:00+00:00", "2026-03-01T13:30:00+00:00"),  # before the anchor: k = 1
        ("2026-03-01T12:00:00+00:00", "2026-03-01T13:30:00+00:00"),  # at the anchor: k = 1
        ("2026-03-01T13:29:59.999999+00:00", "2026-03-01T13:30:00+00:00"),
        ("2026-03-01T13:30:00+00:00", "2026-03-01T15:00:00+00:00"),  # strictly after
        ("2026-03-11T12:00:00+00:00", "2026-03-11T13:30:00+00:00"),
    ],
)
def test_every_next_after(after: str, expected: str) -> None:
    spec = compile_spec(ScheduleKind.EVERY, "90m", "UTC", ANCHOR)
    assert iso(spec.next_after(datetime.fromisoformat(after))) == expected


def test_every_chained_matches_fires_after() -> None:
    spec = compile_spec(ScheduleKind.EVERY, "7s", "UTC", ANCHOR)
    fires = [f.utc for f in islice(spec.fires_after(ANCHOR), 100)]
    t: datetime | None = ANCHOR
    for expected in fires:
        assert t is not None
        t = spec.next_after(t)
        assert t == expected


def test_every_ends_at_the_end_of_the_calendar() -> None:
    spec = compile_spec(ScheduleKind.EVERY, "1d", "UTC", datetime(9999, 12, 30, tzinfo=UTC))
    assert spec.next_after(datetime(9999, 12, 31, 1, tzinfo=UTC)) is None
    assert len(list(spec.fires_after(datetime(9999, 12, 29, tzinfo=UTC)))) == 1


def test_every_needs_an_anchor_and_at_least_one_second() -> None:
    with pytest.raises(ValueError):
        compile_spec(ScheduleKind.EVERY, "90m", "UTC")
    with pytest.raises(InvalidInput) as info:
        compile_spec(ScheduleKind.EVERY, "500ms", "UTC", ANCHOR)
    assert info.value.message == "every: the interval must be at least 1s, got 500ms"


def test_naive_instants_are_refused() -> None:
    spec = compile_spec(ScheduleKind.EVERY, "1m", "UTC", ANCHOR)
    with pytest.raises(ValueError):
        spec.next_after(datetime(2026, 1, 1))  # noqa: DTZ001  naive on purpose: refused


# -- validate_definition -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expr", "tz", "canonical"),
    [
        ("cron", "  0  9 * * mon-fri", "Europe/Paris", "0 9 * * MON-FRI"),
        ("cron", "@hourly", "UTC", "0 * * * *"),
        ("once", "2026-03-28T10:00:00+01:00", "UTC", "2026-03-28T09:00:00Z"),
        ("once", "2026-03-28T10:00", "Europe/Paris", "2026-03-28T09:00:00Z"),
        ("once", "2026-03-28T09:00:00.5Z", "UTC", "2026-03-28T09:00:00.500000Z"),
        ("every", "90m", "UTC", "1h30m"),
        ("every", "1s", "UTC", "1s"),
        (ScheduleKind.EVERY, "3600s", "Asia/Tokyo", "1h"),
    ],
)
def test_validate_definition_normalizes(kind: str, expr: str, tz: str, canonical: str) -> None:
    assert validate_definition(kind, expr, tz) == canonical


@pytest.mark.parametrize(
    ("kind", "expr", "tz", "error", "message"),
    [
        ("cron", "61 * * * *", "UTC", InvalidCron, "minute: 61 is out of range 0-59"),
        ("cron", "0 0 30 2 *", "UTC", NeverFires, "day-of-month: 30 never occurs in FEB"),
        (
            "cron",
            "0 9 * * *",
            "Europe/Pari",
            UnknownZone,
            "unknown time zone 'Europe/Pari'; did you mean Europe/Paris?",
        ),
        (
            "cron",
            "30 2 * 3 0L",
            "Europe/Paris",
            NeverFires,
            "30 2 * 3 0L never fires in Europe/Paris: every matching local time falls in a clock-change gap",
        ),
        (
            "once",
            "2026-03-29T02:30",
            "Europe/Paris",
            InvalidInput,
            "2026-03-29T02:30:00 does not exist in Europe/Paris (the clocks skip it at a DST change); "
            "give an offset or another time",
        ),
        (
            "once",
            "2026-03-28T10:00",
            "Nowhere/Town",
            UnknownZone,
            "unknown time zone 'Nowhere/Town' (use an IANA name such as Europe/Paris, or UTC)",
        ),
        ("every", "0s", "UTC", InvalidInput, "every: the interval must be at least 1s, got 0s"),
        ("every", "soon", "UTC", InvalidInput, "duration 'soon': cannot read 'soon' (e.g. 90m, 1h30m, 30s, 2d, 500ms)"),
        ("weekly", "x", "UTC", InvalidInput, "unknown schedule kind 'weekly' (cron, once or every)"),
    ],
)
def test_validate_definition_refuses(kind: str, expr: str, tz: str, error: type[InvalidInput], message: str) -> None:
    with pytest.raises(error) as info:
        validate_definition(kind, expr, tz)
    assert info.value.message == message


@pytest.mark.parametrize(
    "expr",
    ["30 2 * 3 0L", "30 2 25-31 3 SUN", "0 3 * 3 0L", "30 1 * 10 0L", "15 2 * * *", "0 9 1 * *", "5 4 * * 1-5",
     "0 0 29 2 *", "30 2 LW 3 *", "0 12 15W * *", "* * * * *"],
)  # fmt: skip
@pytest.mark.parametrize("tz", ["Europe/Paris", "America/New_York", "Australia/Sydney", "Asia/Tokyo", "UTC"])
def test_the_probe_shortcut_agrees_with_the_timeline(expr: str, tz: str) -> None:
    """validate_definition answers from the parse-time probe when its wall time is unique
    in the zone; the answer is the one enumerating the timeline from 2000 gives."""
    cron = parse_cron(expr)
    zone = get_zone(tz)
    fires = CronTimeline(cron, zone).next_after(spec_module._REFERENCE) is not None
    if spec_module._fires_at_probe(cron.probe_wall, zone):
        assert fires
    if fires:
        assert validate_definition("cron", expr, tz) == cron.normalized
    else:
        with pytest.raises(NeverFires):
            validate_definition("cron", expr, tz)
