"""The API's next-runs preview: the cached cron walk gives what an uncached walk gives,
for any instant inside a second (microseconds) and across a DST gap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from clockd.api.views import next_runs
from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind

PARIS = ScheduleDef(name="x", kind=ScheduleKind.CRON, expr="30 2 * * *", tz="Europe/Paris", target=NoopTarget())


def test_runs_strictly_after_any_instant_of_a_second_with_dst_notes() -> None:
    fire = datetime(2026, 3, 28, 1, 30, tzinfo=UTC)  # 02:30 CET, the night before the gap
    before = next_runs(PARIS, fire - timedelta(microseconds=1), fire, 3)
    assert [r["local"] for r in before] == [
        "2026-03-28T02:30:00+01:00", "2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00",
    ]  # fmt: skip
    assert before[1]["note"] is not None and "2026-03-29" in before[1]["note"]  # 02:30 did not exist that day
    for offset in (0, 1, 999_999):  # the fire instant itself and later in its second: never included
        after = next_runs(PARIS, fire + timedelta(microseconds=offset), fire, 2)
        assert [r["local"] for r in after] == ["2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00"]
    after[0]["note"] = "changed by a caller"
    assert next_runs(PARIS, fire, fire, 2)[0]["note"] != "changed by a caller"  # answers never share dicts
