"""The dashboard served by a real ``clockd run`` (every mode, embedded store), signed in with
tokens from the real ``clockctl token create``, checked against what ``clockctl`` says.

The in-process page tests (``test_dashboard.py``) cover each page on a manual clock; this
one proves the whole path a new user takes: ``make run``, a token, the browser, the CLI.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Clockd, wait_for
from tests.harness.browser import artifacts_dir, launch

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.e2e


class Running:
    def __init__(self, daemon: Clockd, url: str) -> None:
        self.daemon, self.url = daemon, url

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.daemon.ctl(*args)

    def token(self, tenant: str, role: str) -> str:
        doc = json.loads(self.ctl("token", "create", "--tenant", tenant, "--role", role, "-o", "json").stdout)
        return str(doc["token"])


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    daemon = Clockd(tmp_path / "home")
    daemon.home.mkdir(mode=0o700)
    daemon.start("--api-addr", "127.0.0.1:0")  # the port it binds: from its log
    url = daemon.api_url()

    def up() -> bool:
        try:
            return httpx.get(url + "/ui/login", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for("the dashboard", up, 30)
    try:
        yield Running(daemon, url)
    finally:
        daemon.stop(timeout=30)


@pytest.fixture
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        b = launch(p)
        try:
            yield b
        finally:
            b.close()


def test_a_new_user_signs_in_sees_the_dst_notes_and_pauses_a_schedule(running: Running, browser: Any) -> None:
    # 02:30 on the last Sunday of March never exists in Paris: the next run is a DST skip.
    running.ctl("add", "30 2 * 3 0", "--tz", "Europe/Paris", "--name", "spring-report", "--", "/bin/true")
    running.ctl("add", "*/5 * * * *", "--tenant", "other-team", "--name", "theirs", "--", "/bin/true")
    token = running.token("default", "operator")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(running.url + "/ui/")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/ui/schedules")
    listed = page.get_by_role("table", name="Schedules of tenant default").inner_text()
    assert "spring-report" in listed and "theirs" not in listed
    page.screenshot(path=str(artifacts_dir() / "ui-e2e-schedules.png"), full_page=True)

    page.get_by_role("link", name="spring-report").click()
    notes = page.get_by_role("table", name="Next runs in Europe/Paris and UTC, with daylight-saving notes")
    assert "does not exist on" in notes.inner_text()  # the gap Sunday, marked before it happens
    page.get_by_role("link", name="Pause…").click()
    page.get_by_label("Reason (required, shown to everyone)").fill("quarter-end freeze")
    page.get_by_role("button", name="Pause").click()
    assert "Paused." in page.get_by_role("status").inner_text()
    assert "quarter-end freeze" in page.locator("p.lead").inner_text()  # the reason is shown
    page.screenshot(path=str(artifacts_dir() / "ui-e2e-paused.png"), full_page=True)

    shown = json.loads(running.ctl("show", "spring-report", "-o", "json").stdout)
    assert shown["state"] == "paused"  # the CLI sees what the page did
    audit = running.ctl("audit", "-o", "json").stdout
    assert "schedule.pause" in audit and "quarter-end freeze" in audit

    # Another tenant's schedule is not reachable by URL, even by guessing its name.
    response = page.goto(running.url + "/ui/schedules/theirs")
    assert response is not None and response.status == 404
