"""Each attempt in its own cgroup (issue "Trust boundaries" 3): real processes that leave
their process group — ``setsid sleep &``, ``setsid -f``, ``setpgid(0, 0)`` — must not
survive the attempt's timeout or stop, and ``nproc_limit`` holds for a root job.

Also: the job starts behind a gate, so even a slow daemon cannot leave the job's first
fork outside its group, and no Python hook runs between fork and exec (CPython then
vforks instead of forking the daemon); ``cpu_limit`` is a budget for all of the job's
processes together; and an unprivileged daemon in a delegated subtree (``Delegate=yes``,
built here the way systemd builds it) contains its jobs too."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clockd.core.model import AttemptOutcome, CommandTarget
from clockd.runner import cgroups
from clockd.runner.cgroups import Cgroups, detect
from clockd.runner.process import ProcessRunner
from tests.harness import until, wait_until
from tests.unit.test_runner_process import request

PY = sys.executable
SUPPORT = detect()
needs_cgroups = pytest.mark.skipif(
    not SUPPORT.contained and os.environ.get("CI") != "true", reason=f"no cgroup here: {SUPPORT.reason}"
)
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 and os.environ.get("CI") != "true", reason="needs root to build a delegated cgroup"
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
    runner = ProcessRunner(cgroups=Cgroups(SUPPORT))
    cleanup.append(runner)
    await stop_and_check(runner, tmp_path / "sleeper", how)


async def stop_and_check(runner: ProcessRunner, marker: Path, how: str) -> None:
    """Run the ``how`` escape job, stop it once its sleeper runs: the sleeper must be gone."""
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
        "for p in procs: p.kill(); p.wait()\n"  # its own children: a tidy job reaps them
    )
    runner = ProcessRunner(cgroups=Cgroups(SUPPORT))
    cleanup.append(runner)
    result = await runner.run(request(CommandTarget(argv=(PY, "-c", code), nproc_limit=5)), asyncio.Event())
    assert result.outcome is AttemptOutcome.SUCCEEDED, result.error
    assert int(result.output.split()[-1]) < 5  # the job itself counts as one


@needs_cgroups
async def test_shutdown_waits_for_a_jobs_last_processes_and_removes_its_groups(
    tmp_path: Path, cleanup: list[ProcessRunner]
) -> None:
    """A job that exits while its processes are still ending (it killed its children without
    waiting; a background process about to finish) leaves a group that cannot be removed
    yet. Shutdown gave up on it at once and left ``clockd-<pid>/job-<n>`` behind (a CI run,
    2026-12-06); it now waits (bounded: CLOSE_SETTLE) and removes it."""
    marker = tmp_path / "bg"
    job = CommandTarget(argv=(f"sh -c 'echo $$ > {marker}; exec sleep 1' >/dev/null 2>&1 &",), shell=True)
    runner = ProcessRunner(cgroups=Cgroups(SUPPORT))
    result = await runner.run(request(job), asyncio.Event())
    assert result.outcome is AttemptOutcome.SUCCEEDED, result.error
    assert SUPPORT.v2 is not None
    parent = SUPPORT.v2 / f"clockd-{os.getpid()}"
    await until(lambda: marker.exists() and marker.read_text().strip() != "", within=10, what="the background pid")
    background = int(marker.read_text())
    assert running(background), "the background process ended before the run did: the test proves nothing"
    assert [p.name for p in parent.iterdir() if p.is_dir()], "its group awaits its last process"
    await runner.aclose()
    assert not running(background)
    assert not parent.exists(), f"left behind: {sorted(p.name for p in parent.iterdir() if p.is_dir())}"


@needs_cgroups
def test_a_group_left_behind_never_makes_a_later_job_run_uncontained() -> None:
    """Two runners in one process (a test run; a daemon rebuilt in place) each numbered their
    groups from ``job-1``: the second collided with the first's leftover, and its jobs ran
    without a cgroup (no limits, no kill of what escaped the process group). Names are now
    one sequence per process, and a name already taken is skipped."""
    first, second = Cgroups(SUPPORT), Cgroups(SUPPORT)
    taken: list[Path] = []
    made = [first.create(None, None)]
    try:
        assert made[0] is not None
        number = int(made[0].v2.name.removeprefix("job-"))
        for i in (1, 2):  # as if left behind
            taken.append(made[0].v2.parent / f"job-{number + i}")
            taken[-1].mkdir()
        made.append(second.create(None, None))
        assert made[1] is not None, "the second runner's job got no cgroup"
        assert made[1].v2.parent == made[0].v2.parent
        assert made[1].v2 not in (made[0].v2, *taken)
    finally:
        for group in made:
            if group is not None:
                group.remove()
        for path in taken:
            path.rmdir()
        first.close()
        second.close()


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


@needs_cgroups
@pytest.mark.parametrize("how", ["setsid -f", "setpgid"])
async def test_a_slow_daemon_leaves_no_first_fork_outside_the_group(
    tmp_path: Path, how: str, cleanup: list[ProcessRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job waits behind its start gate until the daemon has moved it into its group.
    The move is made slow (a loaded host): the job's very first fork must still happen
    inside its group."""
    adopt = cgroups.JobGroup.adopt

    def slow_adopt(self: cgroups.JobGroup, pid: int) -> None:
        import time

        time.sleep(0.5)  # the fault: the daemon is late to move the job
        adopt(self, pid)

    monkeypatch.setattr(cgroups.JobGroup, "adopt", slow_adopt)
    runner = ProcessRunner(cgroups=Cgroups(SUPPORT))
    cleanup.append(runner)
    await stop_and_check(runner, tmp_path / "sleeper", how)


