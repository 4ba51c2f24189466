"""Each attempt in its own cgroup (issue "Trust boundaries" 3): real processes that leave
their process group — ``setsid sleep &``, ``setsid -f``, ``setpgid(0, 0)`` — must not
survive the attempt's timeout or stop, and ``nproc_limit`` holds for a root job."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clockd.core.model import AttemptOutcome, CommandTarget
from clockd.runner.cgroups import Cgroups, detect
from clockd.runner.process import ProcessRunner
from tests.harness import until
from tests.unit.test_runner_process import request

PY = sys.executable
SUPPORT = detect()
needs_cgroups = pytest.mark.skipif(
    not SUPPORT.contained and os.environ.get("CI") != "true", reason=f"no cgroup here: {SUPPORT.reason}"
)


@pytest.fixture(autouse=True)
async def cleanup() -> AsyncIterator[list[ProcessRunner]]:
    runners: list[ProcessRunner] = []
    yield runners
    for runner in runners:
        await runner.aclose()
    if SUPPORT.v2 is not None:  # nothing left behind in the host's cgroup tree
        assert f"clockd-{os.getpid()}" not in os.listdir(SUPPORT.v2)


def escapes(marker: Path) -> dict[str, CommandTarget]:
    """Jobs that start a long sleeper outside their process group, write its pid, and wait."""
    sleeper = f"import os, time; open('{marker}.' + str(os.getpid()), 'w').close(); time.sleep(3001)"
    setpgid = f"import os, time; os.setpgid(0, 0); {sleeper}"
    return {
        "setsid &": CommandTarget(argv=(f'setsid {PY} -c "{sleeper}" & sleep 3001',), shell=True),
        "setsid -f": CommandTarget(argv=(f'setsid -f {PY} -c "{sleeper}"; sleep 3001',), shell=True),
        "setpgid": CommandTarget(argv=(f'{PY} -c "{setpgid}" & sleep 3001',), shell=True),
    }


def pids_of(marker: Path) -> list[int]:
    return [int(p.name.rsplit(".", 1)[1]) for p in marker.parent.glob(f"{marker.name}.*")]


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


@needs_cgroups
@pytest.mark.parametrize("how", ["setsid &", "setsid -f", "setpgid"])
async def test_nothing_the_job_started_survives_its_timeout(
    tmp_path: Path, how: str, cleanup: list[ProcessRunner]
) -> None:
    assert shutil.which("setsid")
    marker = tmp_path / "sleeper"
    runner = ProcessRunner(cgroups=Cgroups(SUPPORT))
    cleanup.append(runner)
    task = asyncio.ensure_future(
        runner.run(request(escapes(marker)[how], timeout=None, kill_grace=1.0), stop := asyncio.Event())
    )
    await until(lambda: bool(pids_of(marker)), within=20, what="the escaped sleeper to start")
    [escaped] = pids_of(marker)
    stop.set()
    result = await asyncio.wait_for(task, 30)
    assert result.outcome is AttemptOutcome.STOPPED
    try:
        assert not running(escaped), f"{how}: pid {escaped} outlived the stop"
    finally:
        if running(escaped):
            os.kill(escaped, 9)


@needs_cgroups
async def test_a_timeout_kills_a_setsid_grandchild(tmp_path: Path, cleanup: list[ProcessRunner]) -> None:
    marker = tmp_path / "sleeper"
    runner = ProcessRunner(cgroups=Cgroups(SUPPORT))
    cleanup.append(runner)
    result = await runner.run(request(escapes(marker)["setsid -f"], timeout=3.0, kill_grace=1.0), asyncio.Event())
    assert result.outcome is AttemptOutcome.TIMED_OUT
    [escaped] = pids_of(marker)
    assert not running(escaped)


@needs_cgroups
@pytest.mark.skipif(os.geteuid() != 0, reason="the point is a root job, which RLIMIT_NPROC does not limit")
async def test_nproc_limit_holds_for_a_root_job(tmp_path: Path, cleanup: list[ProcessRunner]) -> None:
    if "pids" not in SUPPORT.v1 and "pids" not in SUPPORT.v2_controllers:
        pytest.skip("no pids controller")
    code = (
        "import subprocess, sys\n"
        "ok = 0\n"
        "procs = []\n"
        "for _ in range(20):\n"
        "    try:\n"
        "        procs.append(subprocess.Popen(['sleep', '30'])); ok += 1\n"
        "    except OSError:\n"
        "        break\n"
        "print(ok)\n"
        "for p in procs: p.kill()\n"
    )
    runner = ProcessRunner(cgroups=Cgroups(SUPPORT))
    cleanup.append(runner)
    result = await runner.run(request(CommandTarget(argv=(PY, "-c", code), nproc_limit=5)), asyncio.Event())
    assert result.outcome is AttemptOutcome.SUCCEEDED, result.error
    assert int(result.output.split()[-1]) < 5  # the job itself counts as one


def test_status_says_what_jobs_run_in(tmp_path: Path) -> None:
    import json
    import subprocess

    from tests.harness.home import existing_store

    env = {**os.environ, "CLOCKD_HOME": str(tmp_path / "home"), "CLOCKD_CONFIG": os.devnull}
    env.pop("CLOCKD_STORE", None)
    existing_store(tmp_path / "home")
    ctl = str(Path(sys.executable).parent / "clockctl")
    doc = json.loads(subprocess.run([ctl, "status", "-o", "json"], env=env, capture_output=True, text=True,
                                    check=True).stdout)  # fmt: skip
    assert doc["job_containment"] == SUPPORT.describe()
    expected = "cgroup v2 at" if SUPPORT.contained else "process-group (no cgroup:"
    assert doc["job_containment"].startswith(expected)
