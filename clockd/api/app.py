"""The Starlette application: the route table, authentication, errors as problems.

Every endpoint in :data:`clockd.api.routes.ENDPOINTS` is wrapped the same way:
authenticate (:func:`clockd.api.auth.authenticate`), check the role, run, and turn any
error into an RFC 9457 problem (:mod:`clockd.api.problems`). An unexpected exception
is logged and answered 500 without its text; bad input never gets there.

Routes without path parameters (``POST /v1/schedules``, ``GET /v1/schedules``…) are
dispatched straight from a ``(method, path)`` table (:class:`_Api`), past Starlette's
error middlewares and its router, which tries every route's regex in turn: ~10 % of a
create's CPU on the event loop (``bench/api.py``). Invariant: the table holds a route only
when Starlette's router would pick that same route for that method and path, so the
answers are the same; everything else (path parameters, 404, 405, HEAD, /ui) goes
through Starlette.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import Receive, Scope, Send

from clockd.api import openapi
from clockd.api.auth import authenticate, require
from clockd.api.context import ApiContext
from clockd.api.problems import Problem, from_error
from clockd.api.routes import Endpoint, all_endpoints
from clockd.api.routes.common import answer
from clockd.errors import ClockdError

log = logging.getLogger(__name__)


def _wrap(ep: Endpoint) -> Any:
    # The query parameters the endpoint declares (its OpenAPI parameters), and `tenant`,
    # which every endpoint takes (a cluster-admin naming the tenant it acts in:
    # clockd.api.auth.tenant_of). Any other is a typo the client would otherwise never
    # hear of (`?limt=5` listed 100): 422.
    accepted = frozenset(p.name for p in ep.params if p.where == "query") | {"tenant"}
    takes = ", ".join(sorted(accepted))

    async def run(request: Request) -> Response:
        try:
            who = await authenticate(request)
            require(who, ep.role)
            unknown = sorted(set(request.query_params) - accepted)
            if unknown:
                raise Problem(
                    "invalid-input",
                    f"{unknown[0]}: not a query parameter of {ep.method} {ep.path} (it takes {takes})",
                )
            return await ep.handler(request, who)
        except Problem as problem:
            return problem.response(request.url.path)
        except ClockdError as exc:
            return from_error(exc).response(request.url.path)
        except Exception:
            log.exception("api: %s %s failed", request.method, request.url.path, extra={"action": "api_internal_error"})
            return Problem("internal", "internal error; the api log has the details").response(request.url.path)

    run.__name__ = ep.handler.__name__
    return run


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        # RFC 9110 §15.5.6: a 405 names the methods the resource has. Each endpoint is a
        # route of its own method, and Starlette's exception lists only the first route
        # whose path matched, so the methods are gathered from every route here.
        allow = ", ".join(_methods_at(request.app.routes, request.url.path))
        detail = f"{request.method} is not allowed on {request.url.path} (allowed: {allow})"
        return Problem("method-not-allowed", detail, headers={"Allow": allow}).response()
    return Problem("not-found", f"no route {request.url.path} (GET /v1/openapi.json lists them)").response()


def _methods_at(routes: Sequence[BaseRoute], path: str) -> list[str]:
    """The methods the routes answer at ``path`` (HEAD with GET, as Starlette serves it),
    the dashboard's under its mount included."""
    methods: set[str] = set()
    for route in routes:
        if isinstance(route, Route) and route.methods and route.path_regex.match(path):
            methods |= route.methods
        elif isinstance(route, Mount) and path.startswith(route.path + "/"):
            methods.update(_methods_at(route.routes, path[len(route.path) :]))
    return sorted(methods)


Direct = Callable[[Request], Awaitable[Response]]


class _Api(Starlette):
    """Starlette with a table of the routes that need no matching (see the module doc)."""

    direct: dict[tuple[str, str], Direct]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            run = self.direct.get((scope["method"], scope["path"]))
            if run is not None:
                scope["app"] = self
                response = await run(Request(scope, receive, send))  # answers every error itself
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def _direct_table(routes: Sequence[BaseRoute], ours: Sequence[tuple[str, Route]]) -> dict[tuple[str, str], Direct]:
    """``(method, path)`` → endpoint for each of ``ours`` (method, route) without path
    parameters that the router, trying ``routes`` in order, would itself pick."""
    table: dict[tuple[str, str], Direct] = {}
    for method, route in ours:
        if route.param_convertors:
            continue
        scope = {"type": "http", "method": method, "path": route.path, "root_path": ""}
        if next((r for r in routes if r.matches(scope)[0] is Match.FULL), None) is route:
            table[(method, route.path)] = route.endpoint
    return table


def build_app(api: ApiContext, dashboard: Sequence[BaseRoute] = ()) -> Starlette:
    """The /v1 routes, and the dashboard's routes (``clockd.ui``) mounted at /ui."""
    document: list[dict[str, Any]] = []  # built on first request: a quick start

    async def serve_openapi(request: Request) -> Response:
        if not document:
            document.append(openapi.document())
        return answer(document[0])

    # Schedule names may hold "/" (sent as %2F): {name} matches any path, and the routes
    # with a suffix after it (/pause, /explain…) are tried first.
    endpoints = sorted(all_endpoints(), key=lambda ep: -ep.path.count("/"))
    ours = [
        (ep.method, Route(ep.path.replace("{name}", "{name:path}"), _wrap(ep), methods=[ep.method])) for ep in endpoints
    ]
    routes: list[BaseRoute] = [route for _, route in ours]
    routes.append(Route("/v1/openapi.json", serve_openapi, methods=["GET"]))
    if dashboard:
        routes.append(Mount("/ui", routes=list(dashboard)))
    app = _Api(routes=routes, exception_handlers={404: _http_error, 405: _http_error})
    app.direct = _direct_table(routes, ours)
    app.state.api = api
    return app
