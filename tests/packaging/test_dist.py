"""The one-file executable (``make dist``), run with an empty environment: no venv, no PATH.

It must carry everything: the interpreter, the compiled wheels, the zone data, the
SQL migrations. The embedded flow and the cluster flow run through it alone.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import statistics
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from clockd import __version__
from clockd.core.zones import tzdata_version
from tests.e2e.cluster import FAST
from tests.e2e.conftest import api_url_in, wait_for
from tests.packaging.artefacts import Artefacts, built, clean_env

# The first test may build the artefacts (packaging/deb.sh): minutes, not the default 300 s.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def art() -> Artefacts:
    return built()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def _aliases(art: Artefacts, tmp_path: Path) -> Path:
    """A bin directory with clockd and clockctl as symlinks to the one file, as a user installs it."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name in ("clockd", "clockctl"):
        link = bindir / name
        if not link.exists():
            link.symlink_to(art.onefile)
    return bindir


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def test_every_name_reports_the_release_the_commit_and_the_zone_data(art: Artefacts, tmp_path: Path) -> None:
    assert art.onefile.name == f"clockd-{__version__}-linux-x86_64"
    bindir = _aliases(art, tmp_path)
    env = clean_env(tmp_path)
    lines = {
        "clockd version": _run([str(bindir / "clockd"), "version"], env).stdout,
        "clockd --version": _run([str(bindir / "clockd"), "--version"], env).stdout,
        "clockctl version": _run([str(bindir / "clockctl"), "version"], env).stdout,
        "clockd ctl version": _run([str(art.onefile), "ctl", "version"], env).stdout,
    }
    tail = f" {__version__} (commit "
    for how, out in lines.items():
        prog = "clockctl" if "ctl" in how else "clockd"
        assert out.startswith(prog + tail) and out.rstrip().endswith(f", tzdata {tzdata_version()})"), (how, out)
        commit = out.split("(commit ", 1)[1].split(",", 1)[0]
        assert commit != "unknown" and len(commit.removesuffix("-dirty")) == 12, (how, out)


def test_zone_data_and_help_come_from_the_bundle(art: Artefacts, tmp_path: Path) -> None:
    bindir = _aliases(art, tmp_path)
    env = clean_env(tmp_path)
    preview = _run(
        [str(bindir / "clockctl"), "preview", "30 2 * * *", "--tz", "Europe/Paris",
         "--after", "2026-03-28T00:00:00Z", "-n", "2", "-o", "json"],
        env,
    )  # fmt: skip
    assert preview.returncode == 0, preview.stderr
    # 2026-03-29 02:30 does not exist in Paris: only the bundled tzdata can say so here.
    fires = json.loads(preview.stdout)
    assert [(f["utc"], f["skipped"]) for f in fires] == [
        ("2026-03-28T01:30:00Z", []),
        ("2026-03-30T00:30:00Z", ["2026-03-29T02:30"]),
    ]
    helped = _run([str(bindir / "clockctl"), "--help"], env)
    assert helped.returncode == 0 and "Usage: clockctl" in helped.stdout, helped.stderr


@pytest.mark.serial  # a wall-time limit: measured alone, not beside the parallel suite
def test_clockctl_list_starts_within_half_a_second(art: Artefacts, home: Path) -> None:
    """Issue 20's budget, on the one-directory layout (the .deb's): the median wall time
    of seven warm calls (the first call creates the database and fills the page cache).
    tests/cli/test_startup.py says which modules a call must not load when this fails.

    This VM's CPU speed drifts by a third between minutes (the same binary measured 0.35
    and 0.44 s in back-to-back windows; a fresh-clone CI once read 0.52 s with the CPU
    time per call just as high), so the budget must hold in one of three windows of seven
    calls: a slow spell fails one window, a start-up that has really grown fails all."""
    link = home / "clockctl"
    link.symlink_to(art.onedir)
    env = clean_env(home)
    assert _run([str(link), "add", "*/5 * * * *", "--name", "hello", "--", "/bin/true"], env).returncode == 0
    assert _run([str(link), "list"], env).returncode == 0
    windows: list[tuple[float, list[float], list[float], tuple[float, float, float]]] = []
    for _ in range(3):
        walls, cpus = [], []
        for _ in range(7):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            listed = _run([str(link), "list"], env)
            walls.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            assert listed.returncode == 0 and "hello" in listed.stdout, listed.stderr
        # The CPU times and the load say, when it fails, whether the machine was busy.
        windows.append((statistics.median(walls), walls, cpus, os.getloadavg()))
        if windows[-1][0] <= 0.5:
            return
    pytest.fail(f"median wall time over 0.5 s in every window (median, walls, cpu times, load): {windows}")


