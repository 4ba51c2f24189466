"""``clockctl token`` and ``clockctl audit``: the HTTP API's bearer tokens and audit log,
straight in the store (local and admin use: run as a login that may write the store).

``token create`` prints the token once; only its sha256 is stored (``clockd.tokens``).
Roles: readonly, operator, admin (the tenant's audit log and tokens), cluster-admin
(every tenant). Token changes are recorded in the audit log as the local user.
"""

from __future__ import annotations

import getpass
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from clockctl.context import with_ops
from clockctl.output import OutputFormat, console, emit_json, handle_errors
from clockd import tokens
from clockd.core.durations import parse_duration
from clockd.core.instants import format_instant
from clockd.errors import NotFound
from clockd.services.ops import Ops
from clockd.store import ApiToken, AuditEntry

Output = Annotated[OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")]
Tenant = Annotated[str, typer.Option("--tenant", "-t", help="the tenant the token acts in")]

token = typer.Typer(
    name="token",
    help="Bearer tokens of the HTTP API (clockd --mode api): create, list, revoke.",
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
    role: Annotated[str, typer.Option("--role", help="readonly, operator, admin or cluster-admin")] = "readonly",
    name: Annotated[str | None, typer.Option("--name", help="shown in the audit log (default ROLE)")] = None,
    expires: Annotated[
        str | None, typer.Option("--expires", metavar="DURATION", help="e.g. 90d (default: never)")
    ] = None,
    output: Output = OutputFormat.table,
) -> None:
    """Create a token and print it ONCE (the store keeps only its hash)."""
    expires_in = parse_duration(expires) if expires else None
    issued = tokens.issue(tenant, role, name or role, datetime.now(UTC), expires_in)

    async def go(ops: Ops) -> None:
        entry = AuditEntry(
            issued.record.created_at, tenant, _actor(), "token.create", issued.record.name, detail={"role": role}
        )
        with ops.store.audited(lambda _: entry):  # the token and its audit entry commit together
            await ops.store.create_token(issued.record)

    with_ops(go, local=True)
    if output is OutputFormat.json:
        emit_json({"token": issued.secret, **_doc(issued.record)})
        return
    console.print(issued.secret, highlight=False, soft_wrap=True)
    console.print(
        f"# token {issued.record.name!r} ({role}) of tenant {tenant}, id {issued.record.id}: "
        "shown once, keep it now (Authorization: Bearer …)",
        highlight=False,
        style="dim",
    )


@token.command("list")
@handle_errors
def list_(
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="only this tenant's")] = None,
    output: Output = OutputFormat.table,
) -> None:
    """List tokens (never the tokens themselves): id, tenant, name, role, expiry, revocation."""
    found = with_ops(lambda ops: ops.store.list_tokens(tenant), local=True)
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

    async def go(ops: Ops) -> ApiToken:
        found = await ops.store.get_token(ref)
        owner = found.tenant if found is not None else tenant

        def describe(token: ApiToken | None) -> AuditEntry | None:
            if token is None:
                return None
            return AuditEntry(token.revoked_at or token.created_at, token.tenant, _actor(), "token.revoke", token.name)

        with ops.store.audited(describe):  # the revocation and its audit entry commit together
            revoked = await ops.store.revoke_token(owner, ref, datetime.now(UTC))
        if revoked is None:
            raise NotFound(f"no live token {ref!r} in tenant {tenant!r} (clockctl token list shows them)")
        return revoked

    revoked = with_ops(go, local=True)
    if output is OutputFormat.json:
        emit_json(_doc(revoked))
        return
    console.print(f"revoked token {revoked.name!r} ({revoked.id}) of tenant {revoked.tenant}")


def audit(
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="only this tenant's (default: all)")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=10_000, help="entries, newest first")] = 50,
    output: Output = OutputFormat.table,
) -> None:
    """The audit log: every write through the API (who, what, when, before/after version)."""
    entries = with_ops(lambda ops: ops.store.audit_page(tenant, None, limit), local=True)
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
