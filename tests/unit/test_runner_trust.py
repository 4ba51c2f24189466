"""ProcessRunner as a shared service: run as a user, allowed_users, secrets, resource limits.

Run-as-user tests create throwaway system users and need root (CI runs as root);
elsewhere they skip saying so. Nothing sleeps to wait: conditions are polled
with deadlines.
"""

from __future__ import annotations

import asyncio
import grp
import json
import os
import pwd
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict, Unpack

import pytest

from clockd.core.model import AttemptOutcome, CommandTarget
from clockd.core.sizes import format_size, parse_size
from clockd.errors import InvalidInput
from clockd.runner import RunRequest, RunResult
from clockd.runner import identity as ids
from clockd.runner.identity import UserPolicy
from clockd.runner.limits import rlimits
from clockd.runner.process import USER_PATH, ProcessRunner
from tests.harness.users import SYSTEM_PY, processes_of, require_root, shared_dir, throwaway_users

PY = sys.executable
SCHEDULED_FOR = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
DUMP = (
    "import json, os; print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'groups': sorted(os.getgroups()), "
    "'env': dict(os.environ), 'cwd': os.getcwd()}))"
)


class RequestLimits(TypedDict, total=False):
    """The ``RunRequest`` fields a test may set besides the target, tenant and timeout."""

    kill_grace: float
    output_limit: int


def request(
    target: CommandTarget, *, tenant: str = "default", timeout: float | None = None, **kw: Unpack[RequestLimits]
) -> RunRequest:
    return RunRequest(
        occurrence_id="occ-1",
        schedule_name="trust",
        scheduled_for=SCHEDULED_FOR,
        attempt=1,
        target=target,
        timeout=timeout,
        tenant=tenant,
        **kw,
    )


async def run(
    target: CommandTarget,
    runner: ProcessRunner | None = None,
    *,
    tenant: str = "default",
    job_timeout: float | None = None,
    **kw: Unpack[RequestLimits],
) -> RunResult:
    req = request(target, tenant=tenant, timeout=job_timeout, **kw)
    return await (runner or ProcessRunner()).run(req, asyncio.Event())


@pytest.fixture(scope="module")
def users() -> Iterator[list[pwd.struct_passwd]]:
    with throwaway_users(2) as made:
        # t1 also belongs to t2's group: a supplementary group the job must get.
        subprocess.run(["usermod", "-aG", grp.getgrgid(made[1].pw_gid).gr_name, made[0].pw_name], check=True)
        yield made


@pytest.fixture
def shared() -> Iterator[Path]:
    with shared_dir() as path:
        yield path


# -- run as a user -------------------------------------------------------------------


async def test_job_runs_with_the_users_ids_groups_home_and_a_clean_environment(
    users: list[pwd.struct_passwd],
) -> None:
    assert SYSTEM_PY is not None
    t1, t2 = users
    runner = ProcessRunner(environ={"DAEMON_SECRET": "leak", "PATH": "/daemon/bin"})
    target = CommandTarget(argv=(SYSTEM_PY, "-c", DUMP), user=t1.pw_name, env=(("GREETING", "hi"),))
    result = await run(target, runner)
    assert result.outcome is AttemptOutcome.SUCCEEDED, result
    seen = json.loads(result.output)
    assert seen["uid"] == t1.pw_uid
    assert seen["gid"] == t1.pw_gid
    assert set(seen["groups"]) == set(os.getgrouplist(t1.pw_name, t1.pw_gid))
    assert t2.pw_gid in seen["groups"]
    env = seen["env"]
    assert env.pop("HOME") == t1.pw_dir
    assert env.pop("USER") == env.pop("LOGNAME") == t1.pw_name
    assert env.pop("SHELL") == "/bin/sh"
    assert env.pop("PATH") == USER_PATH
    assert env.pop("GREETING") == "hi"
    for key in ("CLOCKD_OCCURRENCE_ID", "CLOCKD_SCHEDULE", "CLOCKD_SCHEDULED_FOR", "CLOCKD_ATTEMPT"):
        env.pop(key)
    env.pop("LC_CTYPE", None)  # Python may coerce the C locale (PEP 538) in the child itself
    assert env == {}, "nothing of the daemon's environment may leak into a user's job"
    # --no-create-home: the home does not exist, so the job starts in /.
    assert seen["cwd"] == "/"


