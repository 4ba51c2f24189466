"""``upcoming_shared`` (the dashboard's next runs) answers what ``upcoming`` does, however
``after`` falls within its second, DST notes included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from clockd.core.model import ScheduleKind
from clockd.core.spec import compile_spec
from clockd.core.upcoming import upcoming, upcoming_shared

ANCHOR = datetime(2026, 3, 1, 0, 0, 0, 250_000, tzinfo=UTC)


def test_shared_next_runs_are_upcoming_s_for_every_microsecond_of_a_second() -> None:
    # The night Paris springs forward: 02:30 is skipped, with its note.
    cron = compile_spec(ScheduleKind.CRON, "30 2 * * *", "Europe/Paris", ANCHOR)
    every = compile_spec(ScheduleKind.EVERY, "90m", "UTC", ANCHOR)
    base = datetime(2026, 3, 28, 0, 30, tzinfo=UTC)
    for spec in (cron, every):
        for us in (0, 1, 249_999, 250_000, 250_001, 999_999):
            for at in (base + timedelta(microseconds=us), ANCHOR + timedelta(minutes=90, microseconds=us - 250_000)):
                assert upcoming_shared(spec, at, 3) == upcoming(spec, at, 3), (spec, at)
    shown = upcoming_shared(cron, base, 3)
    assert any("02:30" in note for row in shown for note in row.notes)
