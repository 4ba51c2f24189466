"""Everything else under ``/v1``: preview, apply, dead letters, reconcile, status, audit,
tokens and tenants."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from clockd import __version__, tokens
from clockd.api import cursors
from clockd.api.auth import Principal, context, occurrence_of, schedule_of, tenant_of
from clockd.api.body import read_json
from clockd.api.problems import FieldError, Problem
from clockd.api.routes import Param, endpoint
from clockd.api.routes.common import answer, query_bool, query_instant, query_int
from clockd.api.views import audit_view, definition_from_body, next_runs, occurrence_view, page, replanned_view
from clockd.core.durations import parse_duration
from clockd.core.instants import parse_instant
from clockd.core.model import ScheduleDef
from clockd.core.zones import tzdata_version
from clockd.errors import InvalidInput
from clockd.services.ops import PlanAction
from clockd.services.reconcile import run_reconcile
from clockd.tokens import Role

_OCC = Param("id", "path", "the occurrence's full id", required=True)


@endpoint(
    "POST",
    "/v1/preview",
    "The next runs of a schedule, with DST notes, without saving anything",
    body="PreviewRequest",
    response="Preview",
)
async def preview(request: Request, who: Principal) -> Response:
    api = context(request)
    data = await read_json(request, api.limits)
    if not isinstance(data, dict):
        raise Problem("invalid-input", 'give {"schedule": "0 10 * * 5", "tz": "Europe/Paris"} (or at / every)')
    data = dict(data)
    count = data.pop("count", 10)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 1000:
        raise Problem("invalid-input", "count: give 1 to 1000", [FieldError("/count", "an integer from 1 to 1000")])
    now = api.clock.now()
    after = now
    if "after" in data:
        text = data.pop("after")
        try:
            after = _instant(text, str(data.get("tz", "UTC")), now)
        except InvalidInput as exc:
            raise Problem("invalid-input", f"after: {exc.message}", [FieldError("/after", exc.message)]) from None
    job = {"name": "preview", "noop": True, **data}
    definition = definition_from_body(job, tenant_of(who, request))
    return answer({"runs": next_runs(definition, after, after, count)})


def _instant(text: Any, tz: str, now: datetime) -> datetime:
    if not isinstance(text, str):
        raise InvalidInput("give an ISO 8601 instant, e.g. 2026-03-29T00:30:00Z")
    return parse_instant(text, tz, now)


@endpoint(
    "POST",
    "/v1/apply",
    "Make the tenant's apply-managed schedules what a schedule-file document says "
    "(?dry_run=true: only the plan; ?prune=true: delete those it no longer names)",
    role=Role.OPERATOR,
    params=(Param("dry_run", schema={"type": "boolean"}), Param("prune", schema={"type": "boolean"})),
    body="ScheduleFile",
    response="ApplyResult",
    write=True,
)
async def apply(request: Request, who: Principal) -> Response:
    api = context(request)
    tenant = tenant_of(who, request)
    dry_run, prune = query_bool(request, "dry_run"), query_bool(request, "prune")
    if not dry_run:
        api.admit_write(tenant)
    data = await read_json(request, api.limits)
    if not isinstance(data, dict) or not isinstance(data.get("jobs", []), list):
        raise Problem("invalid-input", 'give a schedule-file document: {"jobs": [ … ]}')
    unknown = [k for k in data if k != "jobs" and not k.startswith("x-")]
    if unknown:
        raise Problem(
            "invalid-input",
            f"unknown top-level key {unknown[0]!r} (valid: jobs, x-…)",
            [FieldError(f"/{k}", "unknown") for k in unknown],
        )
    definitions: list[ScheduleDef] = []
    errors: list[FieldError] = []
    for index, job in enumerate(data.get("jobs", [])):
        try:
            definitions.append(definition_from_body(job, tenant, f"/jobs/{index}"))
        except Problem as problem:
            errors.extend(problem.errors or [FieldError(f"/jobs/{index}", problem.detail)])
    if errors:
        raise Problem("invalid-input", f"{len(errors)} problem(s) in the document; nothing was applied", errors)
    plan = await api.ops.plan_apply(definitions, tenant, prune=prune)
    if plan.problems:
        slug = "conflict" if any(p.exit_code == 1 for p in plan.problems) else "invalid-input"
        raise Problem(
            slug,
            f"{plan.problems[0].message} ({len(plan.problems)} problem(s); nothing was applied)",
            [FieldError(f"/jobs/{p.index}", p.message) for p in plan.problems],
        )
    doc: dict[str, Any] = {
        "dry_run": dry_run,
        "create": [i.name for i in plan.items if i.action is PlanAction.CREATE],
        "update": [i.name for i in plan.items if i.action is PlanAction.UPDATE],
        "delete": [i.name for i in plan.items if i.action is PlanAction.DELETE],
        "unchanged": plan.count(PlanAction.UNCHANGED),
        "not_listed": plan.not_listed,
    }
    if not dry_run and plan.changes:
        counts = {"created": len(doc["create"]), "updated": len(doc["update"]), "deleted": len(doc["delete"])}
        with api.store.audited(lambda _: api.entry(who, tenant, "apply", "-", **counts)):
            result = await api.ops.apply_plan(plan)
        doc["canceled"] = result.canceled
        names = {s.id: s.name for s in result.updated}
        doc["replanned"] = [{"schedule": names.get(r.schedule_id), **replanned_view(r)} for r in result.replanned]
    return answer(doc)


@endpoint(
    "GET",
    "/v1/dlq",
    "The dead-letter queue: DEAD occurrences, most recently dead first",
    params=(
        Param("schedule"),
        Param("limit", schema={"type": "integer", "minimum": 1, "maximum": 1000, "default": 50}),
        Param("cursor", description="next_cursor of the previous page"),
    ),
    response="OccurrenceList",
)
async def dlq(request: Request, who: Principal) -> Response:
    api = context(request)
    limit = query_int(request, "limit", 50, 1, api.limits.max_page)
    before = cursors.decode_at_and_id(request.query_params.get("cursor"))
    name = request.query_params.get("schedule")
    tenant = tenant_of(who, request)
    # The schedule looked up once (schedule_of's 404), then its dead letters by id.
    schedule_id = (await schedule_of(request, who, name)).id if name else None
    dead = await api.store.list_dead(schedule_id, None if schedule_id else tenant, limit + 1, before)
    next_cursor = None
    if len(dead) > limit:
        dead = dead[:limit]
        # A DEAD occurrence's finished_at is when it died: the list's order (dead_at, id).
        died = dead[-1].finished_at
        next_cursor = cursors.at_and_id(died, dead[-1].id) if died is not None else None
    return answer(page([occurrence_view(o) for o in dead], next_cursor))


@endpoint(
    "POST",
    "/v1/dlq/{id}/replay",
    "Put a DEAD occurrence back into the queue now (same id, next attempt number)",
    role=Role.OPERATOR,
    params=(_OCC,),
    response="Occurrence",
    write=True,
)
async def replay(request: Request, who: Principal) -> Response:
    api = context(request)
    tenant = tenant_of(who, request)
    api.admit_write(tenant)
    occurrence = await occurrence_of(request, who, request.path_params["id"])
    with api.store.audited(lambda _: api.entry(who, tenant, "dlq.replay", occurrence.id, *[occurrence.version] * 2)):
        replayed = await api.ops.replay(occurrence.id)
    return answer(occurrence_view(replayed))


@endpoint(
    "DELETE",
    "/v1/dlq/{id}",
    "Drop a DEAD occurrence from the dead-letter queue (CANCELED; its history kept)",
    role=Role.OPERATOR,
    params=(_OCC,),
    response="Occurrence",
    write=True,
)
async def drop(request: Request, who: Principal) -> Response:
    api = context(request)
    tenant = tenant_of(who, request)
    api.admit_write(tenant)
    occurrence = await occurrence_of(request, who, request.path_params["id"])
    with api.store.audited(lambda _: api.entry(who, tenant, "dlq.drop", occurrence.id, *[occurrence.version] * 2)):
        dropped = await api.ops.drop(occurrence.id)
    return answer(occurrence_view(dropped))


@endpoint(
    "GET",
    "/v1/reconcile",
    "Is every instant a schedule expected in [from, to] accounted for exactly once? "
    "(schedule=NAME: that one; else the tenant's schedules — a cluster-admin's: every tenant's, or tenant=)",
    params=(
        Param("from"),
        Param("to"),
        Param("schedule"),
        Param(
            "all",
            description="true: entries lists every instant looked at (clockctl reconcile --all); else the problems",
            schema={"type": "boolean", "default": False},
        ),
    ),
    response="Reconcile",
)
async def reconcile(request: Request, who: Principal) -> Response:
    api = context(request)
    now = api.clock.now()
    start = query_instant(request, "from", now) or now - timedelta(hours=1)
    end = query_instant(request, "to", now) or now
    if end < start:
        raise Problem("invalid-input", "to: must not be before from")
    name = request.query_params.get("schedule")
    schedule_id = None
    tenant: str | None = None
    if name:
        schedule_id = (await schedule_of(request, who, name)).id
    elif who.role is not Role.CLUSTER_ADMIN or "tenant" in request.query_params:
        # The tenant's schedules (it was a 422 "name the schedule" for any token but a
        # cluster-admin's): every tenant's stay a cluster-admin's.
        tenant = tenant_of(who, request)
    report = await run_reconcile(
        api.store, start, end, schedule_id, tenant=tenant, keep_accounted=query_bool(request, "all")
    )
    return answer(
        {
            "from": start,
            "to": end,
            "schedules": report.schedules,
            "expected": report.expected,
            "counts": {str(k): v for k, v in report.counts.items()},
            "ok": report.ok,
            "problems": [
                {"schedule": e.schedule, "instant": e.instant, "status": str(e.status), "detail": e.detail}
                for e in report.problems
            ],
            "entries": report.entries,  # each instant with its occurrences (clockctl reconcile over --server)
        }
    )


@endpoint(
    "GET",
    "/v1/status",
    "The tenant's schedules, limits and use; versions",
    params=(
        Param(
            "cluster",
            description="true (cluster-admin): also the cluster's status as clockctl status -o json prints it",
            schema={"type": "boolean", "default": False},
        ),
    ),
    response="Status",
)
async def status(request: Request, who: Principal) -> Response:
    api = context(request)
    tenant = tenant_of(who, request)
    usage = next((u for u in await api.store.tenant_usage() if u.limits.tenant == tenant), None)
    doc: dict[str, Any] = {
        "version": __version__,
        "tzdata": tzdata_version(),
        "tenant": tenant,
        "schedules": usage.schedules if usage else 0,
        "running": usage.running if usage else 0,
        "limits": usage.limits if usage else None,
    }
    if who.role is Role.CLUSTER_ADMIN:
        doc["backlog"] = await api.store.backlog(api.clock.now())
        doc["queues"] = await api.store.queue_stats(api.clock.now())
    if query_bool(request, "cluster"):
        if who.role is not Role.CLUSTER_ADMIN:
            raise Problem("forbidden", "the cluster's status (?cluster=true) needs a cluster-admin token")
        if api.cluster_status is not None:
            doc["cluster"] = await api.cluster_status()
    return answer(doc)


@endpoint(
    "GET",
    "/v1/audit",
    "The tenant's audit log (every write: who, what, when, versions), newest first",
    role=Role.ADMIN,
    params=(Param("limit", schema={"type": "integer", "minimum": 1, "maximum": 1000}), Param("cursor")),
    response="AuditPage",
)
async def audit(request: Request, who: Principal) -> Response:
    api = context(request)
    limit = query_int(request, "limit", 100, 1, api.limits.max_page)
    cursor = cursors.decode(request.query_params.get("cursor"), "b")
    before = int(cursor["b"]) if cursor else None
    rows = await api.store.audit_page(tenant_of(who, request), before, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return answer(page([audit_view(e) for e in rows], cursors.encode(b=rows[-1].id) if more else None))


# -- tokens and tenants ----------------------------------------------------------------------


@endpoint(
    "POST",
    "/v1/tokens",
    "Create a token of the tenant (printed once: only its hash is kept). An admin gives roles up "
    "to admin in its own tenant; a cluster-admin any role in any tenant",
    role=Role.ADMIN,
    body="TokenRequest",
    ok=201,
    response="Token",
    write=True,
)
async def create_token(request: Request, who: Principal) -> Response:
    api = context(request)
    data = await read_json(request, api.limits)
    if not isinstance(data, dict) or set(data) - {"tenant", "role", "name", "expires"}:
        raise Problem("invalid-input", 'give {"role": "operator", "name": "ci", "expires": "90d"} (tenant optional)')
    tenant = str(data.get("tenant") or who.tenant)
    if tenant != who.tenant and who.role is not Role.CLUSTER_ADMIN:
        raise Problem("not-found", f"no tenant {tenant!r}")
    role = str(data.get("role", "readonly"))
    if role == Role.CLUSTER_ADMIN and who.role is not Role.CLUSTER_ADMIN:
        raise Problem("forbidden", "only a cluster-admin token can create cluster-admin tokens")
    api.admit_write(tenant)
    try:
        expires = parse_duration(str(data["expires"])) if data.get("expires") else None
    except InvalidInput as exc:
        # Its own field: the duration's message starts with "duration 'soon'", which the
        # pointer was made of ("/duration 'soon'").
        raise Problem("invalid-input", f"expires: {exc.message}", [FieldError("/expires", exc.message)]) from None
    try:
        issued = tokens.issue(tenant, role, str(data.get("name", "")), api.clock.now(), expires)
    except InvalidInput as exc:
        field = exc.message.split(":", 1)[0]
        raise Problem("invalid-input", exc.message, [FieldError(f"/{field}", exc.message)]) from None
    with api.store.audited(lambda _: api.entry(who, tenant, "token.create", issued.record.name, role=role)):
        await api.store.create_token(issued.record)
    return answer({"token": issued.secret, **_token_view(issued.record)}, 201)


def _token_view(token: Any) -> dict[str, Any]:
    return {
        "id": token.id,
        "tenant": token.tenant,
        "name": token.name,
        "role": token.role,
        "created_at": token.created_at,
        "expires_at": token.expires_at,
        "revoked_at": token.revoked_at,
    }


@endpoint("GET", "/v1/tokens", "The tenant's tokens (never the tokens themselves)", role=Role.ADMIN)
async def list_tokens(request: Request, who: Principal) -> Response:
    api = context(request)
    return answer({"items": [_token_view(t) for t in await api.store.list_tokens(tenant_of(who, request))]})


@endpoint(
    "DELETE",
    "/v1/tokens/{ref}",
    "Revoke a token of the tenant, by id or name",
    role=Role.ADMIN,
    params=(Param("ref", "path", "token id or name", required=True),),
    response="Token",
    write=True,
)
async def revoke_token(request: Request, who: Principal) -> Response:
    api = context(request)
    tenant = tenant_of(who, request)
    with api.store.audited(lambda token: token and api.entry(who, tenant, "token.revoke", token.name)):
        revoked = await api.store.revoke_token(tenant, request.path_params["ref"], api.clock.now())
    if revoked is None:
        raise Problem("not-found", f"no live token {request.path_params['ref']!r}")
    api.token_cache.clear()  # this process forgets it at once; others within auth.CACHE_SECONDS
    return answer(_token_view(revoked))


@endpoint("GET", "/v1/tenants", "Every tenant with its limits and use (cluster-admin)", role=Role.CLUSTER_ADMIN)
async def tenants(request: Request, who: Principal) -> Response:
    return answer({"items": await context(request).store.tenant_usage()})


@endpoint(
    "PATCH",
    "/v1/tenants/{tenant}",
    "Change a tenant's limits (cluster-admin); null removes a limit",
    role=Role.CLUSTER_ADMIN,
    params=(Param("tenant", "path", required=True),),
    body="TenantLimits",
    write=True,
)
async def set_tenant(request: Request, who: Principal) -> Response:
    api = context(request)
    data = await read_json(request, api.limits)
    if not isinstance(data, dict):
        raise Problem("invalid-input", 'give {"max_schedules": 1000, …} (null removes a limit)')
    tenant = request.path_params["tenant"]
    for key, value in data.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise Problem("invalid-input", f"{key}: give a whole number or null", [FieldError(f"/{key}", "integer")])
    with api.store.audited(lambda _: api.entry(who, tenant, "tenant.limits", tenant, **data)):
        limits = await api.ops.set_tenant(tenant, **data)
    return answer(limits)
