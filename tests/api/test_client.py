"""``clockd.client`` against a real clockd: the README's lines, typed errors, pages."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

from clockd.client import (
    AsyncClient,
    Client,
    Forbidden,
    IdempotencyKeyReused,
    InvalidInput,
    NotFound,
    PreconditionFailed,
    QuotaExceeded,
)
from tests.e2e.conftest import wait_for

from .conftest import ApiServer, job

pytestmark = pytest.mark.e2e
README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    text = README.read_text()
    match = re.search(r"<!-- client-example -->\n```python\n(.*?)```", text, re.S)
    assert match, "README.md has no client example"
    return match.group(1)


def test_the_readme_lines_schedule_the_friday_mail_and_print_the_next_runs(
    api: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [line for line in readme_example().splitlines() if line.strip()]
    assert len(lines) <= 6
    monkeypatch.setenv("CLOCKD_SERVER", api.url())
    monkeypatch.setenv("CLOCKD_TOKEN", api.token("acme", "operator"))
    out = io.StringIO()
    for _ in range(2):  # the idempotency key makes a second run the same schedule
        with contextlib.redirect_stdout(out):
            exec(readme_example(), {})  # the README's own lines, on purpose
    printed = out.getvalue().splitlines()
    assert len(printed) == 10
    assert all(re.match(r"^\d{4}-\d\d-\d\dT10:00:00\+0[12]:00", line) for line in printed), printed
    with Client(os.environ["CLOCKD_SERVER"], token=os.environ["CLOCKD_TOKEN"]) as client:
        assert [s.name for s in client.schedules()] == ["friday-mail"]


def test_typed_errors_and_pages(api: ApiServer) -> None:
    with Client(api.url(), token=api.token("acme", "operator")) as client:
        for n in range(7):
            client.create(job(f"j{n}"))
        assert [s.name for s in client.schedules(page_size=3)] == [f"j{n}" for n in range(7)]
        with pytest.raises(NotFound):
            client.get("nope")
        with pytest.raises(InvalidInput) as bad:
            client.create(job("x", tz="Mars/Base"))
        assert bad.value.errors[0].pointer == "/tz"
        client.create(job("k"), idempotency_key="k1")
        with pytest.raises(IdempotencyKeyReused):
            client.create(job("k", timeout="1m"), idempotency_key="k1")
        first = client.get("j0")
        client.patch("j0", {"timeout": "2m"}, if_match=first.version)
        with pytest.raises(PreconditionFailed):
            client.patch("j0", {"timeout": "3m"}, if_match=first.version)
        paused = client.pause("j1", "maintenance")
        assert paused.state == "paused"


def test_the_dead_letter_queue_pages_from_the_most_recently_dead(api: ApiServer) -> None:
    with Client(api.url(), token=api.token("acme", "operator")) as client:
        client.create(job("fails", command=["/bin/false"], retries=0))
        ran = {client.run_now("fails").id for _ in range(3)}
        wait_for("three dead letters", lambda: len(client.request("GET", "/v1/dlq")["items"]) == 3, 30)
        whole = [o.id for o in client.dead_letters()]
        assert sorted(whole) == sorted(ran)
        first = client.request("GET", "/v1/dlq", params={"limit": 2})
        assert [o["id"] for o in first["items"]] == whole[:2] and first["next_cursor"]
        last = client.request("GET", "/v1/dlq", params={"limit": 2, "cursor": first["next_cursor"]})
        assert [o["id"] for o in last["items"]] == whole[2:] and last["next_cursor"] is None
        assert [o.id for o in client.dead_letters(schedule="fails", page_size=1)] == whole
        with pytest.raises(InvalidInput):
            client.request("GET", "/v1/dlq", params={"cursor": "not-a-cursor"})


def test_a_tenant_at_its_quota_gets_a_quota_error_with_nothing_to_wait_for(api: ApiServer) -> None:
    api.ctl("tenant", "set", api.tenant("small"), "--max-schedules", "1")
    with Client(api.url(), token=api.token("small", "operator")) as client:
        client.create(job("one"))
        with pytest.raises(QuotaExceeded) as over:
            client.create(job("two"))
        assert over.value.status == 429 and over.value.retry_after is None
        assert "--max-schedules" in over.value.detail


async def test_the_async_client(api: ApiServer) -> None:
    async with AsyncClient(api.url(), token=api.token("acme", "operator")) as client:
        created = await client.create(job("async"))
        assert created.next_runs and (await client.get("async")).id == created.id
        assert [s.name async for s in client.schedules()] == ["async"]
        occurrence = await client.run_now("async")
        assert occurrence.id in [o.id async for o in client.occurrences(schedule="async")]
        runs = await client.preview({"schedule": "0 10 * * 5", "tz": "Europe/Paris"}, count=3)
        assert len(runs) == 3 and all(r.local.endswith(("T10:00:00+01:00", "T10:00:00+02:00")) for r in runs)


def test_tokens_and_the_audit_log(api: ApiServer) -> None:
    with Client(api.url(), token=api.token("acme", "admin", name="boss")) as client:
        made = client.create_token("operator", name="ci", expires="90d")
        assert made.secret.startswith(f"clockd_{made.token.id}_") and made.token.tenant == api.tenant("acme")
        assert (made.token.name, made.token.role, made.token.revoked_at) == ("ci", "operator", None)
        assert made.token.expires_at is not None
        assert [(t.name, t.role) for t in client.tokens()] == [("boss", "admin"), ("ci", "operator")]
        with Client(api.url(), token=made.secret) as ci:
            ci.create(job("by-ci"))
            with pytest.raises(Forbidden):
                ci.create_token("readonly")
        assert client.revoke_token("ci").revoked_at is not None
        with pytest.raises(NotFound):
            client.revoke_token("ci")
        with pytest.raises(NotFound):
            client.tokens(tenant=api.tenant("other"))
        entries = list(client.audit(page_size=1))
        assert [(e.actor, e.action, e.target) for e in entries[:3]] == [
            ("boss", "token.revoke", "ci"),
            ("ci", "schedule.create", "by-ci"),
            ("boss", "token.create", "ci"),
        ]
        assert entries[2].detail == {"role": "operator"}


async def test_tokens_and_the_audit_log_async(api: ApiServer) -> None:
    async with AsyncClient(api.url(), token=api.token("acme", "admin", name="boss")) as client:
        made = await client.create_token(name="look")
        assert made.token.role == "readonly" and made.token.tenant == api.tenant("acme")
        assert [t.name for t in await client.tokens()] == ["boss", "look"]
        assert (await client.revoke_token(made.token.id)).name == "look"
        assert [(e.actor, e.action) async for e in client.audit(page_size=1)][:2] == [
            ("boss", "token.revoke"),
            ("boss", "token.create"),
        ]
