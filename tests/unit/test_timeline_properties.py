"""Properties of the timeline over random expressions, zones and start instants (hypothesis).

For every (expression, zone, start in 1970-2037): evaluation terminates; results
are strictly increasing and strictly after the start; every local wall time
exists (round-trips) and matches the expression; a fixed-hour job never yields
the same local wall time twice; chained ``next_after`` gives the same instants
as ``fires_after``; the fires do not depend on where the enumeration starts.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clockd.core.cron import parse_cron
from clockd.core.timeline import CronTimeline, Fire, Skip
from clockd.core.zones import get_zone
from tests.unit.test_timeline_reference import ZONES, Reference, random_expression
from tests.unit.test_timeline_zonedata import transitions

SETTINGS = settings(
    max_examples=250,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FIRES = 25

_CHANGES = {tz: transitions(tz, 1970, 2038) for tz in ZONES}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Reference, str, datetime]:
    ref = random_expression(random.Random(draw(st.integers(0, 2**32 - 1))))
    tz = draw(st.sampled_from(ZONES))
    changes = _CHANGES[tz]
    if bool(changes) and draw(st.booleans()):
        # Near a clock change: within a day and a half either side, to the second.
        center = draw(st.sampled_from(changes))
        start = center + timedelta(seconds=draw(st.integers(-36 * 3600, 36 * 3600)))
    else:
        start = _EPOCH + timedelta(seconds=draw(st.integers(0, 68 * 365 * 86400)))
    if draw(st.booleans()):
        start += timedelta(microseconds=draw(st.integers(1, 999_999)))
    return ref, tz, start


def check(ref: Reference, tz: str, start: datetime) -> list[Fire]:
    zone = get_zone(tz)
    tl = CronTimeline(parse_cron(ref.text), zone)
    fires = list(islice(tl.fires_after(start), FIRES))
    utcs = [f.utc for f in fires]
    assert all(t > start for t in utcs)
    assert all(a < b for a, b in pairwise(utcs))
    for fire in fires:
        assert fire.utc.tzinfo is UTC and fire.local.tzinfo is zone
        wall = fire.local.replace(tzinfo=None)
        # The wall time exists: read back in the zone (with its fold) it is this instant.
        assert wall.replace(tzinfo=zone, fold=fire.local.fold).astimezone(UTC) == fire.utc
        assert fire.utc.astimezone(zone).replace(tzinfo=None) == wall
        assert ref.matches(wall), (ref.text, tz, fire)
    if not ref.interval:
        walls = [f.local.replace(tzinfo=None) for f in fires]
        assert len(set(walls)) == len(walls), (ref.text, tz)
    # Chained next_after gives the same instants.
    t: datetime | None = start
    for expected in utcs:
        assert t is not None
        t = tl.next_after(t)
        assert t == expected
    if len(utcs) < FIRES:
        assert tl.next_after(utcs[-1] if utcs else start) is None
    # events_after carries the same fires, skips only for wall times that do not exist.
    event_fires: list[datetime] = []
    for event in islice(tl.events_after(start), FIRES + 5000):
        if isinstance(event, Skip):
            wall = event.wall
            real = [wall.replace(tzinfo=zone, fold=f).astimezone(UTC) for f in (0, 1)]
            assert all(r.astimezone(zone).replace(tzinfo=None) != wall for r in real)
            assert ref.matches(wall)
        else:
            event_fires.append(event.utc)
            if len(event_fires) == len(utcs):
                break
    assert event_fires == utcs
    # Starting again from any fire gives the rest: the fires do not depend on the start.
    if len(utcs) > 2:
        middle = len(utcs) // 2
        again = [f.utc for f in islice(tl.fires_after(utcs[middle]), len(utcs) - middle - 1)]
        assert again == utcs[middle + 1 :]
    return fires


@SETTINGS
@given(cases())
def test_timeline_properties(case: tuple[Reference, str, datetime]) -> None:
    check(*case)


@SETTINGS
@given(cases(), st.integers(1, 7 * 86400))
def test_fires_in_a_window_do_not_depend_on_the_start(case: tuple[Reference, str, datetime], back: int) -> None:
    ref, tz, start = case
    tl = CronTimeline(parse_cron(ref.text), get_zone(tz))
    later = [f.utc for f in islice(tl.fires_after(start), 10)]
    earlier = tl.fires_after(start - timedelta(seconds=back))
    seen = [f.utc for f in islice((f for f in earlier if f.utc > start), 10)]
    assert seen == later
