"""The HTTP API on the embedded store: one real ``clockd run`` (every mode, the api on a
free port), driven over real HTTP from this process with ``clockd.client``.

* creates/s and latency p99 of ``POST /v1/schedules``, ``IN_FLIGHT`` requests in flight
  (goal, issue #16: ≥ 1,000/s and p99 ≤ 50 ms on this machine), and the server's CPU per
  create (user + system time of the clockd process from /proc, divided by the creates):
  the rate swings with what else the shared machine runs, the CPU per create much less,
  so changes are compared by it (interleaved, or both servers driven at once);
* ``GET /v1/schedules?limit=100`` pages at 100,000 schedules (10,000 with --quick):
  latency p99 (goal ≤ 50 ms). The schedules are written straight into the store first
  (``apply_schedules``, set-based), then the pages walk the keyset from many cursors;
* the dashboard (issue #17, goal ≤ 200 ms p99 at 100,000 schedules): its schedules list
  (walking the keyset), one schedule's page, the searches (name prefix, a label, a
  state none has: each walks an index of schema 0009 and stops at its page's LIMIT) and
  the health page (which never runs the reconciler on the request: above 20,000 live
  schedules it says it did not check, below it shows the last background run's report).

The server is one ``clockd run`` of every mode, as ``make run`` serves the embedded
store: an embedded store has one clockd per database (its lock refuses a second one), so
the api cannot run in a process of its own beside the scheduler there. On PostgreSQL it
can (``clockd run --mode api``, several stateless api processes); ``BENCH_API_MODES=api``
measures the api mode alone: within ~5 % of every mode's CPU per create (measured side
by side), so sharing the process costs the creates little.

The client shares the machine's two cores with the server: the figures are a floor. The
creates and the API pages go through ``bench.http1`` (a lean keep-alive client: httpx's
~3–4 ms of CPU per request had been more than the server's create); the dashboard is
signed in to with httpx. The machine's load average during the figures is a row too.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from bench.cluster import cpu_seconds, percentile
from bench.http1 import Connection
from clockd.core.ids import new_schedule_id, shard_of
from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.services.ops import first_run
from clockd.store import NewSchedule
from clockd.store.sqlite.store import SqliteStore

BIN = Path(sys.executable).parent
TENANT = "bench"
# Creates in flight (one keep-alive connection each). Little's law ties them together:
# at a given rate, latency grows with the number in flight, so the figure is taken at
# the smallest number that the rate goal needs (BENCH_API_IN_FLIGHT overrides).
IN_FLIGHT = int(os.environ.get("BENCH_API_IN_FLIGHT", "24"))
LABELS = 100  # schedule i has the label team=t{i % 100}: a label search matches 1 in 100
# The embedded store's `make run` runs every mode in one process; BENCH_API_MODES=api
# measures the api alone.
MODES = os.environ.get("BENCH_API_MODES", "all")


def _job(name: str) -> dict[str, Any]:
    return {"name": name, "schedule": "0 0 1 1 *", "noop": True}  # yearly: nothing to run meanwhile


async def _fill(db: Path, n: int) -> None:
    store = SqliteStore(db)
    await store.open()
    now = datetime.now(UTC).replace(microsecond=0)
    try:
        for start in range(0, n, 5000):
            batch = []
            for i in range(start, min(n, start + 5000)):
                definition = ScheduleDef(
                    name=f"page-{i:07d}", kind=ScheduleKind.CRON, expr="0 0 1 1 *", tz="UTC",
                    target=NoopTarget(), tenant=TENANT, labels=(("team", f"t{i % LABELS}"),),
                )  # fmt: skip
                sid = new_schedule_id()
                batch.append(NewSchedule(sid, definition, shard_of(sid, 64), first_run(definition, now)))
            await store.apply_schedules(batch, [], now)
    finally:
        await store.close()


async def _creates(
    url: str, token: str, n: int, server: int, prefix: str = "create"
) -> tuple[float, list[float], float, float]:
    """``n`` creates, ``IN_FLIGHT`` at a time (one keep-alive connection each): the rate,
    each create's latency, the client's own CPU over the run (share of one core) and the
    server's CPU per create (seconds; process ``server``, from /proc: far steadier on a
    shared machine than the rate, which swings with what else runs)."""
    latencies: list[float] = []
    names = iter(range(n))
    host, port = _host_port(url)
    connections = [Connection(host, port, {"Authorization": f"Bearer {token}"}) for _ in range(IN_FLIGHT)]

    async def one_worker(http: Connection) -> None:
        for i in names:
            t0 = time.perf_counter()
            response = await http.request("POST", "/v1/schedules", _job(f"{prefix}-{i:07d}"))
            latencies.append(time.perf_counter() - t0)
            if response.status != 201:
                raise RuntimeError(f"create answered {response.status}: {response.body[:300]!r}")

    started, cpu, server_cpu = time.perf_counter(), time.process_time(), cpu_seconds(server)
    try:
        await asyncio.gather(*(one_worker(http) for http in connections))
    finally:
        for http in connections:
            await http.close()
    elapsed = time.perf_counter() - started
    per_create = (cpu_seconds(server) - server_cpu) / n
    # The client's own CPU over the run: well under 100 % means it is not what limits the rate.
    client_cpu = (time.process_time() - cpu) / elapsed
    return n / elapsed, latencies, client_cpu, per_create


async def _pages(url: str, token: str, n: int, count: int) -> list[float]:
    latencies: list[float] = []
    host, port = _host_port(url)
    http = Connection(host, port, {"Authorization": f"Bearer {token}"})
    try:
        cursor: str | None = None
        for _ in range(count):
            target = "/v1/schedules?limit=100" + (f"&cursor={quote(cursor)}" if cursor else "")
            t0 = time.perf_counter()
            response = await http.request("GET", target)
            latencies.append(time.perf_counter() - t0)
            doc = response.json()
            if len(doc["items"]) != 100 and doc["next_cursor"]:
                raise RuntimeError(f"a short page: {len(doc['items'])}")
            cursor = doc["next_cursor"]  # walks the keyset; wraps to the start at the end
    finally:
        await http.close()
    return latencies


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_NEXT = re.compile(r'<a href="([^"]+)" rel="next">')


# The dashboard's searches: (figure name, query of /ui/schedules for run i).
SEARCHES: tuple[tuple[str, Callable[[int], dict[str, str]]], ...] = (
    ("name prefix", lambda i: {"q": f"page-{(i * 7919) % 1000:04d}"}),
    ("label", lambda i: {"label": f"team=t{i % LABELS}"}),
    ("state none has", lambda i: {"state": "paused"}),
)


async def _dashboard(url: str, token: str, count: int) -> dict[str, list[float]]:
    """Sign in to /ui as a browser would, then time list pages (walking the keyset),
    schedule pages, each search and the health page: the dashboard's own render time on
    loopback. Keys: ``list``, ``schedule``, ``search: …``, ``health``."""
    lists: list[float] = []
    details: list[float] = []
    timed: dict[str, list[float]] = {"list": lists, "schedule": details}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        form = await http.get("/ui/login")
        found = _CSRF.search(form.text)
        if found is None:
            raise RuntimeError("no sign-in form at /ui/login")
        signed = await http.post("/ui/login", data={"token": token, "csrf": found.group(1), "next": "/ui/schedules"})
        if signed.status_code != 303:
            raise RuntimeError(f"dashboard sign-in answered {signed.status_code}")
        path = "/ui/schedules"
        for i in range(count):
            t0 = time.perf_counter()
            page = await http.get(path)
            lists.append(time.perf_counter() - t0)
            if page.status_code != 200:
                raise RuntimeError(f"{path} answered {page.status_code}")
            nxt = _NEXT.search(page.text)
            path = html.unescape(nxt.group(1)) if nxt else "/ui/schedules"
            t0 = time.perf_counter()
            one = await http.get(f"/ui/schedules/page-{(i * 7919) % 1000:07d}")
            details.append(time.perf_counter() - t0)
            if one.status_code != 200:
                raise RuntimeError(f"a schedule page answered {one.status_code}")
        for label, query in SEARCHES:
            timed[f"search: {label}"] = [await _timed_get(http, "/ui/schedules", query(i)) for i in range(count)]
        # The health page reads its reconciler report from the background (services.status).
        timed["health"] = [await _timed_get(http, "/ui/health") for _ in range(max(10, count // 10))]
    return timed


async def _timed_get(http: httpx.AsyncClient, path: str, params: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    page = await http.get(path, params=params)
    elapsed = time.perf_counter() - t0
    if page.status_code != 200:
        raise RuntimeError(f"{path} {params} answered {page.status_code}")
    return elapsed


class _LoadSampler:
    """The machine's 1-minute load average, sampled every second while the figures are
    taken (the machine is shared: the figures mean little without it)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> _LoadSampler:
        self.samples.append(os.getloadavg()[0])
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def row(self) -> dict[str, Any]:
        low, high = min(self.samples), max(self.samples)
        return {"name": f"API figures: machine load average {low:.1f}–{high:.1f} on {os.cpu_count()} cores",
                "value": high, "unit": "", "target": "reported", "ok": None}  # fmt: skip