async def test_group_option_sets_the_primary_group(users: list[pwd.struct_passwd]) -> None:
    assert SYSTEM_PY is not None
    t1, t2 = users
    group = grp.getgrgid(t2.pw_gid).gr_name
    result = await run(CommandTarget(argv=(SYSTEM_PY, "-c", DUMP), user=t1.pw_name, group=group))
    assert result.outcome is AttemptOutcome.SUCCEEDED, result
    seen = json.loads(result.output)
    assert (seen["uid"], seen["gid"]) == (t1.pw_uid, t2.pw_gid)


async def test_a_worker_that_is_not_root_refuses_user_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    other = "nobody" if pwd.getpwuid(os.geteuid()).pw_name != "nobody" else "root"
    if os.geteuid() == 0:  # pretend: the refusal must not depend on how the tests run
        monkeypatch.setattr(os, "geteuid", lambda: 4242)  # the os module identity calls
    result = await run(CommandTarget(argv=("true",), user=other))
    assert result.outcome is AttemptOutcome.ERROR
    assert result.permanent
    assert result.error == f"cannot run as user {other!r}: clockd worker is not root"


async def test_unknown_user_or_group_on_the_worker_is_a_permanent_error() -> None:
    result = await run(CommandTarget(argv=("true",), user="clockd-no-such-user"))
    assert (result.outcome, result.permanent) == (AttemptOutcome.ERROR, True)
    assert result.error == "cannot run as user 'clockd-no-such-user': no such user on this worker"
    me = pwd.getpwuid(os.geteuid()).pw_name
    result = await run(CommandTarget(argv=("true",), user=me, group="clockd-no-such-group"))
    assert result.error == "cannot run as group 'clockd-no-such-group': no such group on this worker"


async def test_allowed_users_decides_per_tenant() -> None:
    me = ids.worker_identity()
    policy = UserPolicy({"default": ["*"], "team-a": [me.name]})
    runner = ProcessRunner(policy=policy)
    # The worker's own user, by name, for team-a; unlisted tenants may run nothing.
    assert (await run(CommandTarget(argv=("true",)), runner, tenant="team-a")).outcome is AttemptOutcome.SUCCEEDED
    refused = await run(CommandTarget(argv=("true",)), runner, tenant="team-b")
    assert refused.outcome is AttemptOutcome.ERROR and refused.permanent
    assert refused.error == f"tenant 'team-b' may not run jobs as user {me.name!r} (allowed_users in the daemon config)"
    # "*" never includes root: root must be listed by name.
    root_job = await run(CommandTarget(argv=("true",), user="root"), runner)
    assert root_job.error == "tenant 'default' may not run jobs as user 'root' (allowed_users in the daemon config)"
    assert UserPolicy({"*": ["root"]}).allows("anyone", ids.Identity("root", 0, 0, (), "/root", "/bin/sh", False))
    assert not UserPolicy({"*": ["*"]}).allows("anyone", ids.Identity("toor", 0, 0, (), "/", "/bin/sh", True))


async def test_default_policy_keeps_userless_jobs_working_for_the_default_tenant_only() -> None:
    ok = await run(CommandTarget(argv=("true",)))
    assert ok.outcome is AttemptOutcome.SUCCEEDED
    other = await run(CommandTarget(argv=("true",)), tenant="team-a")
    assert other.outcome is AttemptOutcome.ERROR and other.permanent


# -- secrets -------------------------------------------------------------------------


