"""ProcessRunner against real processes.

Nothing here sleeps to wait for an event: the tests wait on conditions (a file
appears, a pid is gone) with deadlines. ``sleep`` inside a job is only there to
keep the job running.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tracemalloc
from datetime import UTC, datetime, timedelta, timezone
from functools import partial
from pathlib import Path

import pytest

from clockd.core.model import AttemptOutcome, CommandTarget, NoopTarget, Target
from clockd.runner import RunRequest, RunResult
from clockd.runner.process import ProcessRunner
from tests.harness import until

PY = sys.executable
SCHEDULED_FOR = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)


def request(
    target: Target,
    *,
    scheduled_for: datetime = SCHEDULED_FOR,
    timeout: float | None = None,
    kill_grace: float = 10.0,
    output_limit: int = 64 * 1024,
) -> RunRequest:
    return RunRequest(
        occurrence_id="occ-1",
        schedule_name="nightly-backup",
        scheduled_for=scheduled_for,
        attempt=2,
        target=target,
        timeout=timeout,
        kill_grace=kill_grace,
        output_limit=output_limit,
    )


def py(code: str, *args: str, env: tuple[tuple[str, str], ...] = (), cwd: str | None = None) -> CommandTarget:
    return CommandTarget(argv=(PY, "-c", code, *args), env=env, cwd=cwd)


def sh(script: str) -> CommandTarget:
    return CommandTarget(argv=(script,), shell=True)


async def run(
    target: Target,
    stop: asyncio.Event | None = None,
    *,
    runner: ProcessRunner | None = None,
    scheduled_for: datetime = SCHEDULED_FOR,
    job_timeout: float | None = None,
    kill_grace: float = 10.0,
    output_limit: int = 64 * 1024,
) -> RunResult:
    req = request(
        target,
        scheduled_for=scheduled_for,
        timeout=job_timeout,
        kill_grace=kill_grace,
        output_limit=output_limit,
    )
    return await (runner or ProcessRunner()).run(req, stop or asyncio.Event())


def alive(pid: int) -> bool:
    """True while ``pid`` runs. A zombie (exited, not yet reaped by its parent) is dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- outcomes ------------------------------------------------------------------


async def test_success_captures_stdout_and_stderr_combined() -> None:
    result = await run(py("import sys; print('to out', flush=True); print('to err', file=sys.stderr)"))
    assert result.outcome is AttemptOutcome.SUCCEEDED
    assert result.exit_code == 0
    assert result.signal is None
    assert result.error is None
    assert result.output == "to out\nto err\n"
    assert not result.permanent
    assert 0 < result.duration < 5


async def test_job_sees_clockd_variables_target_env_and_daemon_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FROM_DAEMON", "d")
    monkeypatch.setenv("OVERRIDDEN", "daemon")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    target = py(
        code,
        env=(("OVERRIDDEN", "target"), ("GREETING", "a b; c"), ("CLOCKD_ATTEMPT", "spoofed")),
    )
    paris = timezone(timedelta(hours=2))
    # The daemon's variables reach a job only when job_env_passthrough lists them.
    runner = ProcessRunner(env_passthrough=("FROM_DAEMON", "OVERRIDDEN"))
    result = await run(target, runner=runner, scheduled_for=datetime(2026, 3, 29, 3, 30, 15, tzinfo=paris))
    env = json.loads(result.output)
    assert env["CLOCKD_OCCURRENCE_ID"] == "occ-1"
    assert env["CLOCKD_SCHEDULE"] == "nightly-backup"
    assert env["CLOCKD_SCHEDULED_FOR"] == "2026-03-29T01:30:15Z"
    assert env["CLOCKD_ATTEMPT"] == "2"  # ours win over the target's
    assert env["GREETING"] == "a b; c"
    assert env["OVERRIDDEN"] == "target"
    assert env["FROM_DAEMON"] == "d"


async def test_non_zero_exit_fails_with_the_code() -> None:
    result = await run(py("import sys; print('bad'); sys.exit(3)"))
    assert result.outcome is AttemptOutcome.FAILED
    assert result.exit_code == 3
    assert result.signal is None
    assert result.error == "exit code 3"
    assert result.output == "bad\n"
    assert not result.permanent


