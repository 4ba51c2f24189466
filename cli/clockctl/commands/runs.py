"""History verbs: runs (occurrences) and logs (an attempt's output)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.table import Table

from clockctl.context import with_ops
from clockctl.output import OutputFormat, console, emit_json, err_console, handle_errors
from clockctl.render import attempt_doc, occurrence_doc, short
from clockd.core.model import Attempt, Occurrence
from clockd.errors import NotFound
from clockd.services.ops import Ops

Output = Annotated[OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")]


def register(app: typer.Typer) -> None:
    @app.command("runs")
    @handle_errors
    def runs(
        name: Annotated[
            str | None, typer.Argument(metavar="NAME", help="schedule name (default: all)", show_default=False)
        ] = None,
        limit: Annotated[int, typer.Option("--limit", "-n", metavar="N", help="how many, newest first")] = 20,
        upcoming: Annotated[bool, typer.Option("--upcoming", help="also list planned occurrences not yet due")] = False,
        tenant: Annotated[str, typer.Option("--tenant", metavar="TENANT", help="tenant of the schedule")] = "default",
        output: Output = OutputFormat.table,
    ) -> None:
        """List occurrences newest first: state, attempts, times, exit code."""
        occurrences = with_ops(lambda ops: ops.runs(name, limit, tenant, upcoming))
        if output is OutputFormat.json:
            emit_json([occurrence_doc(o) for o in occurrences])
            return
        table = Table(box=None, header_style="bold")
        for col in (
            "ID",
            "SCHEDULE",
            "SCHEDULED FOR (UTC)",
            "STATE",
            "ATT",
            "STARTED",
            "FINISHED",
            "EXIT",
        ):
            table.add_column(col, no_wrap=col in ("ID", "SCHEDULED FOR (UTC)"))
        for o in occurrences:
            exit_code = "-" if o.exit_code is None else str(o.exit_code)
            table.add_row(
                o.id,
                o.schedule_name + (" (run-now)" if o.manual else ""),
                short(o.scheduled_for),
                str(o.state) + (f": {o.reason}" if o.reason and o.state != "SUCCEEDED" else ""),
                str(o.attempts),
                short(o.started_at),
                short(o.finished_at),
                exit_code,
            )
        console.print(table)

    @app.command("logs")
    @handle_errors
    def logs(
        occurrence: Annotated[
            str,
            typer.Argument(
                metavar="OCCURRENCE|NAME",
                help="occurrence id (or a unique prefix of 6+ characters), or a schedule name: its latest run",
            ),
        ],
        attempt: Annotated[
            int | None, typer.Option("--attempt", metavar="N", help="attempt number (default: the latest)")
        ] = None,
        tenant: Annotated[str, typer.Option("--tenant", metavar="TENANT", help="tenant of the schedule")] = "default",
        output: Output = OutputFormat.table,
    ) -> None:
        """Print the captured output (stdout and stderr, last 64 KiB) of an attempt: of an
        occurrence, or of the latest run of a schedule (clockctl logs NAME)."""

        async def go(ops: Ops) -> tuple[Occurrence, Attempt]:
            try:
                return await ops.attempt(occurrence, attempt)
            except NotFound as missing:
                try:
                    recent = await ops.runs(occurrence, 50, tenant)
                except NotFound:
                    # Neither an occurrence nor a schedule: say both, and why a short id fails.
                    short = " (an occurrence id prefix needs 6 or more characters)" if len(occurrence) < 6 else ""
                    raise NotFound(
                        f"no occurrence and no schedule named {occurrence!r}{short}; clockctl runs NAME lists ids"
                    ) from missing
            ran = next((o for o in recent if o.attempts > 0), None)
            if ran is None:
                raise NotFound(f"schedule {occurrence!r} has not run yet (clockctl runs {occurrence} --upcoming)")
            return await ops.attempt(ran.id, attempt)

        occ, att = with_ops(go)
        if output is OutputFormat.json:
            emit_json(attempt_doc(att))
            return
        # The header goes to a terminal; an attempt with no output says so wherever stderr
        # goes (it printed nothing at all, which read as a failure of logs itself).
        if sys.stderr.isatty() or not att.output:
            err_console.print(
                f"[dim]{occ.schedule_name} {occ.id} attempt {att.number}: {att.outcome}"
                + (f", exit {att.exit_code}" if att.exit_code is not None else "")
                + (f", {att.error}" if att.error else "")
                + ("; no output captured" if not att.output else "")
                + "[/dim]",
                highlight=False,
            )
        sys.stdout.write(att.output)
        if att.output and not att.output.endswith("\n"):
            sys.stdout.write("\n")
