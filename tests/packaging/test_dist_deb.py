"""The .deb (``make deb``): its files and conffiles, and its units, CLI and man page
working from the package's paths in a throwaway root (never installed on this machine)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from clockd import __version__
from tests.packaging.artefacts import Artefacts, built, clean_env

pytestmark = pytest.mark.timeout(1800)  # the first test may build the artefacts

UNITS = "usr/lib/systemd/system"


@pytest.fixture(scope="module")
def art() -> Artefacts:
    return built()


@pytest.fixture(scope="module")
def root(art: Artefacts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("debroot")
    subprocess.run(["dpkg-deb", "-x", str(art.deb), str(path)], check=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _field(art: Artefacts, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(art.deb), name], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_file_list_conffiles_and_control(art: Artefacts) -> None:
    assert art.deb.name == f"clockd_{__version__}_amd64.deb"
    listing = subprocess.run(["dpkg-deb", "-c", str(art.deb)], capture_output=True, text=True, check=True).stdout
    entries = {line.split()[5].removeprefix("."): line for line in listing.splitlines()}
    for path in (
        "/usr/lib/clockd/clockd",
        f"/{UNITS}/clockd.service",
        f"/{UNITS}/clockd@.service",
        f"/{UNITS}/clockd.target",
        "/usr/lib/sysusers.d/clockd.conf",
        "/usr/lib/tmpfiles.d/clockd.conf",
        "/etc/clockd/clockd.yaml",
        "/usr/share/man/man1/clockctl.1.gz",
        "/usr/share/man/man5/clockd.yaml.5.gz",
        "/usr/share/man/man5/clockd-schedules.5.gz",
        "/usr/share/man/man8/clockd.8.gz",
        "/usr/share/doc/clockd/copyright",
        "/usr/share/doc/clockd/changelog.gz",
    ):
        assert path in entries, f"{path} is not in the package"
    for name in ("clockd", "clockctl"):
        assert entries[f"/usr/bin/{name}"].startswith("l") and "-> ../lib/clockd/clockd" in listing
    assert entries["/usr/lib/clockd/clockd"].startswith("-rwxr-xr-x root/root")
    # Nothing of the build machine or the tests ships.
    assert not [p for p in entries if "/tests/" in p or "pytest" in p or ".pyenv" in p]

    conffiles = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(art.deb)], capture_output=True, check=True).stdout
    control = subprocess.run(["tar", "-xO", "./conffiles"], input=conffiles, capture_output=True, check=True)
    assert control.stdout.decode().split() == ["/etc/clockd/clockd.yaml"]

    assert _field(art, "Version") == __version__
    assert _field(art, "Architecture") == "amd64"
    depends = _field(art, "Depends")
    # Honest: the bundle carries its libraries; the system gives libc and the bootloader's zlib.
    assert depends.startswith("libc6 (>= ") and "zlib1g" in depends, depends
    assert "python" not in depends, depends


def test_maintainer_scripts_start_nothing(art: Artefacts, tmp_path: Path) -> None:
    subprocess.run(["dpkg-deb", "-e", str(art.deb), str(tmp_path / "ctl")], check=True)
    for script in ("postinst", "prerm", "postrm"):
        text = (tmp_path / "ctl" / script).read_text()
        subprocess.run(["sh", "-n", str(tmp_path / "ctl" / script)], check=True)
        commands = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
        assert not [c for c in commands if "systemctl" in c and ("start" in c or "enable" in c)], script
    postinst = (tmp_path / "ctl" / "postinst").read_text()
    assert "systemd-sysusers" in postinst and "daemon-reload" in postinst


def test_units_pass_systemd_analyze_verify_in_the_root(root: Path, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # A copy of the root with the host's own units beside ours (sysinit.target, …), so
    # that verify resolves ExecStart=/usr/bin/clockd inside the root, not on this host.
    verify_root = tmp_path / "root"
    shutil.copytree(root, verify_root, symlinks=True)
    units = verify_root / UNITS
    # (/lib is /usr/lib on a merged-/usr system: copy each real directory once.)
    for host in sorted({Path("/lib/systemd/system").resolve(), Path("/usr/lib/systemd/system").resolve()}):
        if host.is_dir():
            shutil.copytree(host, units, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns("clockd*"))
    shutil.copy(units / "clockd@.service", units / "clockd@worker.service")
    result = subprocess.run(
        [analyze, "verify", "--man=no", f"--root={verify_root}", "clockd.service", "clockd.target",
         "clockd@worker.service"],
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"},
        capture_output=True,
        text=True,
    )  # fmt: skip
    problems = [line for line in (result.stdout + result.stderr).splitlines() if "clockd" in line]
    assert result.returncode == 0 and problems == [], problems
    assert "ExecStart=/usr/bin/clockd run" in (units / "clockd.service").read_text()


def test_clockctl_help_and_man_page_from_the_package_paths(root: Path, tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    helped = subprocess.run([str(root / "usr/bin/clockctl"), "--help"], env=env, capture_output=True, text=True)
    assert helped.returncode == 0 and "Usage: clockctl" in helped.stdout, helped.stderr
    version = subprocess.run([str(root / "usr/bin/clockd"), "version"], env=env, capture_output=True, text=True)
    assert version.stdout.startswith(f"clockd {__version__} (commit "), version.stderr
    man = shutil.which("man")
    if man is None:
        pytest.skip("man is not installed (make build-tools)")
    page = subprocess.run(
        [man, "-l", str(root / "usr/share/man/man8/clockd.8.gz")],
        env={"PATH": "/usr/bin:/bin", "MANPAGER": "cat", "MANWIDTH": "80", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert page.returncode == 0 and "clockd" in page.stdout and "SYNOPSIS" in page.stdout, page.stderr
