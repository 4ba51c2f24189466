"""Who is calling, and THE tenant check. Every route goes through this module.

* :func:`authenticate` turns ``Authorization: Bearer <token>`` into a
  :class:`Principal` (token id and name, tenant, role) or answers 401. It is a plain
  ``async (request) -> Principal`` function, so HTML routes (the dashboard at
  ``/ui``) use it as the JSON routes do. Verified tokens are cached for
  :data:`CACHE_SECONDS`: a revoked token stops working within that time.
* :func:`require` answers 403 when the role is too low.
* **The tenant check.** A principal acts only inside its own tenant
  (:attr:`Principal.tenant`); a ``cluster-admin`` may name another one with
  ``?tenant=``. Resources are fetched only through :func:`schedule_of`,
  :func:`occurrence_of` and :func:`tenant_of`; another tenant's schedule,
  occurrence or logs answer **404**, exactly like one that does not exist, so their
  existence is not revealed. List routes pass :func:`tenant_of`'s answer to the
  store, whose page queries filter on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request

from clockd import tokens
from clockd.api.problems import Problem
from clockd.core.model import Occurrence, Schedule
from clockd.errors import NotFound
from clockd.tokens import Role

if TYPE_CHECKING:
    from clockd.api.context import ApiContext

CACHE_SECONDS = 5.0
_FULL_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@dataclass(frozen=True, slots=True)
class Principal:
    token_id: str
    name: str  # the token's name: the "who" of the audit log
    tenant: str
    role: Role


def context(request: Request) -> ApiContext:
    api: ApiContext = request.app.state.api
    return api


async def principal_for(api: ApiContext, token: str) -> Principal | None:
    """The principal a token stands for, or None (not a clockd token, unknown, revoked or
    expired). Verified tokens are cached for :data:`CACHE_SECONDS`. The dashboard's
    sign-in cookie is checked through here too."""
    tid = tokens.token_id(token)
    if tid is None:
        return None
    now_mono = api.clock.monotonic()
    hit = api.token_cache.get(tokens.digest(token))
    if hit is not None and hit[1] > now_mono:
        return hit[0]
    stored = await api.store.get_token(tid)
    if stored is None or not tokens.verify(stored, token, api.clock.now()):
        return None
    principal = Principal(stored.id, stored.name, stored.tenant, Role(stored.role))
    if len(api.token_cache) > 10_000:
        api.token_cache.clear()
    api.token_cache[tokens.digest(token)] = (principal, now_mono + CACHE_SECONDS)
    return principal


async def authenticate(request: Request) -> Principal:
    """The caller, from its bearer token (401 otherwise). Cached on the request."""
    cached = getattr(request.state, "principal", None)
    if isinstance(cached, Principal):
        return cached
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _unauthorized("send Authorization: Bearer <token> (create one with clockctl token create)")
    principal = await principal_for(context(request), token)
    if principal is None:
        if tokens.token_id(token) is None:
            raise _unauthorized("the bearer token is not a clockd token")
        raise _unauthorized("the bearer token is unknown, revoked or expired")
    request.state.principal = principal
    return principal


def _unauthorized(detail: str) -> Problem:
    return Problem("unauthorized", detail, headers={"WWW-Authenticate": 'Bearer realm="clockd"'})


def require(principal: Principal, needed: Role) -> None:
    if not principal.role.allows(needed):
        raise Problem(
            "forbidden", f"this needs the {needed.value} role; the token {principal.name!r} is {principal.role}"
        )


def tenant_of(principal: Principal, request: Request) -> str:
    """The tenant a request acts in: the token's own; a cluster-admin may name another
    with ``?tenant=``. Anyone else naming another tenant gets 404 (not 403: nothing
    about other tenants is revealed)."""
    asked = request.query_params.get("tenant")
    if asked is None or asked == principal.tenant:
        return principal.tenant
    if principal.role is Role.CLUSTER_ADMIN:
        return asked
    raise Problem("not-found", f"no tenant {asked!r}")


async def schedule_of(request: Request, principal: Principal, name: str, *, deleted: bool = False) -> Schedule:
    """The live schedule ``name`` of the request's tenant, or 404. ``deleted``: else the
    one of that name deleted last (a read of its runs), before the 404."""
    tenant = tenant_of(principal, request)
    api = context(request)
    try:
        return await (api.ops.live_or_deleted(name, tenant) if deleted else api.ops.get(name, tenant))
    except NotFound:
        raise Problem("not-found", f"no schedule named {name!r}") from None


async def occurrence_of(request: Request, principal: Principal, occurrence_id: str) -> Occurrence:
    """The occurrence if its schedule is in the request's tenant, else 404 (the same answer
    as for an id that does not exist). Full ids only: a prefix could be ambiguous with
    another tenant's occurrence, and saying so would reveal it."""
    tenant = tenant_of(principal, request)
    store = context(request).store
    missing = Problem("not-found", f"no occurrence {occurrence_id!r}")
    if not _FULL_ID.match(occurrence_id):
        raise missing
    occurrence = await store.get_occurrence(occurrence_id)
    if occurrence is None:
        raise missing
    schedule = await store.get_schedule_by_id(occurrence.schedule_id)
    if schedule is None or schedule.definition.tenant != tenant:
        raise missing
    return occurrence