class Frozen:
    """clockd from the one file, with clockctl beside it, on an empty environment."""

    def __init__(self, art: Artefacts, bindir: Path, workdir: Path, **env: str) -> None:
        self.bindir = bindir
        self.workdir = workdir
        self.env = clean_env(
            workdir / "home", CLOCKD_METRICS_ADDR="off", CLOCKD_API_ADDR="127.0.0.1:0", CLOCKD_LOG_FORMAT="json", **env
        )
        (workdir / "home").mkdir(exist_ok=True)
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        log = self.workdir / f"clockd-{len(self.procs)}.log"
        proc = subprocess.Popen(
            [str(self.bindir / "clockd"), "run", *args],
            env=self.env,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append((proc, log))
        wait_for("clockd to start", lambda: '"action": "started"' in log.read_text() or proc.poll() is not None, 30)
        assert proc.poll() is None, log.read_text()
        return proc

    def ctl(self, *args: str) -> Any:
        cut = args.index("--") if "--" in args else len(args)
        result = _run([str(self.bindir / "clockctl"), *args[:cut], "-o", "json", *args[cut:]], self.env)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def logs(self, occurrence: str) -> str:
        result = _run([str(self.bindir / "clockctl"), "logs", occurrence], self.env)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def logged(self, action: str, schedule: str) -> bool:
        """Whether a clockd logged ``action`` for ``schedule`` (its JSON log lines)."""
        for _, log in self.procs:
            for line in log.read_text().splitlines():
                if f'"{action}"' in line and json.loads(line).get("schedule") == schedule:
                    return True
        return False

    def run_in(self, name: str, state: str) -> dict[str, Any] | None:
        runs: list[dict[str, Any]] = self.ctl("runs", name, "-n", "10")
        return next((r for r in runs if r["state"] == state), None)

    def stop(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)


@pytest.fixture
def frozen(art: Artefacts, tmp_path: Path) -> Iterator[Frozen]:
    daemon = Frozen(art, _aliases(art, tmp_path), tmp_path)
    yield daemon
    daemon.stop()


def test_embedded_flow_runs_on_time_logs_and_drains_on_sigterm(frozen: Frozen) -> None:
    proc = frozen.start()
    # 5 s ahead: the one file's clockctl reads "now" before it writes, and can be slow to start.
    added = frozen.ctl("add", "--at", "now+5s", "--name", "hello", "--", "/bin/echo", "hi from the bundle")
    due = _parse(added["next_runs"][0])
    run = wait_for("the job to succeed", lambda: frozen.run_in("hello", "SUCCEEDED"), 25)
    assert abs((_parse(str(run["started_at"])) - due).total_seconds()) <= 1.0, (run, due)
    assert frozen.logs(str(run["id"])) == "hi from the bundle\n"

    # SIGTERM while a job runs: clockd lets it finish (drain), then exits 0.
    frozen.ctl("add", "--at", "now+1s", "--name", "slow", "--", "/bin/sh", "-c", "sleep 2; echo drained")
    # From clockd's log, not `clockctl runs`: a call of the one file can take longer than
    # the job's two seconds of RUNNING on a busy machine.
    wait_for("the slow job to run", lambda: frozen.logged("run_started", "slow"), 20)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(40) == 0
    drained = frozen.run_in("slow", "SUCCEEDED")
    assert drained is not None and frozen.logs(str(drained["id"])) == "drained\n"


@pytest.mark.postgres
@pytest.mark.etcd
def test_cluster_mode_one_process_per_mode(art: Artefacts, tmp_path: Path, pg_dsn: str, etcd_server: Any) -> None:
    frozen = Frozen(art, _aliases(art, tmp_path), tmp_path, CLOCKD_STORE=pg_dsn)
    try:
        migrated = _run([str(frozen.bindir / "clockd"), "migrate"], frozen.env)
        assert migrated.returncode == 0, migrated.stderr
        cluster = f"dist-{os.getpid()}"
        for mode in ("leader", "materializer", "relay", "worker"):
            frozen.start("--mode", mode, "--etcd", etcd_server.endpoint, "--cluster", cluster, "--node-id", mode, *FAST)
        frozen.ctl("add", "--at", "now+2s", "--name", "clustered", "--", "/bin/echo", "from postgres")
        run = wait_for("the job to succeed", lambda: frozen.run_in("clustered", "SUCCEEDED"), 40)
        assert frozen.logs(str(run["id"])) == "from postgres\n"
    finally:
        frozen.stop()
    assert [proc.returncode for proc, _ in frozen.procs] == [0, 0, 0, 0]


def test_the_bundle_carries_every_package_data_file_pyproject_declares(art: Artefacts) -> None:
    """SQL migrations and queries today; templates and static files as pyproject adds them."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["*"]
    wanted = sorted(
        str(path.relative_to(root))
        for pattern in patterns
        for path in (root / "clockd").rglob(pattern)
        if "__pycache__" not in path.parts
    )
    assert any(name.endswith(".sql") for name in wanted)
    bundle = art.onedir.parent / "_internal"
    assert [name for name in wanted if not (bundle / name).is_file()] == []
    assert (bundle / "tzdata" / "zoneinfo" / "Europe" / "Paris").is_file()


def test_the_api_is_served_by_the_bundled_httptools(frozen: Frozen) -> None:
    """httptools is a compiled dependency (clockd.api.http): the bundle must carry it, or
    the API falls back to h11 and says so in this log line."""
    import httpx

    frozen.start("--mode", "api", "--api-addr", "127.0.0.1:0")  # the port it binds: from its log
    log = frozen.procs[-1][1]
    listening = wait_for(
        "the api to listen",
        lambda: next((json.loads(line) for line in log.read_text().splitlines() if '"api_listening"' in line), None),
        30,
    )
    assert listening["http"] == "httptools", listening
    url = api_url_in(listening["msg"])
    assert url and httpx.get(f"{url}/v1/openapi.json", timeout=10).status_code == 200
