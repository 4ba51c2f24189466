"""``/v1/schedules``: create (idempotent), list (keyset pages), get, replace, merge-patch,
delete, pause, resume, run-now, explain. Writes go through :class:`clockd.services.ops.Ops`, the
use cases ``clockctl`` runs, so both front ends keep the same rules."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from clockd.api import cursors
from clockd.api.auth import Principal, context, schedule_of, tenant_of
from clockd.api.body import read_json
from clockd.api.problems import FieldError, Problem
from clockd.api.routes import Param, endpoint
from clockd.api.routes.common import answer, if_match, query_bool, query_int
from clockd.api.views import (
    definition_from_body,
    etag,
    occurrence_view,
    page,
    replanned_view,
    schedule_view,
    summary_view,
)
from clockd.core.model import Schedule, ScheduleState
from clockd.errors import Conflict, VersionMismatch
from clockd.formats.schedfile import job_document
from clockd.services.explain import explain_at
from clockd.services.ops import ResumeFrom
from clockd.store import OccurrencePage, SchedulePage
from clockd.tokens import Role

RECENT = 10
_NAME = Param("name", "path", "the schedule's name", required=True)
_IF_MATCH = Param("If-Match", "header", 'the version the change applies to, as the ETag gives it ("3"): else 412')


def _one(request: Request, schedule: Schedule, status: int = 200, **extra: Any) -> Response:
    doc = schedule_view(schedule, context(request).clock.now())
    doc.update(extra)
    headers = {"ETag": etag(schedule), "Location": f"/v1/schedules/{quote(schedule.name, safe='')}"}
    return answer(doc, status, headers)


@endpoint(
    "POST",
    "/v1/schedules",
    "Create a schedule (one job of the schedule-file format); the same Idempotency-Key and body "
    "return the schedule that key created, as it is now (201), the same key with another body is 422; "
    "a key names one live schedule (once deleted, the key creates a new one)",
    role=Role.OPERATOR,
    params=(Param("Idempotency-Key", "header", "1-200 characters, unique per tenant"),),
    body="Job",
    ok=201,
    response="Schedule",
    write=True,
)
async def create(request: Request, who: Principal) -> Response:
    api = context(request)
    tenant = tenant_of(who, request)
    api.admit_write(tenant)
    definition = definition_from_body(await read_json(request, api.limits), tenant)
    # The audit entry commits with the schedule (and its idempotency key); a replay writes nothing.
    with api.audited(who, tenant, "schedule.create", definition.name):
        added = await api.ops.create(definition, request.headers.get("idempotency-key"))
    response = _one(request, added.schedule, 201)
    if added.existed:  # the key's schedule, as it is now; the header says so (clockctl --server prints it)
        response.headers["Idempotent-Replayed"] = "true"
    return response


@endpoint(
    "GET",
    "/v1/schedules",
    "List the tenant's schedules by name, a keyset page at a time",
    params=(
        Param("limit", schema={"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}),
        Param("cursor", description="next_cursor of the previous page"),
        Param("state", schema={"type": "string", "enum": ["active", "paused"]}),
        Param("label", description="KEY=VALUE: only schedules with that label"),
        Param("name_prefix"),
        Param(
            "summary",
            description="true: each item carries its summary (next start, last run and result), as clockctl list",
            schema={"type": "boolean", "default": False},
        ),
    ),
    response="SchedulePage",
)
async def list_(request: Request, who: Principal) -> Response:
    api = context(request)
    limit = query_int(request, "limit", 100, 1, api.limits.max_page)
    cursor = cursors.decode(request.query_params.get("cursor"), "n")
    state_text = request.query_params.get("state")
    if state_text not in (None, "active", "paused"):
        raise Problem("invalid-input", f"state: give active or paused, not {state_text!r}")
    label_text = request.query_params.get("label")
    label = None
    if label_text is not None:
        key, sep, value = label_text.partition("=")
        if not sep or not key:
            raise Problem("invalid-input", f"label: give KEY=VALUE, not {label_text!r}")
        label = (key, value)
    query = SchedulePage(
        after=str(cursor["n"]) if cursor else "",
        limit=limit + 1,
        state=ScheduleState(state_text) if state_text else None,
        name_prefix=request.query_params.get("name_prefix") or None,
        label=label,
    )
    rows = await api.store.schedules_page(tenant_of(who, request), query)
    more = len(rows) > limit
    rows = rows[:limit]
    now = api.clock.now()
    items = [schedule_view(s, now, runs=False) for s in rows]
    if query_bool(request, "summary") and rows:  # one statement for the page (Store.run_summaries)
        found = await api.store.run_summaries([s.id for s in rows])
        for item, s in zip(items, rows, strict=True):
            item["summary"] = summary_view(found.get(s.id))
    return answer(page(items, cursors.encode(n=rows[-1].name) if more else None))


@endpoint(
    "GET",
    "/v1/schedules/{name}",
    "A schedule: its definition, next runs (with DST notes) and recent occurrences",
    params=(_NAME,),
    response="Schedule",
)
async def get(request: Request, who: Principal) -> Response:
    api = context(request)
    schedule = await schedule_of(request, who, request.path_params["name"])
    recent = await api.store.occurrences_page(
        schedule.definition.tenant, OccurrencePage(limit=RECENT, schedule_id=schedule.id)
    )
    summary = (await api.store.run_summaries([schedule.id])).get(schedule.id)
    return _one(request, schedule, recent=[occurrence_view(o) for o in recent], summary=summary_view(summary))


async def _replace(request: Request, who: Principal, schedule: Schedule, data: Any, expected: int) -> Response:
    api = context(request)
    name = request.path_params["name"]
    if isinstance(data, dict):
        data = {"name": name, **data}
        if data["name"] != name:
            raise Problem(
                "invalid-input",
                "name: a schedule keeps its name; create one with the new name and delete this one",
                [FieldError("/name", "must be the name in the path")],
            )
    definition = definition_from_body(data, schedule.definition.tenant)
    try:
        with api.audited(who, schedule.definition.tenant, "schedule.update", name, schedule.version):
            change = await api.ops.update(name, definition, schedule.definition.tenant, expected_version=expected)
    except VersionMismatch:
        raise
    except Conflict as exc:  # the store's conditional write lost a race with another change
        raise VersionMismatch(exc.message) from None
    return _one(
        request,
        change.schedule,
        canceled=change.canceled,
        still_running=[o.id for o in change.running],
        replanned=[replanned_view(r) for r in change.replanned],
    )


@endpoint(
    "PUT",
    "/v1/schedules/{name}",
    "Replace a schedule's definition (a new version; If-Match: 412 when the version moved)",
    role=Role.OPERATOR,
    params=(_NAME, _IF_MATCH),
    body="Job",
    response="Schedule",
    write=True,
)
async def replace(request: Request, who: Principal) -> Response:
    api = context(request)
    api.admit_write(tenant_of(who, request))
    data = await read_json(request, api.limits)
    schedule = await schedule_of(request, who, request.path_params["name"])
    expected = if_match(request)
    return await _replace(request, who, schedule, data, schedule.version if expected is None else expected)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: null removes a member, objects merge, the rest replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@endpoint(
    "PATCH",
    "/v1/schedules/{name}",
    "Change some fields (RFC 7386 JSON merge patch over the job document; If-Match as PUT)",
    role=Role.OPERATOR,
    params=(_NAME, _IF_MATCH),
    body="Job",
    response="Schedule",
    write=True,
)
async def patch(request: Request, who: Principal) -> Response:
    api = context(request)
    api.admit_write(tenant_of(who, request))
    data = await read_json(request, api.limits)
    if not isinstance(data, dict):
        raise Problem("invalid-input", "a merge patch is a JSON object of the fields to change (null removes one)")
    schedule = await schedule_of(request, who, request.path_params["name"])
    expected = if_match(request)
    merged = merge_patch(job_document(schedule.definition), data)
    # The patch applies to the version it was merged with, even without If-Match.
    return await _replace(request, who, schedule, merged, schedule.version if expected is None else expected)


def _check_version(request: Request, schedule: Schedule) -> None:
    expected = if_match(request)
    if expected is not None and expected != schedule.version:
        raise Problem(
            "precondition-failed",
            f"schedule {schedule.name!r} is at version {schedule.version}, not {expected}: "
            "read it again and retry with its current version",
        )


@endpoint(
    "DELETE",
    "/v1/schedules/{name}",
    "Delete a schedule (its unclaimed occurrences are canceled)",
    role=Role.OPERATOR,
    params=(_NAME, _IF_MATCH),
    ok=204,
    write=True,
)
async def delete(request: Request, who: Principal) -> Response:
    api = context(request)
    api.admit_write(tenant_of(who, request))
    schedule = await schedule_of(request, who, request.path_params["name"])
    _check_version(request, schedule)
    with api.audited(who, schedule.definition.tenant, "schedule.delete", schedule.name, schedule.version):
        await api.ops.remove(schedule.name, schedule.definition.tenant)
    return Response(status_code=204)


@endpoint(
    "POST",
    "/v1/schedules/{name}/pause",
    'Pause a schedule; {"reason": "…"} is kept with the version and in the audit log',
    role=Role.OPERATOR,
    params=(_NAME, _IF_MATCH),
    body="PauseRequest",
    response="Schedule",
    write=True,
)
async def pause(request: Request, who: Principal) -> Response:
    api = context(request)
    api.admit_write(tenant_of(who, request))
    data = await read_json(request, api.limits, optional=True) or {}
    reason = data.get("reason") if isinstance(data, dict) else None
    if not isinstance(data, dict) or set(data) - {"reason"} or not isinstance(reason, (str, type(None))):
        raise Problem("invalid-input", 'give {"reason": "why"} (or no body)', [FieldError("/reason", "a string")])
    schedule = await schedule_of(request, who, request.path_params["name"])
    _check_version(request, schedule)
    tenant = schedule.definition.tenant
    with api.audited(who, tenant, "schedule.pause", schedule.name, schedule.version, reason=reason):
        change = await api.ops.pause(schedule.name, tenant, reason)
    # An unchanged pause stored no reason: echoing the new one read as if it had.
    said = None if change.unchanged else reason
    return _one(request, change.schedule, canceled=change.canceled, reason=said, unchanged=change.unchanged)


@endpoint(
    "POST",
    "/v1/schedules/{name}/resume",
    'Resume a paused schedule; {"from": "now"} (default) or {"from": "paused-at"} (plan the pause '
    "through the misfire policy)",
    role=Role.OPERATOR,
    params=(_NAME, _IF_MATCH),
    body="ResumeRequest",
    response="Schedule",
    write=True,
)
async def resume(request: Request, who: Principal) -> Response:
    api = context(request)
    api.admit_write(tenant_of(who, request))
    data = await read_json(request, api.limits, optional=True) or {}
    start = data.get("from", "now") if isinstance(data, dict) else None
    if not isinstance(data, dict) or set(data) - {"from"} or start not in ("now", "paused-at"):
        raise Problem("invalid-input", 'from: give "now" or "paused-at"', [FieldError("/from", "now or paused-at")])
    schedule = await schedule_of(request, who, request.path_params["name"])
    _check_version(request, schedule)
    tenant = schedule.definition.tenant
    with api.audited(who, tenant, "schedule.resume", schedule.name, schedule.version, **{"from": start}):
        change = await api.ops.resume(schedule.name, tenant, ResumeFrom(start))
    return _one(request, change.schedule, unchanged=change.unchanged)


@endpoint(
    "POST",
    "/v1/schedules/{name}/run-now",
    "Run the schedule once now (an extra occurrence with its own id)",
    role=Role.OPERATOR,
    params=(_NAME,),
    ok=202,
    response="Occurrence",
    write=True,
)
async def run_now(request: Request, who: Principal) -> Response:
    api = context(request)
    api.admit_write(tenant_of(who, request))
    schedule = await schedule_of(request, who, request.path_params["name"])
    tenant = schedule.definition.tenant
    with api.store.audited(lambda occ: api.entry(who, tenant, "schedule.run_now", schedule.name, occurrence=occ.id)):
        occurrence = await api.ops.run_now(schedule.name, tenant)
    return answer(occurrence_view(occurrence), 202, {"Location": f"/v1/occurrences/{occurrence.id}"})


@endpoint(
    "GET",
    "/v1/schedules/{name}/versions",
    "Every version of the schedule's definition, oldest first (valid_from, valid_to, job, state)",
    params=(_NAME,),
    response="VersionList",
)
async def versions(request: Request, who: Principal) -> Response:
    api = context(request)
    schedule = await schedule_of(request, who, request.path_params["name"])
    rows = await api.store.schedule_versions(schedule.id)
    items = [
        {"version": v, "valid_from": start, "valid_to": end, "job": job_document(d), "state": state.value}
        for v, start, end, d, state in rows
    ]
    return answer({"items": items})


@endpoint(
    "GET",
    "/v1/schedules/{name}/explain",
    "Why the schedule did or did not run at an instant (?at=ISO instant, local time, or now-1h)",
    params=(_NAME, Param("at", required=True)),
    response="Explanation",
)
async def explain(request: Request, who: Principal) -> Response:
    api = context(request)
    schedule = await schedule_of(request, who, request.path_params["name"])
    at = request.query_params.get("at")
    if not at:
        raise Problem("invalid-input", "at: give the instant to explain, e.g. ?at=2026-03-29T02:30 or ?at=now-1h")
    explanation = await explain_at(api.store, schedule, at, api.clock.now())
    return answer(explanation)