async def test_killed_by_a_signal_fails_with_the_signal() -> None:
    result = await run(py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert result.outcome is AttemptOutcome.FAILED
    assert result.exit_code is None
    assert result.signal == signal.SIGKILL
    assert result.error == "killed by SIGKILL"


async def test_argv_is_never_re_split() -> None:
    args = ("two words; echo injected", "$HOME", "*", "")
    result = await run(py("import sys; print(sys.argv[1:])", *args))
    assert result.outcome is AttemptOutcome.SUCCEEDED
    assert result.output == f"{list(args)}\n"


async def test_shell_runs_a_pipeline() -> None:
    result = await run(sh('echo hello world | tr a-z A-Z; echo "$CLOCKD_SCHEDULE"'))
    assert result.outcome is AttemptOutcome.SUCCEEDED
    assert result.output == "HELLO WORLD\nnightly-backup\n"


async def test_shell_passes_further_items_as_positional_parameters() -> None:
    target = CommandTarget(argv=('echo "$0|$1"', "zero", "one two"), shell=True)
    result = await run(target)
    assert result.output == "zero|one two\n"


async def test_cwd_is_the_targets(tmp_path: Path) -> None:
    result = await run(py("import os; print(os.getcwd())", cwd=str(tmp_path)))
    assert result.output == f"{tmp_path}\n"


async def test_noop_succeeds_without_a_process() -> None:
    result = await run(NoopTarget())
    assert result == RunResult(AttemptOutcome.SUCCEEDED)


# -- could not start -----------------------------------------------------------


async def test_missing_executable_is_a_permanent_error() -> None:
    result = await run(CommandTarget(argv=("/no/such/bin", "x")))
    assert result.outcome is AttemptOutcome.ERROR
    assert result.permanent
    assert result.error == "executable not found: /no/such/bin"
    assert result.exit_code is None
    assert result.duration < 1


async def test_executable_not_on_path_is_a_permanent_error() -> None:
    result = await run(CommandTarget(argv=("clockd-no-such-command-anywhere",)))
    assert result.outcome is AttemptOutcome.ERROR
    assert result.permanent
    assert result.error == "executable not found: clockd-no-such-command-anywhere"


async def test_not_executable_is_permission_denied(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    result = await run(CommandTarget(argv=(str(script),)))
    assert result.outcome is AttemptOutcome.ERROR
    assert result.permanent
    assert result.error == f"cannot start {script}: permission denied"


async def test_missing_interpreter_is_named(tmp_path: Path) -> None:
    script = tmp_path / "job"
    script.write_text("#!/no/such/interpreter\n")
    script.chmod(0o755)
    result = await run(CommandTarget(argv=(str(script),)))
    assert result.outcome is AttemptOutcome.ERROR
    assert result.error == f"cannot start {script}: interpreter not found"


async def test_missing_cwd_is_a_permanent_error(tmp_path: Path) -> None:
    nope = str(tmp_path / "nope")
    result = await run(py("print('never')", cwd=nope))
    assert result.outcome is AttemptOutcome.ERROR
    assert result.permanent
    assert result.error == f"working directory does not exist: {nope}"
    assert result.output == ""


async def test_bad_argument_is_an_error_not_an_exception() -> None:
    result = await run(CommandTarget(argv=("echo", "nul\0byte")))
    assert result.outcome is AttemptOutcome.ERROR
    assert result.permanent
    assert result.error is not None and result.error.startswith("cannot start echo:")


async def test_empty_argv_is_an_error() -> None:
    result = await run(CommandTarget(argv=()))
    assert result.outcome is AttemptOutcome.ERROR
    assert result.permanent


# -- timeout, stop, cancel -----------------------------------------------------


async def test_timeout_kills_the_process_group_including_a_grandchild(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    script = f"sleep 100 & echo $! > {pidfile}; echo started; wait"
    # A timeout long enough for sh to start, write the pidfile and echo on a loaded machine.
    result = await run(sh(script), job_timeout=2.0, kill_grace=2.0)
    assert result.outcome is AttemptOutcome.TIMED_OUT
    assert result.error == "timed out after 2s"
    assert result.signal == signal.SIGTERM  # went on TERM: no need to wait out the grace
    assert result.output == "started\n"
    assert 2.0 <= result.duration < 4.0
    grandchild = int(pidfile.read_text())
    await until(within=5.0, predicate=lambda: not alive(grandchild), what="grandchild gone")


async def test_group_members_ignoring_sigterm_get_sigkill_after_the_grace(tmp_path: Path) -> None:
    pidfile = tmp_path / "stubborn.pid"
    script = f"(trap '' TERM; exec sleep 100) & echo $! > {pidfile}; wait"
    result = await run(sh(script), job_timeout=2.0, kill_grace=0.5)  # time to set the trap
    assert result.outcome is AttemptOutcome.TIMED_OUT
    assert result.duration >= 2.0 + 0.5
    stubborn = int(pidfile.read_text())
    await until(within=5.0, predicate=lambda: not alive(stubborn), what="TERM-ignoring grandchild gone")


async def test_timeout_does_not_hang_on_a_pipe_held_outside_the_group() -> None:
    # The grandchild leaves the group (setsid) with our stdout: it survives the kill.
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen(['sleep', '100'], start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(100)\n"
    )
    # Time for an interpreter to start and print under load; then it hangs on purpose.
    result = await run(py(code), runner=ProcessRunner(drain_timeout=0.2), job_timeout=3.0)
    escaped = int(result.output.split()[0])
    try:
        assert result.outcome is AttemptOutcome.TIMED_OUT
        assert result.duration < 6
    finally:
        kill_quietly(escaped)


async def test_background_leftover_does_not_hold_up_a_finished_job() -> None:
    result = await run(sh("sleep 100 & echo $!"), runner=ProcessRunner(drain_timeout=0.2))
    leftover = int(result.output.split()[0])
    try:
        assert result.outcome is AttemptOutcome.SUCCEEDED
        assert result.duration < 3
    finally:
        kill_quietly(leftover)


async def test_stop_terminates_the_job_and_reports_stopped(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    code = (
        f"import pathlib, time\nprint('working', flush=True)\npathlib.Path({str(ready)!r}).touch()\ntime.sleep(100)\n"
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run(py(code), stop, kill_grace=2.0))
    await until(within=5.0, predicate=ready.exists, what="job started")
    stop.set()
    result = await asyncio.wait_for(task, 5)
    assert result.outcome is AttemptOutcome.STOPPED
    assert result.signal == signal.SIGTERM
    assert result.output == "working\n"
    assert result.duration < 3


async def test_stop_already_set_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    stop = asyncio.Event()
    stop.set()
    result = await run(sh(f"touch {marker}"), stop)
    assert result.outcome is AttemptOutcome.STOPPED
    assert not marker.exists()


async def test_cancelling_run_kills_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    task = asyncio.create_task(run(sh(f"sleep 100 & echo $! > {pidfile}; wait")))
    await until(within=5.0, predicate=lambda: pidfile.exists() and pidfile.read_text().strip() != "", what="pidfile")
    grandchild = int(pidfile.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(within=5.0, predicate=lambda: not alive(grandchild), what="grandchild gone")


async def test_cancelling_while_starting_leaves_nothing_behind() -> None:
    for steps in range(10):
        token = f"100.{steps}{os.getpid()}"  # a unique, valid sleep duration
        task = asyncio.create_task(run(sh(f"sleep {token} & wait")))
        for _ in range(steps):  # let the start get this many loop iterations in
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(partial(nothing_runs_with, token), within=5.0, what=f"no process left (cancelled at step {steps})")


def nothing_runs_with(token: str) -> bool:
    """No process's command line mentions ``token`` (a zombie's is empty)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    return False
            except OSError:
                continue  # exited meanwhile
    return True


# -- output --------------------------------------------------------------------


async def test_flood_keeps_only_the_tail_in_bounded_memory() -> None:
    size = 50 * 1024 * 1024
    code = (
        "import sys\n"
        "chunk = b'x' * (1024 * 1024)\n"
        f"for _ in range({size} // len(chunk)): sys.stdout.buffer.write(chunk)\n"
        "sys.stdout.buffer.write(b'END\\n')\n"
    )
    limit = 4096
    tracemalloc.start()
    try:
        result = await run(py(code), output_limit=limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.outcome is AttemptOutcome.SUCCEEDED
    marker = f"[clockd: {size + 4 - limit} earlier bytes dropped]\n"
    assert result.output == marker + "x" * (limit - 4) + "END\n"
    assert peak < 8 * 1024 * 1024  # the pipe is read in chunks; 50 MB never piles up


async def test_truncation_inside_a_character_drops_the_partial_character() -> None:
    code = "import sys; sys.stdout.write('é' * 1000)"  # 2000 bytes
    result = await run(py(code, env=(("PYTHONIOENCODING", "utf-8"),)), output_limit=101)
    assert result.output == "[clockd: 1900 earlier bytes dropped]\n" + "é" * 50


async def test_invalid_utf8_is_replaced() -> None:
    result = await run(py("import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe end')"))
    assert result.output == "ok \ufffd\ufffd end"


async def test_many_short_jobs_run_concurrently() -> None:
    runner = ProcessRunner()
    results = await asyncio.gather(*(run(sh(f"echo {i}"), runner=runner) for i in range(50)))
    assert [r.output for r in results] == [f"{i}\n" for i in range(50)]
    assert all(r.outcome is AttemptOutcome.SUCCEEDED for r in results)
