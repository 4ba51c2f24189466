"""What a job can reach of the daemon (issue "Trust boundaries" 4): its environment,
and the secrets it references appearing in its stored output. Real processes."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from clockd.config import load_settings
from clockd.core.model import AttemptOutcome, CommandTarget
from clockd.errors import InvalidInput
from clockd.runner.process import ProcessRunner
from tests.unit.test_runner_process import request

PY = sys.executable
DUMP = "import json, os; print(json.dumps(dict(os.environ)))"
DAEMON_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "TZ": "Europe/Paris",
    "CLOCKD_STORE": "postgresql://postgres:hunter2-db@db/clockd",
    "CLOCKD_ETCD": "http://10.0.0.5:2379",
    "PGPASSWORD": "hunter2-pg",
    "AWS_SECRET_ACCESS_KEY": "aws-very-secret",
    "TEAM_SETTING": "blue",
}


async def dump(runner: ProcessRunner, *env: tuple[str, str]) -> dict[str, str]:
    result = await runner.run(request(CommandTarget(argv=(PY, "-c", DUMP), env=env)), asyncio.Event())
    assert result.outcome is AttemptOutcome.SUCCEEDED, result.error
    doc: dict[str, str] = json.loads(result.output)
    return doc


async def test_a_job_starts_from_a_minimal_environment_not_the_daemons() -> None:
    env = await dump(ProcessRunner(environ=DAEMON_ENV), ("MINE", "x"))
    assert {k: v for k, v in env.items() if not k.startswith("CLOCKD_")} == {
        "PATH": "/usr/bin:/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "TZ": "Europe/Paris",
        "MINE": "x",
    }
    assert sorted(k for k in env if k.startswith("CLOCKD_")) == [
        "CLOCKD_ATTEMPT", "CLOCKD_OCCURRENCE_ID", "CLOCKD_SCHEDULE", "CLOCKD_SCHEDULED_FOR",
    ]  # fmt: skip


async def test_passthrough_adds_listed_variables_but_never_the_store_etcd_or_pg_ones() -> None:
    env = await dump(ProcessRunner(environ=DAEMON_ENV, env_passthrough=("*",)))
    assert env["TEAM_SETTING"] == "blue" and env["AWS_SECRET_ACCESS_KEY"] == "aws-very-secret"
    for never in ("CLOCKD_STORE", "CLOCKD_ETCD", "PGPASSWORD"):
        assert never not in env
    prefixed = await dump(ProcessRunner(environ=DAEMON_ENV, env_passthrough=("TEAM_*", "PG*")))
    assert prefixed["TEAM_SETTING"] == "blue"
    assert "PGPASSWORD" not in prefixed and "AWS_SECRET_ACCESS_KEY" not in prefixed


def test_job_env_passthrough_is_a_config_key_checked_for_names(tmp_path: Path) -> None:
    config = tmp_path / "clockd.yaml"
    config.write_text("job_env_passthrough: [TEAM_*, LC_ALL]\n")
    assert load_settings(config_path=str(config), env={}).job_env_passthrough == ("TEAM_*", "LC_ALL")
    config.write_text("job_env_passthrough: ['A=B']\n")
    with pytest.raises(InvalidInput, match="job_env_passthrough: 'A=B' is not a variable name"):
        load_settings(config_path=str(config), env={})


async def test_a_referenced_secret_is_masked_in_the_jobs_stored_output(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("s3cr3t-file-value\n")
    code = "import os; print('token is', os.environ['T'], 'and', os.environ['E'])"
    target = CommandTarget(
        argv=(PY, "-c", code), env=(("T", f"${{file:{secret}}}"), ("E", "${env:AWS_SECRET_ACCESS_KEY}"))
    )
    result = await ProcessRunner(environ=DAEMON_ENV).run(request(target), asyncio.Event())
    assert result.outcome is AttemptOutcome.SUCCEEDED, result.error
    assert result.output == "token is *** and ***\n"


def test_a_restricted_reader_cannot_tell_a_missing_root_only_file_from_a_forbidden_one(tmp_path: Path) -> None:
    from clockd.runner.secrets import Reader, Resolver, SecretError

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "exists").write_text("root-only\n")
    tmp_path.chmod(0o755)
    stranger = Reader(uid=54321, gids=frozenset({54321}), name="stranger", environ=False)
    messages = []
    for path in (private / "exists", private / "absent", tmp_path / "absent", Path("/proc/1/environ")):
        with pytest.raises(SecretError) as err:
            Resolver(stranger).resolve(f"${{file:{path}}}")
        messages.append(err.value.message.replace(str(path), "PATH"))
    assert set(messages) == {"secret ${file:PATH} cannot be read: permission denied for user 'stranger'"}
