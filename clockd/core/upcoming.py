"""The next runs of a schedule with their daylight-saving notes, as people read them.

One place for what ``clockctl preview``, ``clockctl show``, the API's "next runs"
and the dashboard show: each real fire with the local wall times that were
skipped since the previous one (a DST gap) and the fire's own note (a repeated
hour resolved by the time contract). Pure: no I/O, no clock read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from clockd.core.model import ScheduleKind
from clockd.core.spec import Spec
from clockd.core.timeline import Fire, Skip


@dataclass(frozen=True, slots=True)
class Upcoming:
    """One real run and the gap skips that came before it (since the previous run)."""

    fire: Fire
    skipped: tuple[Skip, ...] = ()

    @property
    def notes(self) -> list[str]:
        """What a person should know about this run: grouped gap notes, then the fire's note."""
        notes = skip_notes(self.skipped)
        if self.fire.note:
            notes.append(self.fire.note)
        return notes


def upcoming(spec: Spec, after: datetime, count: int) -> list[Upcoming]:
    """The first ``count`` fires strictly after ``after`` (aware), each with its skips."""
    rows: list[Upcoming] = []
    skipped: list[Skip] = []
    if count <= 0:
        return rows
    for event in spec.events_after(after):
        if isinstance(event, Skip):
            skipped.append(event)
            continue
        rows.append(Upcoming(event, tuple(skipped)))
        skipped = []
        if len(rows) >= count:
            break
    return rows


def upcoming_shared(spec: Spec, after: datetime, count: int) -> list[Upcoming]:
    """:func:`upcoming`, memoized: a page that lists many schedules on one expression and
    zone (``compile_spec`` gives them one spec object) plans it once, and so do page loads
    in the same second. A cron schedule fires and skips on whole seconds only, so for it
    ``after`` counts to its second (the same fires strictly after either); ``once`` and
    ``every`` instants may carry microseconds, so theirs is kept whole."""
    if spec.kind is ScheduleKind.CRON:
        after = after.replace(microsecond=0)
    return list(_upcoming_memo(spec, after, count))


@lru_cache(maxsize=8192)
def _upcoming_memo(spec: Spec, after: datetime, count: int) -> tuple[Upcoming, ...]:
    # Keyed by the spec object itself (identity): specs are immutable, so an entry never
    # goes stale, and holding it keeps its id from being reused.
    return tuple(upcoming(spec, after, count))


def skip_notes(skips: tuple[Skip, ...] | list[Skip]) -> list[str]:
    """One note per gap: ``DST gap: 02:00-02:55 (12 times) do not exist on 2026-03-29, skipped``."""
    groups: dict[tuple[str, str], list[Skip]] = {}
    for skip in skips:
        kind = skip.note.split(":", 1)[0]
        groups.setdefault((kind, skip.wall.strftime("%Y-%m-%d")), []).append(skip)
    notes = []
    for (kind, day), items in groups.items():
        if len(items) == 1:
            notes.append(items[0].note)
        else:
            first, last = items[0].wall, items[-1].wall
            notes.append(f"{kind}: {first:%H:%M}-{last:%H:%M} ({len(items)} times) do not exist on {day}, skipped")
    return notes
