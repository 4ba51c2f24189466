"""The OpenAPI document: served, committed, complete."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from starlette.routing import Match, Route

from clockd.api import openapi
from clockd.api.app import build_app
from clockd.api.context import ApiContext
from clockd.api.problems import TYPES
from clockd.core.clock import SystemClock
from clockd.services.ops import Ops
from clockd.store.sqlite import SqliteStore
from tests.api.conftest import ApiServer, job

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "openapi.json"


def _app(tmp_path: Path) -> tuple[object, list[Route]]:
    store = SqliteStore(tmp_path / "x.db")  # never opened: the document needs no store
    app = build_app(ApiContext(store, Ops(store, SystemClock()), SystemClock()))
    return app, [r for r in app.routes if isinstance(r, Route)]


def test_the_committed_document_is_the_generated_one() -> None:
    assert json.loads(COMMITTED.read_text()) == openapi.document(), (
        "docs/openapi.json is stale: python -m clockd.api.openapi > docs/openapi.json"
    )


async def test_the_served_document_is_the_committed_one_and_documents_every_route(tmp_path: Path) -> None:
    app, routes = _app(tmp_path)
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]  # a Starlette app is ASGI
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        served = (await http.get("/v1/openapi.json")).json()
    assert served == json.loads(COMMITTED.read_text())
    assert served["openapi"] == "3.1.0"
    documented = {(path, method.upper()) for path, ops in served["paths"].items() for method in ops}
    for route in routes:
        for method in route.methods or ():
            if method == "HEAD":
                continue
            path = route.path.replace(":path}", "}")
            assert (path, method) in documented, f"{method} {route.path} is not in the OpenAPI document"
    problem_types = served["components"]["schemas"]["Problem"]["properties"]["type"]["enum"]
    assert len(problem_types) == len(TYPES)


def test_the_routes_dispatched_directly_are_those_the_router_would_pick(tmp_path: Path) -> None:
    # clockd.api.app: parameterless routes skip Starlette's router; for each, the router
    # itself (every route tried in order) lands on the same endpoint.
    app, routes = _app(tmp_path)
    direct = app.direct  # type: ignore[attr-defined]  # clockd.api.app._Api
    assert ("POST", "/v1/schedules") in direct and ("GET", "/v1/schedules") in direct
    for (method, path), handler in direct.items():
        scope = {"type": "http", "method": method, "path": path, "root_path": ""}
        chosen = next(r for r in routes if r.matches(scope)[0] is Match.FULL)
        assert chosen.endpoint is handler, (method, path)
    assert not any("{" in path for _, path in direct)


def test_the_schedule_and_occurrence_schemas_list_every_field_the_api_answers(api: ApiServer) -> None:
    """An integrating developer reads the document: the Occurrence schema listed 6 of the 16
    fields a run answers with, the Schedule schema left out its times."""
    schemas = openapi.document()["components"]["schemas"]
    with api.client(api.token("acme", "admin", "fields")) as http:
        created = http.post("/v1/schedules", json=job("fields"))
        assert created.status_code == 201, created.text
        paused = http.post("/v1/schedules/fields/pause", json={"reason": "moving"}).json()
        ran = http.post("/v1/schedules/fields/run-now")
        assert ran.status_code == 202, ran.text
    for doc, name in ((created.json(), "Schedule"), (paused, "Schedule"), (ran.json(), "Occurrence")):
        undocumented = sorted(set(doc) - set(schemas[name]["properties"]))
        assert undocumented == [], (name, undocumented)
    patch = openapi.document()["paths"]["/v1/schedules/{name}"]["patch"]["requestBody"]["content"]
    assert "application/merge-patch+json" in patch  # what the client sends
