"""The API's routes, declared once: the app serves them and the OpenAPI document
describes them from the same table (:data:`ENDPOINTS`), so none can be left out.

Each endpoint is ``async (request, principal) -> Response``; :func:`clockd.api.app.build_app`
wraps it with authentication (:mod:`clockd.api.auth`), the role check and the mapping
of errors to problem documents.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from clockd.api.auth import Principal
from clockd.tokens import Role

Handler = Callable[[Request, Principal], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    where: str = "query"  # query, path or header
    description: str = ""
    schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "string"})
    required: bool = False


@dataclass(frozen=True, slots=True)
class Endpoint:
    method: str
    path: str
    handler: Handler
    summary: str
    role: Role = Role.READONLY
    params: tuple[Param, ...] = ()
    body: str | None = None  # a components/schemas name
    ok: int = 200
    response: str | None = None  # a components/schemas name
    write: bool = False  # admitted per tenant (429) and audited


ENDPOINTS: list[Endpoint] = []


def endpoint(method: str, path: str, summary: str, **options: Any) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        ENDPOINTS.append(Endpoint(method, path, handler, summary, **options))
        return handler

    return register


def all_endpoints() -> list[Endpoint]:
    """Every endpoint (importing the route modules registers them)."""
    from clockd.api.routes import admin, occurrences, schedules  # noqa: F401  (registration)

    return ENDPOINTS
