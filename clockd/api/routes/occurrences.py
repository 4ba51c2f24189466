"""``/v1/occurrences``: the tenant's runs newest first (keyset pages), one run with its
attempts, an attempt's output."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from clockd.api import cursors
from clockd.api.auth import Principal, context, occurrence_of, schedule_of, tenant_of
from clockd.api.problems import Problem
from clockd.api.routes import Param, endpoint
from clockd.api.routes.common import answer, query_instant, query_int
from clockd.api.views import attempt_view, occurrence_view, page
from clockd.core.model import OccurrenceState
from clockd.store import OccurrencePage

_ID = Param("id", "path", "the occurrence's full id", required=True)
_STATES = [s.value for s in OccurrenceState]


@endpoint(
    "GET",
    "/v1/occurrences",
    "The tenant's occurrences, newest scheduled_for first, a keyset page at a time",
    params=(
        Param(
            "schedule",
            description="only this schedule's (by name; a name no live schedule has: the one deleted last)",
        ),
        Param("state", schema={"type": "string", "enum": _STATES}),
        Param("since", description="scheduled at or after (ISO instant, or now-1d)"),
        Param("until", description="scheduled before"),
        Param("limit", schema={"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}),
        Param("cursor", description="next_cursor of the previous page"),
    ),
    response="OccurrencePage",
)
async def list_(request: Request, who: Principal) -> Response:
    api = context(request)
    now = api.clock.now()
    limit = query_int(request, "limit", 100, 1, api.limits.max_page)
    before = cursors.decode_at_and_id(request.query_params.get("cursor"))
    state_text = request.query_params.get("state")
    if state_text is not None and state_text not in _STATES:
        raise Problem("invalid-input", f"state: give one of {', '.join(_STATES)}, not {state_text!r}")
    name = request.query_params.get("schedule")
    schedule_id = (await schedule_of(request, who, name, deleted=True)).id if name else None
    query = OccurrencePage(
        before=before,
        limit=limit + 1,
        schedule_id=schedule_id,
        state=OccurrenceState(state_text) if state_text else None,
        since=query_instant(request, "since", now),
        until=query_instant(request, "until", now),
    )
    rows = await api.store.occurrences_page(tenant_of(who, request), query)
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if rows else None
    next_cursor = cursors.at_and_id(last.scheduled_for, last.id) if more and last else None
    return answer(page([occurrence_view(o) for o in rows], next_cursor))


@endpoint("GET", "/v1/occurrences/{id}", "One occurrence with its attempts", params=(_ID,), response="Occurrence")
async def get(request: Request, who: Principal) -> Response:
    api = context(request)
    occurrence = await occurrence_of(request, who, request.path_params["id"])
    attempts = await api.store.list_attempts(occurrence.id)
    doc = occurrence_view(occurrence)
    doc["attempt_list"] = [attempt_view(a) for a in attempts]
    return answer(doc)


@endpoint(
    "GET",
    "/v1/occurrences/{id}/logs",
    "The output tail of an attempt (?attempt=N; default the last)",
    params=(_ID, Param("attempt", schema={"type": "integer", "minimum": 1})),
    response="Logs",
)
async def logs(request: Request, who: Principal) -> Response:
    api = context(request)
    occurrence = await occurrence_of(request, who, request.path_params["id"])
    number = query_int(request, "attempt", 0, 0, 1_000_000) or None
    _, attempt = await api.ops.attempt(occurrence.id, number)
    return answer({"occurrence": occurrence.id, **attempt_view(attempt, output=True)})