async def test_secrets_reach_the_job_and_nothing_else(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("file-secret-1234\n")
    env_file = tmp_path / "job.env"
    env_file.write_text("# comment\nFROM_FILE=fileval\nexport OVERRIDE='from-file'\n")
    runner = ProcessRunner(environ={"DAEMON_TOKEN": "env-secret-5678", "PATH": os.environ["PATH"]})
    code = (
        "import os, sys; e = os.environ; "
        "ok = (e['A'], e['B'], e['C'], e['FROM_FILE'], e['OVERRIDE']) == "
        "('file-secret-1234', 'env-secret-5678', 'x-file-secret-1234-${HOME}-${y}', 'fileval', 'target'); "
        "print('match' if ok else 'mismatch'); sys.exit(0 if ok else 1)"
    )
    target = CommandTarget(
        argv=(PY, "-c", code),
        env=(
            ("A", f"${{file:{token}}}"),
            ("B", "${env:DAEMON_TOKEN}"),
            ("C", f"x-${{file:{token}}}-$${{HOME}}-${{y}}"),
            ("OVERRIDE", "target"),
        ),
        env_from_file=str(env_file),
    )
    result = await run(target, runner)
    assert (result.outcome, result.output) == (AttemptOutcome.SUCCEEDED, "match\n")


async def test_an_unreadable_secret_fails_permanently_naming_only_the_reference(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    result = await run(CommandTarget(argv=("true",), env=(("T", f"${{file:{missing}}}"),)))
    assert (result.outcome, result.permanent) == (AttemptOutcome.ERROR, True)
    assert result.error == f"secret ${{file:{missing}}} cannot be read: No such file or directory"
    result = await run(
        CommandTarget(argv=("true",), env=(("T", "${env:CLOCKD_TEST_NOT_SET}"),)), ProcessRunner(environ={})
    )
    assert (
        result.error == "secret ${env:CLOCKD_TEST_NOT_SET} cannot be read: the daemon has no such environment variable"
    )


async def test_other_tenants_read_secret_files_as_the_jobs_user(users: list[pwd.struct_passwd], shared: Path) -> None:
    t1, _ = users
    secret = shared / "root-only"
    secret.write_text("root-only-secret\n")
    secret.chmod(0o600)
    runner = ProcessRunner(policy=UserPolicy({"default": ["*", "root"], "team": [t1.pw_name]}))
    target = CommandTarget(argv=("true",), user=t1.pw_name, env=(("S", f"${{file:{secret}}}"),))
    # The default tenant may act as the (root) worker: the worker reads the file for it.
    assert (await run(target, runner)).outcome is AttemptOutcome.SUCCEEDED
    # team may only be t1, so the file must be readable by t1.
    refused = await run(target, runner, tenant="team")
    assert refused.outcome is AttemptOutcome.ERROR and refused.permanent
    assert refused.error == f"secret ${{file:{secret}}} cannot be read: permission denied for user {t1.pw_name!r}"
    os.chown(secret, t1.pw_uid, -1)
    assert (await run(target, runner, tenant="team")).outcome is AttemptOutcome.SUCCEEDED
    # …and may not read the daemon's environment.
    env_ref = CommandTarget(argv=("true",), user=t1.pw_name, env=(("S", "${env:PATH}"),))
    refused = await run(env_ref, runner, tenant="team")
    assert refused.error is not None and "only tenants allowed to run jobs as the daemon's own user" in refused.error


# -- resource limits -----------------------------------------------------------------


def test_sizes() -> None:
    assert parse_size("512M") == 512 << 20
    assert parse_size("1GiB") == parse_size("1g") == 1 << 30
    assert parse_size("4096") == 4096
    assert format_size(512 << 20) == "512M"
    assert format_size(1536) == "1536"
    for bad in ("", "12X", "-1M", "1.5G", "M"):
        with pytest.raises(InvalidInput):
            parse_size(bad)


def test_limits_never_exceed_the_workers_hard_limits() -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    for res, soft, hard_set in rlimits(64 << 20, 5, 10**12):
        assert soft <= hard_set
        if res == resource.RLIMIT_NPROC and hard != resource.RLIM_INFINITY:
            assert hard_set <= hard


async def test_a_job_over_its_memory_limit_is_contained_and_recorded() -> None:
    code = "x = bytearray(1 << 30); print('allocated 1 GiB')"
    result = await run(CommandTarget(argv=(PY, "-c", code), memory_limit=256 << 20))
    assert result.outcome is AttemptOutcome.FAILED
    assert "MemoryError" in result.output and "allocated" not in result.output
    assert result.error == "exit code 1 (runs under memory_limit 256M)"


async def test_a_job_over_its_cpu_limit_is_killed_with_a_reason() -> None:
    result = await run(CommandTarget(argv=(PY, "-c", "while True: pass"), cpu_limit=1), job_timeout=30)
    assert result.outcome is AttemptOutcome.FAILED
    assert result.error == "killed by SIGXCPU (cpu_limit 1s reached)"
    assert result.duration < 20


async def test_a_fork_bomb_as_an_unprivileged_user_is_contained(users: list[pwd.struct_passwd]) -> None:
    t1, _ = users
    limit = 25
    runner = ProcessRunner(drain_timeout=0.5)
    assert SYSTEM_PY is not None
    # Every process forks forever, retrying when the kernel says no: it never dies out.
    code = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)"
    bomb = CommandTarget(argv=(SYSTEM_PY, "-c", code), user=t1.pw_name, nproc_limit=limit)
    neighbour = CommandTarget(argv=("echo", "still served"))
    stop = asyncio.Event()
    bomb_run = asyncio.create_task(runner.run(request(bomb, timeout=3.0, kill_grace=1.0), stop))
    peak, served = 0, False
    while not bomb_run.done():
        peak = max(peak, len(processes_of(t1.pw_uid)))
        if peak >= limit // 2 and not served:
            # The worker keeps serving other jobs while the bomb runs.
            other = await asyncio.wait_for(runner.run(request(neighbour), asyncio.Event()), 10)
            assert (other.outcome, other.output) == (AttemptOutcome.SUCCEEDED, "still served\n")
            served = True
        await asyncio.sleep(0.02)
    result = await bomb_run
    assert result.outcome is AttemptOutcome.TIMED_OUT, result
    assert limit // 2 <= peak <= limit, peak
    assert served
    deadline = time.monotonic() + 10
    while processes_of(t1.pw_uid):
        assert time.monotonic() < deadline, f"fork bomb survived: {processes_of(t1.pw_uid)}"
        await asyncio.sleep(0.05)


async def test_nproc_limit_does_not_bind_root() -> None:
    require_root()
    result = await run(CommandTarget(argv=("sh", "-c", "true & true & wait"), nproc_limit=1))
    assert result.outcome is AttemptOutcome.SUCCEEDED


async def test_an_output_flood_is_capped_and_others_are_served_meanwhile() -> None:
    runner = ProcessRunner()
    flood = CommandTarget(
        argv=(PY, "-c", "import sys\nfor _ in range(400): sys.stdout.write('x' * 65536)\nprint('END')")
    )
    quick = CommandTarget(argv=("echo", "quick"))
    started = time.monotonic()
    flood_task = asyncio.create_task(runner.run(request(flood, output_limit=4096), asyncio.Event()))
    quick_result = await runner.run(request(quick), asyncio.Event())
    assert quick_result.output == "quick\n"
    result = await flood_task
    assert result.outcome is AttemptOutcome.SUCCEEDED
    header, _, tail = result.output.partition("\n")
    assert header.startswith("[clockd: ") and header.endswith(" earlier bytes dropped]")
    assert len(tail.encode()) <= 4096 and tail.endswith("END\n")
    assert time.monotonic() - started < 30
