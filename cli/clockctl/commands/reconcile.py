"""``clockctl reconcile``: is every instant each schedule expected accounted for, exactly once?

Exit 0 when every expected instant in the range has exactly one occurrence in an
accounted state (SUCCEEDED, RUNNING, queued, DEAD, MISSED, SKIPPED_OVERLAP, CANCELED)
or is not due yet; exit 1 with the list of problems (missing, doubled, unexpected)
otherwise. The rules are in ``clockd.services.reconcile``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from clockctl.context import with_ops
from clockctl.output import OutputFormat, console, emit_json, err_console, handle_errors
from clockctl.render import iso, stamp
from clockd.core.instants import parse_instant
from clockd.errors import InvalidInput
from clockd.services.ops import Ops

if TYPE_CHECKING:  # the reconciler is imported by the verb (start-up)
    from clockd.services.reconcile import Entry, Report, Status

Output = Annotated[OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")]
# Show a progress bar (on a terminal only) for ranges longer than this, or this many schedules.
LONG_RANGE = timedelta(hours=6)
MANY_SCHEDULES = 200
# A not-yet-materialized instant due longer ago than this is worth a note (not a failure).
OVERDUE = timedelta(minutes=1)


def _order() -> list[Status]:
    """Accounted states in the order the summary lists them."""
    from clockd.services.reconcile import PROBLEMS, Status

    return [s for s in Status if s not in PROBLEMS] + sorted(PROBLEMS)


def register(app: typer.Typer) -> None:
    @app.command(
        "reconcile",
        epilog="Example: clockctl reconcile --from now-1d --to now backup -o json",
    )
    @handle_errors
    def reconcile(
        name: Annotated[
            str | None, typer.Argument(metavar="NAME", help="only this schedule (default: every schedule)")
        ] = None,
        start: Annotated[
            str,
            typer.Option(
                "--from", metavar="INSTANT", help="start of the range, inclusive (ISO 8601 with Z or an offset, now-2h)"
            ),
        ] = "now-1h",
        end: Annotated[str, typer.Option("--to", metavar="INSTANT", help="end of the range, inclusive")] = "now",
        tenant: Annotated[
            str | None,
            typer.Option(
                "--tenant",
                metavar="TENANT",
                help="tenant of NAME (default: default); without NAME, check only this tenant's schedules",
            ),
        ] = None,
        everything: Annotated[
            bool, typer.Option("--all", help="list every instant and how it is accounted for, not only problems")
        ] = False,
        output: Output = OutputFormat.table,
    ) -> None:
        """Check that every instant each schedule should have fired in the range is accounted
        for exactly once: recomputed from its version history and the time contract, compared
        with the recorded occurrences. Exit 1 with a list when something is missing, doubled
        or unexpected."""
        now = datetime.now(UTC)
        first = parse_instant(start, None, now)
        last = parse_instant(end, None, now)
        if last < first:
            raise InvalidInput(f"--to ({iso(last)}) is before --from ({iso(first)})")

        async def go(ops: Ops) -> Report:
            with _progress(last - first) as (loaded, advance):
                return await ops.reconcile(first, last, name, tenant, progress=advance, on_loaded=loaded)

        report = with_ops(go)
        from clockd.services.reconcile import Status

        overdue = sum(1 for e in report.entries if e.status is Status.NOT_YET_DUE and e.instant < now - OVERDUE)
        if output is OutputFormat.json:
            emit_json({**report_doc(report, everything), "overdue": overdue})
        else:
            _print(report, everything)
            if overdue:
                err_console.print(
                    f"note: {overdue} instant(s) not materialized although due more than "
                    f"{int(OVERDUE.total_seconds())}s ago: is a clockd materializer running?",
                    markup=False,
                    highlight=False,
                )
        if not report.ok:
            raise typer.Exit(1)


def entry_doc(e: Entry) -> dict[str, Any]:
    return {
        "schedule": e.schedule,
        "schedule_id": e.schedule_id,
        "instant": iso(e.instant),
        "status": str(e.status),
        "expected_version": e.expected_version,
        "reason": e.reason,
        "detail": e.detail or None,
        "occurrences": [
            {"id": o.id, "version": o.version, "state": str(o.state), "reason": o.reason} for o in e.occurrences
        ],
    }


def report_doc(report: Report, everything: bool = False) -> dict[str, Any]:
    """The JSON document (a stable interface): ``instants`` only with ``--all``."""
    doc: dict[str, Any] = {
        "from": iso(report.start),
        "to": iso(report.end),
        "ok": report.ok,
        "schedules": report.schedules,
        "expected": report.expected,
        "unaccounted": report.unaccounted,
        "counts": {str(s): report.counts[s] for s in _order() if report.counts.get(s)},
        "problems": [entry_doc(e) for e in report.problems],
    }
    if everything:
        doc["instants"] = [entry_doc(e) for e in report.entries]
    return doc


def _summary(report: Report) -> str:
    counts = ", ".join(f"{report.counts[s]} {s}" for s in _order() if report.counts.get(s))
    head = (
        f"{report.schedules} schedule(s), {report.expected} expected instant(s) "
        f"from {stamp(report.start)} to {stamp(report.end)}"
    )
    return f"{head}: {counts or 'nothing'}"


def _print(report: Report, everything: bool) -> None:
    rows = report.entries if everything else report.problems
    if rows:
        table = Table(box=None, header_style="bold")
        for column in ("SCHEDULE", "INSTANT (UTC)", "PROBLEM" if not everything else "STATUS", "DETAIL"):
            table.add_column(column, no_wrap=column != "DETAIL")
        for e in rows:
            detail = e.detail or (
                f"{e.occurrences[0].id}" + (f": {e.reason}" if e.reason else "") if e.occurrences else ""
            )
            table.add_row(e.schedule, stamp(e.instant), str(e.status), detail)
        console.print(table)
    if report.ok:
        console.print(f"{_summary(report)} — all accounted for", markup=False, highlight=False)
    else:
        err_console.print(f"{_summary(report)} — {report.unaccounted} not accounted for", markup=False, highlight=False)


@contextmanager
def _progress(span: timedelta) -> Iterator[tuple[Callable[[int], None], Callable[[int], None]]]:
    """(loaded(total), advance(n)) for a progress bar over schedules on stderr: only on a
    terminal, and only for a long range or many schedules (decided once the total is known)."""
    if not sys.stderr.isatty():
        yield (lambda _total: None), (lambda _n: None)
        return
    # Imported here, not with the module: every clockctl command imports it (start-up).
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("reconciling"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("schedules"),
        TimeElapsedColumn(),
    )
    progress = Progress(*columns, console=err_console, transient=True)
    task: list[Any] = []

    def loaded(total: int) -> None:
        if span >= LONG_RANGE or total >= MANY_SCHEDULES:
            progress.start()
            task.append(progress.add_task("reconcile", total=total))

    def advance(n: int) -> None:
        if task:
            progress.advance(task[0], n)

    try:
        yield loaded, advance
    finally:
        progress.stop()
