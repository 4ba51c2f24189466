"""One place holds the release (``clockd.__version__``); everything else reports it."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from clockd import __version__

ROOT = Path(__file__).resolve().parents[2]
SEMVER = re.compile(r"\d+\.\d+\.\d+")


def _meta(*args: str) -> str:
    return subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "meta.py"), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_changelog_agrees_with_the_version() -> None:
    """Keep a Changelog: with ``## [Unreleased]`` on top, the version is the one being
    prepared, newer than every released heading; once released, the top heading is it."""
    assert SEMVER.fullmatch(__version__), __version__
    headings = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.MULTILINE)
    assert headings, "CHANGELOG.md has no ## [...] heading"
    released = [h for h in headings if h != "Unreleased"]

    def as_tuple(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split("."))

    if headings[0] == "Unreleased":
        assert all(as_tuple(__version__) > as_tuple(h) for h in released), (__version__, released)
    else:
        assert headings[0] == __version__, (headings[0], __version__)


def test_pyproject_and_the_build_read_the_same_version() -> None:
    assert importlib.metadata.version("clockd") == __version__
    assert _meta("version") == __version__


def test_clockd_version_subcommand_and_flag() -> None:
    clockd = Path(sys.executable).parent / "clockd"
    for argv in (["version"], ["--version"], ["ctl", "version"]):
        out = subprocess.run([str(clockd), *argv], capture_output=True, text=True, check=True).stdout
        prog = "clockctl" if argv[0] == "ctl" else "clockd"
        assert out.startswith(f"{prog} {__version__} (commit "), (argv, out)


def test_one_executable_picks_the_program_by_name() -> None:
    from clockctl.multicall import program

    assert program(["/usr/bin/clockctl", "list"]) == ("clockctl", ["list"])
    assert program(["clockctl"]) == ("clockctl", [])
    assert program(["/usr/bin/clockd", "ctl", "runs", "x"]) == ("clockctl", ["runs", "x"])
    assert program(["/usr/lib/clockd/clockd", "run", "--mode", "worker"]) == ("clockd", ["run", "--mode", "worker"])
    assert program(["clockd-0.1.0-linux-x86_64", "version"]) == ("clockd", ["version"])
