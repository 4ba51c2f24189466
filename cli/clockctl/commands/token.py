"""``clockctl token`` and ``clockctl audit``: the HTTP API's bearer tokens and audit log.

On the store (local and admin use: run as a login that may write the store), or with
``--server``/``--token`` (``CLOCKD_SERVER``/``CLOCKD_TOKEN``, a context) through the API's
``/v1/tokens`` and ``/v1/audit`` with the same output, ``-o json`` and exit codes.

``token create`` prints the token once; only its sha256 is stored (``clockd.tokens``).
Roles: readonly, operator, admin (the tenant's audit log and tokens), cluster-admin
(every tenant). Token changes are recorded in the audit log: on the store as the local
user (``local:USER``), over the API as the calling token (the API records it). Over the
API the calling token's role and tenant decide what it may do: another tenant answers
404 (exit 1), a role too low 403 (exit 4); "default" and no ``--tenant`` mean the
token's own tenant.
"""

from __future__ import annotations

import getpass
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from clockctl.context import with_ops
from clockctl.output import OutputFormat, console, emit_json, handle_errors
from clockd.core.durations import parse_duration
from clockd.core.instants import format_instant
from clockd.store import ApiToken

Output = Annotated[OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")]
Tenant = Annotated[str, typer.Option("--tenant", "-t", metavar="TENANT", help="the tenant the token acts in")]

token = typer.Typer(
    name="token",
    help="Bearer tokens of the HTTP API (clockd --mode api): create, list, revoke; on the store, "
    "or through the API with --server (as the calling token, within its role and tenant).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _actor() -> str:
    try:
        return f"local:{getpass.getuser()}"
    except (KeyError, OSError):
        return "local"


def _doc(t: ApiToken) -> dict[str, Any]:
    def opt(at: datetime | None) -> str | None:
        return None if at is None else format_instant(at)

    return {
        "id": t.id,
        "tenant": t.tenant,
        "name": t.name,
        "role": t.role,
        "created_at": format_instant(t.created_at),
        "expires_at": opt(t.expires_at),
        "revoked_at": opt(t.revoked_at),
    }


@token.command("create")
@handle_errors
def create(
    tenant: Tenant = "default",
    role: Annotated[
        str, typer.Option("--role", metavar="ROLE", help="readonly, operator, admin or cluster-admin")
    ] = "readonly",
    name: Annotated[
        str | None, typer.Option("--name", metavar="NAME", help="shown in the audit log (default ROLE)")
    ] = None,
    expires: Annotated[
        str | None, typer.Option("--expires", metavar="DURATION", help="e.g. 90d (default: never)")
    ] = None,
    output: Output = OutputFormat.table,
) -> None:
    """Create a token and print it ONCE (the store keeps only its hash)."""
    expires_in = parse_duration(expires) if expires else None  # bad input: exit 2 before anything is reached
    issued = with_ops(lambda ops: ops.create_token(tenant, role, name or role, expires_in, _actor()))
    if output is OutputFormat.json:
        emit_json({"token": issued.secret, **_doc(issued.record)})
        return
    console.print(issued.secret, highlight=False, soft_wrap=True)
    console.print(
        f"# token {issued.record.name!r} ({role}) of tenant {issued.record.tenant}, id {issued.record.id}: "
        "shown once, keep it now (Authorization: Bearer …)",
        highlight=False,
        style="dim",
    )


@token.command("list")
@handle_errors
def list_(
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            "-t",
            metavar="TENANT",
            help="only this tenant's (default: all on the store, the token's over --server)",
        ),
    ] = None,
    output: Output = OutputFormat.table,
) -> None:
    """List tokens (never the tokens themselves): id, tenant, name, role, expiry, revocation."""
    found = with_ops(lambda ops: ops.list_tokens(tenant))
    if output is OutputFormat.json:
        emit_json([_doc(t) for t in found])
        return
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column in ("ID", "TENANT", "NAME", "ROLE", "CREATED", "EXPIRES", "REVOKED"):
        table.add_column(column, no_wrap=True)
    for t in found:
        d = _doc(t)
        table.add_row(
            d["id"], d["tenant"], d["name"], d["role"], d["created_at"], d["expires_at"] or "-", d["revoked_at"] or "-"
        )
    console.print(table)


@token.command("revoke")
@handle_errors
def revoke(
    ref: Annotated[str, typer.Argument(metavar="ID|NAME", help="the token's id, or its name in --tenant")],
    tenant: Tenant = "default",
    output: Output = OutputFormat.table,
) -> None:
    """Revoke a token (api processes stop accepting it within 5 s)."""
    revoked = with_ops(lambda ops: ops.revoke_token(ref, tenant, _actor()))
    if output is OutputFormat.json:
        emit_json(_doc(revoked))
        return
    console.print(f"revoked token {revoked.name!r} ({revoked.id}) of tenant {revoked.tenant}")


def audit(
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            "-t",
            metavar="TENANT",
            help="only this tenant's (default: all on the store, the token's over --server)",
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", metavar="N", min=1, max=10_000, help="entries, newest first")
    ] = 50,
    output: Output = OutputFormat.table,
) -> None:
    """The audit log: every write through the API and every token change (who, what, when,
    before/after version), newest first; over --server it takes an admin token."""
    entries = with_ops(lambda ops: ops.audit(tenant, limit))
    if output is OutputFormat.json:
        emit_json(
            [
                {
                    "id": e.id,
                    "at": format_instant(e.at),
                    "tenant": e.tenant,
                    "actor": e.actor,
                    "action": e.action,
                    "target": e.target,
                    "before_version": e.before_version,
                    "after_version": e.after_version,
                    "detail": dict(e.detail),
                }
                for e in entries
            ]
        )
        return
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column in ("AT", "TENANT", "WHO", "ACTION", "TARGET", "VERSION"):
        table.add_column(column, no_wrap=column != "TARGET")
    for e in entries:
        versions = f"{e.before_version or '-'} → {e.after_version or '-'}" if e.after_version else "-"
        table.add_row(format_instant(e.at), e.tenant, e.actor, e.action, e.target, versions)
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(token)
    app.command("audit")(handle_errors(audit))