@pytest.mark.parametrize("contained", [True, False], ids=["cgroup and limits", "limits, no cgroup"])
async def test_a_job_with_a_group_or_limits_starts_with_no_python_between_fork_and_exec(
    contained: bool, cleanup: list[ProcessRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``preexec_fn`` makes CPython fork the whole daemon instead of vforking: 96
    against 243 ``/bin/true`` jobs/s in the embedded daemon, each fork's page-table copy
    and the daemon's copy-on-write faults after it. The group is joined and the limits
    set behind the start gate instead, in every kind of daemon."""
    if contained and not SUPPORT.contained:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no cgroup here: {SUPPORT.reason}")
        pytest.skip(f"no cgroup here: {SUPPORT.reason}")
    loop = asyncio.get_running_loop()
    spawned: list[dict[str, object]] = []
    real = loop.subprocess_exec

    async def spy(*args: object, **kwargs: object) -> object:
        spawned.append(kwargs)
        return await real(*args, **kwargs)  # type: ignore[arg-type]  # passed on as given

    monkeypatch.setattr(loop, "subprocess_exec", spy)
    runner = ProcessRunner(cgroups=Cgroups(SUPPORT) if contained else None)
    cleanup.append(runner)
    job = CommandTarget(argv=("sh", "-c", "cat /proc/self/limits /proc/self/cgroup"), memory_limit=1 << 30)
    result = await runner.run(request(job), asyncio.Event())
    assert result.outcome is AttemptOutcome.SUCCEEDED, result.error
    assert [kwargs.get("preexec_fn") for kwargs in spawned] == [None]
    assert any(line.startswith("Max address space") and f"{1 << 30}" in line for line in result.output.splitlines())
    if contained:
        assert f"0::/clockd-{os.getpid()}/job-" in result.output


@needs_cgroups
async def test_the_gate_keeps_start_errors_limits_and_exit_codes(tmp_path: Path, cleanup: list[ProcessRunner]) -> None:
    runner = ProcessRunner(cgroups=Cgroups(SUPPORT))
    cleanup.append(runner)

    async def run(target: CommandTarget) -> tuple[AttemptOutcome, str | None, bool, str]:
        result = await runner.run(request(target), asyncio.Event())
        return result.outcome, result.error, result.permanent, result.output

    missing = await run(CommandTarget(argv=(str(tmp_path / "nope"),)))
    assert missing == (AttemptOutcome.ERROR, f"executable not found: {tmp_path / 'nope'}", True, "")
    assert (await run(CommandTarget(argv=("no-such-command-here",))))[:2] == (
        AttemptOutcome.ERROR,
        "executable not found: no-such-command-here",
    )
    script = tmp_path / "script"
    script.write_text("#!/no/such/interpreter\n")
    script.chmod(0o755)
    assert (await run(CommandTarget(argv=(str(script),))))[1] == f"cannot start {script}: interpreter not found"
    # The job's own 127 is the job's: FAILED with its exit code, not a start error.
    assert (await run(CommandTarget(argv=("sh", "-c", "echo own; exit 127"))))[:2] == (
        AttemptOutcome.FAILED,
        "exit code 127",
    )
    code = "print(open('/proc/self/limits').read()); print(open('/proc/self/cgroup').read())"
    outcome, _, _, output = await run(CommandTarget(argv=(PY, "-c", code), memory_limit=1 << 30, nproc_limit=4000))
    assert outcome is AttemptOutcome.SUCCEEDED
    limits = {line[:26].strip(): line[26:].split()[:2] for line in output.splitlines() if line.startswith("Max ")}
    assert limits["Max address space"] == [str(1 << 30)] * 2 and limits["Max processes"] == ["4000"] * 2
    assert f"0::/clockd-{os.getpid()}/job-" in output  # its first instruction ran in its group
    fed = await run(CommandTarget(argv=("cat",), stdin="to stdin\n"))
    assert fed[0] is AttemptOutcome.SUCCEEDED and fed[3] == "to stdin\n"
    if os.geteuid() == 0:  # as another user: the shell sets the limits on itself (no prlimit rights needed)
        job = CommandTarget(argv=("sh", "-c", "id -u; cat /proc/self/limits /proc/self/cgroup"), user="nobody",
                            nproc_limit=33, memory_limit=1 << 30)  # fmt: skip
        outcome, error, _, output = await run(job)
        assert outcome is AttemptOutcome.SUCCEEDED, error
        assert output.split()[0] == str(pwd.getpwnam("nobody").pw_uid)
        assert "Max processes             33                   33" in output
        assert f"0::/clockd-{os.getpid()}/job-" in output


@needs_cgroups
async def test_cpu_limit_is_one_budget_for_all_of_the_jobs_processes(cleanup: list[ProcessRunner]) -> None:
    """Four children burn 1.5 s of CPU each: under a per-process RLIMIT_CPU of 2 s every
    one would finish; the job's budget of 2 s for all of them together stops it."""
    burn = "import time\nwhile time.process_time() < 1.5: pass"
    code = f"import subprocess, sys; ps = [subprocess.Popen([sys.executable, '-c', {burn!r}]) for _ in range(4)]; " \
        "sys.exit(max(p.wait() for p in ps))"  # fmt: skip
    runner = ProcessRunner(cgroups=Cgroups(SUPPORT))
    cleanup.append(runner)
    job = CommandTarget(argv=(PY, "-c", code), cpu_limit=2)
    result = await runner.run(request(job, kill_grace=1.0), asyncio.Event())
    assert result.outcome is AttemptOutcome.FAILED, (result.outcome, result.error)
    assert result.error is not None and result.error.startswith("cpu_limit 2s reached: the job's processes used ")


DELEGATED_JOB = """
import asyncio, json, os, sys
from datetime import UTC, datetime
sys.path[:0] = [sys.argv[1]]
from clockd.core.model import CommandTarget
from clockd.runner import RunRequest
from clockd.runner.cgroups import Cgroups, detect
from clockd.runner.process import ProcessRunner

async def main():
    support = detect()
    runner = ProcessRunner(cgroups=Cgroups(support))
    job = CommandTarget(argv=(f"setsid -f sleep 3001; echo started; sleep 3001",), shell=True)
    request = RunRequest("occ-1", "delegated", datetime.now(UTC), 1, job, timeout=2.0, kill_grace=0.5)
    result = await runner.run(request, asyncio.Event())
    await runner.aclose()
    print(json.dumps({"uid": os.getuid(), "containment": support.describe(), "outcome": result.outcome.value}))

asyncio.run(main())
"""


@needs_root
@needs_cgroups
def test_an_unprivileged_daemon_in_a_delegated_subtree_contains_its_jobs(tmp_path: Path) -> None:
    """What ``Delegate=yes`` gives ``clockd.service`` (User=clockd): a v2 group whose
    directory, cgroup.procs, cgroup.subtree_control and cgroup.threads belong to the
    daemon's user. As ``nobody`` in such a group, a job's ``setsid -f`` sleeper must die
    at the timeout, and nothing may be left in the group afterwards."""
    import json
    import subprocess
    import tempfile

    from tests.harness.users import SYSTEM_PY, processes_of

    assert SUPPORT.v2 is not None and SYSTEM_PY is not None
    nobody = pwd.getpwnam("nobody")
    service = SUPPORT.v2 / f"trust-delegated-{os.getpid()}"
    service.mkdir()
    try:
        for path in (service, *(service / f for f in ("cgroup.procs", "cgroup.subtree_control", "cgroup.threads"))):
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        script = Path(tempfile.mkdtemp(prefix="clockd-delegated-")) / "daemon.py"  # nobody reads it
        script.parent.chmod(0o755)
        script.write_text(DELEGATED_JOB)
        script.chmod(0o644)
        root = str(Path(__file__).resolve().parents[2])
        procs = str(service / "cgroup.procs")
        # As root: join the delegated group, drop to nobody, then run the "daemon".
        enter = (
            f"import os; open({procs!r}, 'w').write(str(os.getpid())); os.setgroups([]); "
            f"os.setgid({nobody.pw_gid}); os.setuid({nobody.pw_uid}); "
            f"os.execv({SYSTEM_PY!r}, [{SYSTEM_PY!r}, {str(script)!r}, {root!r}])"
        )
        done = subprocess.run([SYSTEM_PY, "-c", enter], capture_output=True, text=True, timeout=60, cwd="/")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.splitlines()[-1])
        assert report["uid"] == nobody.pw_uid
        assert report["containment"].startswith(f"cgroup v2 at {service}")
        assert report["outcome"] == "timed_out"
        assert [p for p in processes_of(nobody.pw_uid) if "3001" in Path(f"/proc/{p}/cmdline").read_text()] == []
        assert sorted(p.name for p in service.iterdir() if p.is_dir()) == []  # job groups removed
    finally:
        for pid in (service / "cgroup.procs").read_text().split():
            os.kill(int(pid), 9)
        for child in sorted(service.rglob("*"), reverse=True):
            if child.is_dir():
                child.rmdir()
        service.rmdir()
        shutil.rmtree(script.parent, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the point is a root job, which RLIMIT_NPROC does not limit")
async def test_nproc_limit_on_a_root_job_without_a_pids_controller_is_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = ProcessRunner()  # no cgroups: RLIMIT_NPROC only, which root ignores
    with caplog.at_level("WARNING", logger="clockd.runner.process"):
        result = await runner.run(request(CommandTarget(argv=("true",), nproc_limit=5)), asyncio.Event())
    assert result.outcome is AttemptOutcome.SUCCEEDED
    [warning] = [r for r in caplog.records if getattr(r, "action", None) == "nproc_limit_ineffective"]
    assert warning.getMessage().startswith("nproc_limit 5 has no effect on this job: it runs as root")


@needs_cgroups
def test_a_daemon_start_kills_and_removes_what_a_killed_daemon_left(tmp_path: Path) -> None:
    """A SIGKILLed daemon never removes its ``clockd-<pid>`` groups, and its running jobs go
    on in them: their attempts cannot be recorded and are delivered again, so a job left
    running would run twice at once (it was kept "as nothing running is touched"). The
    next start kills them and removes the groups; a live daemon's groups are left alone."""
    import subprocess

    from clockd.wiring import sweep_stale_cgroups

    assert SUPPORT.v2 is not None
    gone = subprocess.Popen([PY, "-c", "pass"])
    gone.wait()
    stale = SUPPORT.v2 / f"clockd-{gone.pid}"
    for job in ("job-1", "job-2"):
        (stale / job).mkdir(parents=True)
    sleeper = subprocess.Popen([PY, "-c", "import time; time.sleep(3001)"])
    busy_parent = subprocess.Popen([PY, "-c", "pass"])
    busy_parent.wait()
    busy = SUPPORT.v2 / f"clockd-{busy_parent.pid}"
    (busy / "job-1").mkdir(parents=True)
    (busy / "job-1" / "cgroup.procs").write_text(str(sleeper.pid))
    alive = subprocess.Popen([PY, "-c", "import time; time.sleep(3001)"])  # a daemon that runs
    live = SUPPORT.v2 / f"clockd-{alive.pid}"  # its groups stay
    (live / "job-1").mkdir(parents=True)
    try:
        sweep_stale_cgroups()
        assert not stale.exists()
        assert sleeper.wait(timeout=10) == -9  # the dead daemon's job: killed

        def swept() -> bool:  # a group whose processes were still dying goes at a later sweep
            sweep_stale_cgroups()
            return not busy.exists()

        wait_until(swept, timeout=10, what="the dead daemon's groups removed")
        assert (live / "job-1").exists()
    finally:
        alive.kill()
        alive.wait()
        (live / "job-1").rmdir()
        live.rmdir()
        sleeper.kill()
        sleeper.wait()
        if busy.exists():
            wait_until(lambda: not (busy / "job-1" / "cgroup.procs").read_text().strip(), timeout=10, what="empty")
            (busy / "job-1").rmdir()
            busy.rmdir()
        if stale.exists():
            for group in stale.iterdir():
                group.rmdir()
            stale.rmdir()


@needs_cgroups
def test_a_running_daemon_kills_a_dead_daemons_job_before_it_starts_one() -> None:
    """The redelivery of a killed worker's run can come to another daemon on the same host
    that never restarts: it kills the orphan before it starts a job (at most every
    SWEEP_EVERY seconds), so attempt 2 never runs beside attempt 1."""
    import subprocess

    assert SUPPORT.v2 is not None
    gone = subprocess.Popen([PY, "-c", "pass"])
    gone.wait()
    orphan_group = SUPPORT.v2 / f"clockd-{gone.pid}" / "job-7"
    orphan_group.mkdir(parents=True)
    orphan = subprocess.Popen([PY, "-c", "import time; time.sleep(3001)"])
    (orphan_group / "cgroup.procs").write_text(str(orphan.pid))
    groups = Cgroups(SUPPORT)
    made = groups.create(None, None)
    try:
        assert orphan.wait(timeout=10) == -9
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
        if made is not None:
            made.remove()
        groups.close()

        def swept() -> bool:
            groups.sweep_stale()
            return not orphan_group.parent.exists()

        wait_until(swept, timeout=10, what="the dead daemon's group removed")
