"""``clockctl explain NAME --at INSTANT``: why a schedule did (or did not) run then.

The answers and the order they are tried in are in ``clockd.services.explain``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from clockctl.context import with_ops
from clockctl.output import OutputFormat, console, emit_json, handle_errors
from clockctl.render import attempt_doc, iso, local, occurrence_doc, stamp

if TYPE_CHECKING:
    from clockd.services.explain import Explanation

Output = Annotated[OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")]


def register(app: typer.Typer) -> None:
    @app.command(
        "explain",
        epilog="Examples: clockctl explain backup --at 2026-03-29T02:30  (local time in the schedule's zone); "
        "clockctl explain backup --at 2026-03-29T00:30:00Z -o json",
    )
    @handle_errors
    def explain(
        name: Annotated[str, typer.Argument(metavar="NAME", help="schedule name")],
        at: Annotated[
            str,
            typer.Option(
                "--at",
                metavar="INSTANT",
                help="ISO 8601 with Z or an offset, now-1h, or a local time in the schedule's zone",
            ),
        ],
        tenant: Annotated[str, typer.Option("--tenant", metavar="TENANT", help="tenant of the schedule")] = "default",
        output: Output = OutputFormat.table,
    ) -> None:
        """Why did (or didn't) NAME run at INSTANT? From the records: the time contract (not an
        instant of the expression, DST gap, repeated hour), the version history (paused,
        updated, deleted), and the occurrence with its attempts (succeeded, running, queued,
        dead, missed, skipped by overlap, canceled)."""
        found = with_ops(lambda ops: ops.explain(name, at, tenant))
        if output is OutputFormat.json:
            emit_json(explanation_doc(found))
            return
        where = stamp(found.at.instant) if found.at.wall is None else f"{found.at.wall:%Y-%m-%dT%H:%M} ({found.tz})"
        console.print(f"{found.schedule} at {where}: {found.why}", markup=False, highlight=False)
        console.print(f"  {found.summary}", markup=False, highlight=False)
        width = max((len(k) for k, _ in found.facts), default=0)
        for key, value in found.facts:
            console.print(f"  {key:<{width}}  {value}", markup=False, highlight=False)
        for label, instant in (("previous instant", found.before), ("next instant", found.after)):
            if instant is not None and found.why in _NEIGHBOURS:
                line = f"  {label}: {local(instant, found.tz)} ({stamp(instant)})"
                console.print(line, markup=False, highlight=False)


# Answers about the expression itself: the nearest instants help.
_NEIGHBOURS = {"not_an_instant", "dst_gap", "repeated_hour", "before_creation", "paused", "deleted"}


def explanation_doc(e: Explanation) -> dict[str, Any]:
    """The JSON document (a stable interface)."""
    return {
        "schedule": e.schedule,
        "schedule_id": e.schedule_id,
        "tz": e.tz,
        "at": iso(e.at.instant) if e.at.wall is None else None,
        "wall": e.at.wall.isoformat(timespec="minutes") if e.at.wall is not None else None,
        "why": str(e.why),
        "summary": e.summary,
        "version": e.version,
        "facts": dict(e.facts),
        "occurrences": [occurrence_doc(o) for o in e.occurrences],
        "attempts": [attempt_doc(a) for a in e.attempts],
        "nearest_before": iso(e.before),
        "nearest_after": iso(e.after),
    }
