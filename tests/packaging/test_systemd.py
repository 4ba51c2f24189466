"""The shipped systemd units: valid for systemd, and every flag they pass exists."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "systemd"
CLOCKD = Path(sys.executable).parent / "clockd"
VERIFIED = ("clockd.service", "clockd-system.service", "clockd.target", "clockd@worker.service")


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case
    parser.read(path)
    return parser


def _installed(tmp_path: Path) -> Path:
    dest = tmp_path / "units"
    subprocess.run(
        ["make", "-s", "install-systemd", f"DESTDIR={dest}", "PREFIX=/p", f"BINDIR={CLOCKD.parent}"],
        cwd=ROOT,
        check=True,
    )
    return dest / "p" / "lib" / "systemd" / "system"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    unitdir = _installed(tmp_path)
    (unitdir / "clockd@worker.service").write_text((unitdir / "clockd@.service").read_text())
    env = {**os.environ, "SYSTEMD_LOG_LEVEL": "warning"}
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *VERIFIED],
        cwd=unitdir,
        env=env,
        capture_output=True,
        text=True,
    )
    problems = [line for line in (result.stdout + result.stderr).splitlines() if line.strip() and "clockd" in line]
    assert result.returncode == 0 and problems == [], problems


@pytest.mark.parametrize("unit", ["clockd.service", "clockd-system.service", "clockd@.service"])
def test_execstart_flags_exist(unit: str) -> None:
    exec_start = _unit(UNITS / unit)["Service"]["ExecStart"]
    argv = shlex.split(exec_start.replace("%i", "worker"))
    assert argv[0].endswith("/clockd")
    result = subprocess.run([str(CLOCKD), *argv[1:], "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    help_text = result.stdout
    for arg in argv[2:]:
        if arg.startswith("--"):
            assert arg.split("=")[0] in help_text, f"{unit}: {arg} is not a clockd flag"


def test_stop_timeout_covers_the_drain_grace() -> None:
    from clockd.config import Settings

    settings = Settings()
    for unit in ("clockd.service", "clockd@.service"):
        service = _unit(UNITS / unit)["Service"]
        assert service["Type"] == "notify" and service["KillMode"] == "mixed"
        stop = int(service["TimeoutStopSec"].rstrip("s"))
        assert stop > (settings.drain_grace + settings.kill_grace).total_seconds(), unit
        for hardening in ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp"):
            assert hardening in service, f"{unit} lacks {hardening}"


def test_the_system_unit_can_replace_cron() -> None:
    """clockd-system.service runs the worker as root (so ``user:`` jobs of an imported
    system crontab run as their users) without the sandbox that would break cron jobs;
    the hardened clockd.service stays as it is, and the two exclude each other."""
    from clockd.config import Settings

    settings = Settings()
    system = _unit(UNITS / "clockd-system.service")
    service = system["Service"]
    assert service["User"] == "root"
    assert service["Type"] == "notify" and service["KillMode"] == "mixed"
    assert int(service["TimeoutStopSec"].rstrip("s")) > (settings.drain_grace + settings.kill_grace).total_seconds()
    for sandbox in ("PrivateTmp", "ProtectSystem", "ProtectHome", "PrivateDevices", "NoNewPrivileges"):
        assert sandbox not in service, f"{sandbox} would break cron jobs (host /tmp, /var/log, setuid)"
    assert service["Environment"] == "CLOCKD_HOME=/var/lib/clockd" and service["StateDirectoryMode"] == "0700"
    assert "clockd.service" in system["Unit"]["Conflicts"]
    hardened = _unit(UNITS / "clockd.service")["Service"]
    assert hardened["User"] == "clockd" and hardened["PrivateTmp"] == "yes" and hardened["ProtectSystem"] == "strict"
    # The default allowed_users lets the default tenant run jobs as root and as anyone else.
    assert {"*", "root"} <= set(settings.allowed_users["default"])


@pytest.mark.parametrize("unit", ["clockd.service", "clockd-system.service", "clockd@.service"])
def test_units_delegate_their_cgroup_so_jobs_are_contained(unit: str) -> None:
    """Each job runs in its own cgroup below the unit's (clockd.runner.cgroups): the unit
    must hand its cgroup to clockd (Delegate=yes) and must not mount /sys/fs/cgroup
    read-only (ProtectControlGroups=yes), or jobs fall back to the process-group kill.
    What a delegated subtree then gives an unprivileged clockd is exercised for real by
    tests/unit/test_runner_cgroups.py (an unprivileged daemon in a delegated subtree)."""
    service = _unit(UNITS / unit)["Service"]
    assert service.get("Delegate") == "yes", f"{unit}: Delegate=yes is missing"
    assert service.get("ProtectControlGroups", "no") == "no", f"{unit}: ProtectControlGroups blocks delegation"
