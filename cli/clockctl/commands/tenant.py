"""``clockctl tenant``: per-tenant limits, kept in the store and enforced there.

* ``--max-schedules N``: live (active or paused) schedules; a create over it is
  refused naming the limit (exit 1).
* ``--max-running N``: occurrences running at once; more wait in the queue.
* ``--max-triggers-per-minute N``: runs started per minute (UTC); more wait for the
  next minute.
* ``--catch-up-rate N``: late runs a misfire ``catch_up`` lets through, per minute;
  they are spaced out at that rate.

Every worker claims in tenant-fair order (round-robin across tenants within a
batch), so one tenant's burst never delays another tenant's runs. ``none``
removes a limit; options left out keep theirs.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from clockctl.context import with_ops
from clockctl.output import OutputFormat, console, emit_json, handle_errors
from clockd.core.model import TenantLimits, TenantUsage
from clockd.errors import InvalidInput

Output = Annotated[OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")]


def _limit(option: str, help_text: str) -> Any:
    return typer.Option(option, metavar="N|none", help=help_text)


tenant = typer.Typer(
    name="tenant",
    help="Per-tenant limits: schedules, running occurrences, triggers per minute, catch-up rate.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@tenant.command("set")
@handle_errors
def set_(
    name: Annotated[str, typer.Argument(metavar="NAME", help="tenant name")],
    max_schedules: Annotated[str | None, _limit("--max-schedules", "live schedules at most")] = None,
    max_running: Annotated[str | None, _limit("--max-running", "occurrences running at once at most")] = None,
    max_triggers_per_minute: Annotated[
        str | None, _limit("--max-triggers-per-minute", "runs started per minute at most")
    ] = None,
    catch_up_rate: Annotated[str | None, _limit("--catch-up-rate", "late (catch-up) runs per minute at most")] = None,
    output: Output = OutputFormat.table,
) -> None:
    """Set a tenant's limits (none removes one; options left out keep theirs)."""
    given = {
        "max_schedules": max_schedules,
        "max_running": max_running,
        "max_triggers_per_minute": max_triggers_per_minute,
        "catch_up_rate": catch_up_rate,
    }
    changes = {key: _parse(key, value) for key, value in given.items() if value is not None}
    if not changes:
        raise InvalidInput(
            "nothing to set: give --max-schedules, --max-running, --max-triggers-per-minute or --catch-up-rate"
        )
    limits = with_ops(lambda ops: ops.set_tenant(name, **changes), create=True)
    if output is OutputFormat.json:
        emit_json(_limits_doc(limits))
        return
    console.print(f"tenant {name}: {_describe(limits)}")


@tenant.command("list")
@handle_errors
def list_(output: Output = OutputFormat.table) -> None:
    """List tenants (those with schedules or limits): limits and what they use."""
    usage = with_ops(lambda ops: ops.tenants())
    if output is OutputFormat.json:
        emit_json([_usage_doc(u) for u in usage])
        return
    table = Table(box=None, header_style="bold")
    for col in ("TENANT", "SCHEDULES", "RUNNING", "TRIGGERS/MIN", "CATCH-UP/MIN"):
        table.add_column(col)
    for u in usage:
        lim = u.limits
        table.add_row(
            lim.tenant,
            f"{u.schedules}/{_cap(lim.max_schedules)}",
            f"{u.running}/{_cap(lim.max_running)}",
            _cap(lim.max_triggers_per_minute),
            _cap(lim.catch_up_rate),
        )
    console.print(table)


def _parse(key: str, value: str) -> int | None:
    if value.strip().lower() == "none":
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidInput(f"--{key.replace('_', '-')}: expected a number or none, got {value!r}") from None


def _cap(value: int | None) -> str:
    return "-" if value is None else str(value)


def _limits_doc(limits: TenantLimits) -> dict[str, Any]:
    return {
        "tenant": limits.tenant,
        "max_schedules": limits.max_schedules,
        "max_running": limits.max_running,
        "max_triggers_per_minute": limits.max_triggers_per_minute,
        "catch_up_rate": limits.catch_up_rate,
    }


def _usage_doc(usage: TenantUsage) -> dict[str, Any]:
    return {**_limits_doc(usage.limits), "schedules": usage.schedules, "running": usage.running}


def _describe(limits: TenantLimits) -> str:
    parts = [
        f"max schedules {_cap(limits.max_schedules)}",
        f"max running {_cap(limits.max_running)}",
        f"max triggers/min {_cap(limits.max_triggers_per_minute)}",
        f"catch-up rate {_cap(limits.catch_up_rate)}/min",
    ]
    return ", ".join(parts) + " (- = no limit)"


def register(app: typer.Typer) -> None:
    app.add_typer(tenant)
