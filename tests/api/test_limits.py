"""Admission, quotas, slow bodies and token routes, in process (the app over ASGI, a real
SQLite store): the limits are made small so the tests are quick."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from clockd import tokens
from clockd.api.app import build_app
from clockd.api.context import ApiContext, Limits
from clockd.core.clock import Clock, ManualClock, SystemClock
from clockd.services.ops import Ops
from clockd.store.sqlite import SqliteStore

from .conftest import job


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    s = SqliteStore(home / "clockd.db")
    await s.open()
    yield s
    await s.close()


async def _client(
    store: SqliteStore, limits: Limits, tenant: str = "acme", role: str = "admin", clock: Clock | None = None
) -> httpx.AsyncClient:
    issued = tokens.issue(tenant, role, f"{role}-{tenant}", datetime.now(UTC), None)
    await store.create_token(issued.record)
    app = build_app(ApiContext(store, Ops(store, SystemClock()), clock or SystemClock(), limits))
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://api",
        headers={"Authorization": f"Bearer {issued.secret}"},
    )


async def test_writes_over_the_tenants_rate_answer_429_with_retry_after(store: SqliteStore) -> None:
    # The bucket refills on the API's monotonic clock: held still here, however slow the
    # machine, the burst is exactly the rate (it was real time, and a slow store refilled it).
    clock = ManualClock(datetime.now(UTC))
    async with await _client(store, Limits(writes_per_second=3), clock=clock) as http:
        codes = [(await http.post("/v1/schedules", json=job(f"j{n}"))).status_code for n in range(6)]
        assert codes == [201, 201, 201, 429, 429, 429]
        refused = await http.post("/v1/schedules", json=job("late"))
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert refused.json()["type"] == "urn:clockd:problem:rate-limited"
        assert (await http.get("/v1/schedules")).status_code == 200  # reads are not admitted writes
        assert await store.get_schedule("acme", "late") is None
        clock.advance(1 / 3)  # a third of a second: one write's worth
        assert (await http.post("/v1/schedules", json=job("later"))).status_code == 201
        assert (await http.post("/v1/schedules", json=job("too-soon"))).status_code == 429


async def test_a_tenant_at_its_schedule_quota_gets_429(store: SqliteStore) -> None:
    await Ops(store, SystemClock()).set_tenant("acme", max_schedules=1)
    async with await _client(store, Limits()) as http:
        assert (await http.post("/v1/schedules", json=job("one"))).status_code == 201
        over = await http.post("/v1/schedules", json=job("two"))
        assert over.status_code == 429 and "retry-after" not in over.headers  # time will not lift it
        assert "limit of 1" in over.json()["detail"]


async def test_a_body_that_arrives_too_slowly_is_refused_and_writes_nothing(store: SqliteStore) -> None:
    async def slow() -> AsyncIterator[bytes]:
        yield b'{"name": "slow", '
        await asyncio.sleep(1.0)  # the slow client itself, not a wait for an event
        yield b'"schedule": "0 10 * * 5", "noop": true}'

    async with await _client(store, Limits(body_timeout=0.2)) as http:
        response = await http.post("/v1/schedules", content=slow(), headers={"Content-Type": "application/json"})
        assert response.status_code == 408, response.text
        assert response.json()["type"] == "urn:clockd:problem:request-timeout"
    assert await store.get_schedule("acme", "slow") is None


async def test_tokens_through_the_api_stay_inside_the_tenant(store: SqliteStore) -> None:
    async with await _client(store, Limits()) as admin:
        made = await admin.post("/v1/tokens", json={"role": "operator", "name": "deploy", "expires": "90d"})
        assert made.status_code == 201, made.text
        secret = made.json()["token"]
        assert made.json()["tenant"] == "acme" and secret.startswith("clockd_")
        listed = (await admin.get("/v1/tokens")).json()["items"]
        assert {t["name"] for t in listed} == {"admin-acme", "deploy"} and all("token" not in t for t in listed)
        assert all("hash" not in t for t in listed)
        elsewhere = await admin.post("/v1/tokens", json={"tenant": "other", "role": "admin", "name": "x"})
        assert elsewhere.status_code == 404
        escalate = await admin.post("/v1/tokens", json={"role": "cluster-admin", "name": "root"})
        assert escalate.status_code == 403
        assert (await admin.get("/v1/tenants")).status_code == 403
        assert (await admin.delete("/v1/tokens/deploy")).status_code == 200
        assert (await admin.delete("/v1/tokens/deploy")).status_code == 404
    stored = [t for t in await store.list_tokens("acme") if t.name == "deploy"]
    assert stored and stored[0].revoked_at is not None and secret not in repr(stored)


async def test_a_cluster_admin_manages_tenants_and_may_act_in_any(store: SqliteStore) -> None:
    async with await _client(store, Limits(), tenant="ops", role="cluster-admin") as root:
        changed = await root.patch("/v1/tenants/acme", json={"max_schedules": 5})
        assert changed.status_code == 200 and changed.json()["max_schedules"] == 5
        created = await root.post("/v1/schedules", params={"tenant": "acme"}, json=job("for-acme"))
        assert created.status_code == 201 and created.json()["tenant"] == "acme"
        tenants = {t["limits"]["tenant"] for t in (await root.get("/v1/tenants")).json()["items"]}
        assert "acme" in tenants
        assert "backlog" in (await root.get("/v1/status")).json()


async def test_secrets_stay_references_in_every_answer(store: SqliteStore) -> None:
    secret = "${file:/etc/clockd/mail-token}"
    body = job("mail", env={"MAIL_TOKEN": secret})
    async with await _client(store, Limits()) as http:
        created = await http.post("/v1/schedules", json=body)
        assert created.status_code == 201, created.text
        for response in (created, await http.get("/v1/schedules/mail"), await http.get("/v1/schedules")):
            assert secret in response.text
        assert (await http.get("/v1/schedules/mail")).json()["job"]["env"] == {"MAIL_TOKEN": secret}


async def test_a_schedule_name_with_slashes_is_one_path_segment_when_encoded(store: SqliteStore) -> None:
    async with await _client(store, Limits()) as http:
        assert (await http.post("/v1/schedules", json=job("team/mail"))).status_code == 201
        assert (await http.get("/v1/schedules/team%2Fmail")).json()["name"] == "team/mail"
        paused = await http.post("/v1/schedules/team%2Fmail/pause", json={})
        assert paused.status_code == 200 and paused.json()["state"] == "paused"
        assert (await http.get("/v1/schedules/team%2Fmail/explain", params={"at": "now"})).status_code == 200
        assert (await http.delete("/v1/schedules/team%2Fmail")).status_code == 204


def test_the_refused_name_endings_are_the_routes_below_a_schedule() -> None:
    """check_schedule_name refuses names the router would read as an action on another
    name: its list must follow the routes (a new action would bring the bug back)."""
    from clockd.api.routes import all_endpoints
    from clockd.core.limits import SCHEDULE_SUBRESOURCES

    prefix = "/v1/schedules/{name}/"
    suffixes = {ep.path.removeprefix(prefix) for ep in all_endpoints() if ep.path.startswith(prefix)}
    assert suffixes == set(SCHEDULE_SUBRESOURCES)
