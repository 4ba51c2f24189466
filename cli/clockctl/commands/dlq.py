"""``clockctl dlq``: the dead-letter queue — occurrences that went DEAD.

An occurrence goes DEAD when its retries are exhausted or its failure is permanent
(it could not start, or it exited with one of the schedule's
``--permanent-exit-codes``). It keeps its last error. ``replay`` puts it back in
the queue now with the same id (``CLOCKD_OCCURRENCE_ID``) and the next attempt
number; ``drop`` takes it out of the list: it becomes CANCELED with the reason
"dropped from the dead-letter queue", and its attempts and last error stay
until retention prunes them (nothing is deleted at once).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from clockctl.context import with_ops
from clockctl.output import OutputFormat, console, emit_json, handle_errors
from clockctl.render import occurrence_doc, short

Output = Annotated[OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")]
OccurrenceArg = Annotated[
    str, typer.Argument(metavar="OCCURRENCE", help="occurrence id (or a unique prefix of 6+ characters)")
]

dlq = typer.Typer(
    name="dlq",
    help="The dead-letter queue: list, replay or drop DEAD occurrences.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@dlq.command("list")
@handle_errors
def list_(
    name: Annotated[
        str | None, typer.Argument(metavar="[NAME]", help="only this schedule's", show_default=False)
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", metavar="N", help="how many, most recently dead first")] = 50,
    tenant: Annotated[str, typer.Option("--tenant", metavar="TENANT", help="tenant of the schedules")] = "default",
    output: Output = OutputFormat.table,
) -> None:
    """List DEAD occurrences, most recently dead first, with their last error."""
    dead = with_ops(lambda ops: ops.dead_letters(name, tenant, limit))
    if output is OutputFormat.json:
        emit_json([occurrence_doc(o) for o in dead])
        return
    if not dead:
        # It said only "empty" while status counted dead letters in other tenants.
        whose = f"schedule {name!r} of tenant {tenant!r}" if name else f"tenant {tenant!r}"
        console.print(f"no dead letters in {whose} (--tenant NAME for another tenant's)")
        return
    table = Table(box=None, header_style="bold")
    for col in ("ID", "SCHEDULE", "SCHEDULED FOR (UTC)", "DIED (UTC)", "ATT", "EXIT", "LAST ERROR"):
        table.add_column(col, no_wrap=col in ("ID", "SCHEDULED FOR (UTC)", "DIED (UTC)"))
    for o in dead:
        table.add_row(
            o.id,
            o.schedule_name,
            short(o.scheduled_for),
            short(o.finished_at),
            str(o.attempts),
            "-" if o.exit_code is None else str(o.exit_code),
            (o.last_error or o.reason or "").splitlines()[0] if (o.last_error or o.reason) else "",
        )
    console.print(table)


@dlq.command("replay")
@handle_errors
def replay(occurrence: OccurrenceArg, output: Output = OutputFormat.table) -> None:
    """Put a DEAD occurrence back in the queue now: same id, the next attempt number."""
    occ = with_ops(lambda ops: ops.replay(occurrence))
    if output is OutputFormat.json:
        emit_json(occurrence_doc(occ))
        return
    console.print(f"replayed {occ.id} ({occ.schedule_name}): queued now as attempt {occ.attempts + 1}")


@dlq.command("drop")
@handle_errors
def drop(occurrence: OccurrenceArg, output: Output = OutputFormat.table) -> None:
    """Take a DEAD occurrence out of the dead-letter queue: it becomes CANCELED (kept in
    history until retention, with its attempts and last error)."""
    occ = with_ops(lambda ops: ops.drop(occurrence))
    if output is OutputFormat.json:
        emit_json(occurrence_doc(occ))
        return
    console.print(f"dropped {occ.id} ({occ.schedule_name}): CANCELED")


def register(app: typer.Typer) -> None:
    app.add_typer(dlq)
