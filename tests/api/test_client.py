"""``clockd.client`` against a real clockd: the README's lines, typed errors, pages."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

from clockd.client import AsyncClient, Client, IdempotencyKeyReused, InvalidInput, NotFound, PreconditionFailed

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


async def test_the_async_client(api: ApiServer) -> None:
    async with AsyncClient(api.url(), token=api.token("acme", "operator")) as client:
        created = await client.create(job("async"))
        assert created.next_runs and (await client.get("async")).id == created.id
        assert [s.name async for s in client.schedules()] == ["async"]
        occurrence = await client.run_now("async")
        assert occurrence.id in [o.id async for o in client.occurrences(schedule="async")]
