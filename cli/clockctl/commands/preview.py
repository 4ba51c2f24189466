"""``clockctl preview``: the next fire times of a cron expression, with DST effects marked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer
from rich.table import Table

from clockctl.output import OutputFormat, console, emit_json, handle_errors
from clockctl.render import until
from clockd.core.cron import parse_cron
from clockd.core.durations import format_duration, parse_duration
from clockd.core.instants import format_instant, parse_instant
from clockd.core.planning import MAX_WINDOW
from clockd.core.timeline import CronTimeline, Fire, Skip
from clockd.core.upcoming import skip_notes
from clockd.core.zones import get_zone
from clockd.errors import InvalidInput

MAX_COUNT = 1000


def register(app: typer.Typer) -> None:
    @app.command("preview")
    @handle_errors
    def preview(
        expr: Annotated[str, typer.Argument(metavar="EXPR", help='cron expression, e.g. "30 2 * * *" or @daily')],
        tz: Annotated[str, typer.Option("--tz", metavar="ZONE", help="IANA time zone")] = "UTC",
        count: Annotated[
            int, typer.Option("-n", "--count", metavar="N", min=1, max=MAX_COUNT, help="how many fire times")
        ] = 10,
        after: Annotated[
            str | None,
            typer.Option(
                "--after",
                metavar="INSTANT",
                help="start instant, ISO 8601 with Z or an offset (default: now); "
                "a time without offset is read in --tz",
            ),
        ] = None,
        window: Annotated[
            str | None,
            typer.Option(
                "--window",
                metavar="DURATION",
                help="a flexible window (up to 5m): show the span each run may start in",
            ),
        ] = None,
        output: Annotated[
            OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="table or json")
        ] = OutputFormat.table,
    ) -> None:
        """Show the next N fire times of EXPR strictly after --after, in zone --tz.

        Times that do not exist (DST gap) are skipped and marked; a repeated
        hour (fall back) runs once at its first instant, or at both instants
        for interval jobs (hour field * or */n), and is marked too.

        JSON (-o json): an array with one object per real fire, in order:
        {"utc": "2026-03-30T00:30:00Z", "local": "2026-03-30T02:30:00+02:00",
        "note": null or the table's note ("DST gap: …", "repeated hour: …"),
        "skipped": ["2026-03-29T02:30"]}.
        "skipped" lists the local wall times (no offset: they do not exist)
        skipped in a gap since the previous fire; it is empty most of the time.
        With --window, each object also has "starts_by": the end of the span the run
        starts in (each run of a schedule starts at a fixed offset in [utc, starts_by),
        derived from its occurrence id: `clockctl show` gives a schedule's exact starts).
        """
        spread = _window(window)
        now = datetime.now(UTC)
        zone = get_zone(tz)
        cron = parse_cron(expr)
        start = parse_instant(after, tz, now) if after is not None else now
        timeline = CronTimeline(cron, zone)

        rows: list[tuple[Fire, list[Skip]]] = []
        skipped: list[Skip] = []
        for event in timeline.events_after(start):
            if isinstance(event, Skip):
                skipped.append(event)
                continue
            rows.append((event, skipped))
            skipped = []
            if len(rows) >= count:
                break

        if output is OutputFormat.json:
            docs = [_doc(fire, skips) for fire, skips in rows]
            if spread:
                for doc, (fire, _) in zip(docs, rows, strict=True):
                    doc["starts_by"] = format_instant(fire.utc + spread)
            emit_json(docs)
            return

        console.print(f"{cron.describe()} ({tz}) — next {count} after {format_instant(start)}")
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        table.add_column("#", justify="right")
        table.add_column(f"local ({tz})", no_wrap=True)
        table.add_column("UTC", no_wrap=True)
        table.add_column("from now", no_wrap=True)
        if spread:
            table.add_column("starts by (UTC)", no_wrap=True)
        table.add_column("note")
        for number, (fire, skips) in enumerate(rows, start=1):
            cells = [
                str(number),
                fire.local.strftime("%a %Y-%m-%d %H:%M:%S ") + _offset(fire.local),
                fire.utc.strftime("%Y-%m-%d %H:%M:%SZ"),
                until(fire.utc, now),
            ]
            if spread:
                cells.append((fire.utc + spread).strftime("%Y-%m-%d %H:%M:%SZ"))
            table.add_row(*cells, "; ".join(_notes(fire, skips)))
        console.print(table)
        if not rows:
            console.print("no fire times after that instant")


def _window(text: str | None) -> timedelta | None:
    if text is None or text.strip().lower() == "strict":
        return None
    spread = parse_duration(text)
    if spread > MAX_WINDOW:
        raise InvalidInput(f"--window: {format_duration(spread)} is longer than {format_duration(MAX_WINDOW)}")
    return spread or None


def _doc(fire: Fire, skips: list[Skip]) -> dict[str, Any]:
    return {
        "utc": format_instant(fire.utc),
        "local": fire.local.isoformat(),
        "note": "; ".join(_notes(fire, skips)) or None,  # the table's note column, word for word
        "skipped": [s.wall.isoformat(timespec="minutes") for s in skips],
    }


def _notes(fire: Fire, skips: list[Skip]) -> list[str]:
    """What the note column says of a fire: the gap skipped before it, then its own note."""
    return [*skip_notes(skips), *([fire.note] if fire.note else [])]


def _offset(local: datetime) -> str:
    text = local.strftime("%z")  # +0100
    return f"{text[:3]}:{text[3:]}" if len(text) == 5 else text