def bench(n_pages: int, n_creates: int) -> list[dict[str, Any]]:
    from tests.harness.procs import free_port

    with tempfile.TemporaryDirectory(prefix="clockd-bench-api-") as tmp:
        home = Path(tmp)
        os.chmod(home, 0o700)
        asyncio.run(_fill(home / "clockd.db", n_pages))
        port = free_port()
        env = {**os.environ, "CLOCKD_HOME": str(home), "CLOCKD_METRICS_ADDR": "off", "CLOCKD_LOG_LEVEL": "warning"}
        env.pop("CLOCKD_STORE", None)
        env.pop("CLOCKD_SERVER", None)
        token = json.loads(
            subprocess.run(
                [str(BIN / "clockctl"), "token", "create", "--tenant", TENANT, "--role", "cluster-admin", "-o", "json"],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )["token"]
        proc = subprocess.Popen(
            [str(BIN / "clockd"), "run", "--mode", MODES, "--api-addr", f"127.0.0.1:{port}", "--log-format", "text"],
            env=env,
            stderr=(home / "clockd.log").open("wb"),
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if httpx.get(url + "/v1/openapi.json", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            with _LoadSampler() as load:
                page_latencies = asyncio.run(_pages(url, token, n_pages, 300))
                ui = asyncio.run(_dashboard(url, token, 100))
                rate, create_latencies, client_cpu, server_cpu = asyncio.run(_creates(url, token, n_creates, proc.pid))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    create_p99 = percentile(create_latencies, 0.99) * 1000
    page_p99 = percentile(page_latencies, 0.99) * 1000
    ui_p99 = {key: percentile(values, 0.99) * 1000 for key, values in ui.items()}
    ui_list_p99, ui_detail_p99 = ui_p99.pop("list"), ui_p99.pop("schedule")
    return [
        load.row(),
        {"name": f"API creates/s ({n_creates:,}, {IN_FLIGHT} in flight)", "value": rate, "unit": "/s",
         "target": "≥ 1,000/s", "ok": rate >= 1000},
        {"name": "API create latency p99", "value": create_p99, "unit": "ms", "target": "≤ 50 ms",
         "ok": create_p99 <= 50},
        {"name": "API server CPU per create (user + system, /proc)", "value": server_cpu * 1e6, "unit": "µs",
         "target": "reported", "ok": None},
        {"name": "API bench client CPU during the creates (share of one core)", "value": client_cpu * 100,
         "unit": "%", "target": "reported", "ok": True},
        {"name": f"API list page p99 ({n_pages:,} schedules)", "value": page_p99, "unit": "ms",
         "target": "≤ 50 ms", "ok": page_p99 <= 50},
        {"name": f"dashboard schedules page p99 ({n_pages:,})", "value": ui_list_p99, "unit": "ms",
         "target": "≤ 200 ms", "ok": ui_list_p99 <= 200},
        {"name": f"dashboard schedule page p99 ({n_pages:,})", "value": ui_detail_p99, "unit": "ms",
         "target": "≤ 200 ms", "ok": ui_detail_p99 <= 200},
        *({"name": f"dashboard {key} p99 ({n_pages:,})", "value": value, "unit": "ms",
           "target": "≤ 200 ms", "ok": value <= 200} for key, value in ui_p99.items()),
    ]  # fmt: skip


def run(quick: bool) -> list[dict[str, Any]]:
    return bench(10_000, 1_000) if quick else bench(100_000, 5_000)


if __name__ == "__main__":
    for row in run("--quick" in sys.argv):
        print(row)
