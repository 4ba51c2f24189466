"""The built artefacts (``make dist``, ``make deb``) for tests/packaging/test_dist*.py.

``built()`` runs ``packaging/deb.sh`` once per session (it rebuilds only what changed:
build/dist.key and build/deb.key hash every input) under a file lock, so parallel
test workers share one build. Without the build tools the tests skip — except under
CI=true, where a missing tool fails, never skips.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from clockd import __version__
from tests.harness.procs import in_ci

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("dpkg-deb", "dpkg-shlibdeps", "lintian", "patchelf", "objdump")


@dataclass(frozen=True, slots=True)
class Artefacts:
    onefile: Path  # dist/clockd-<version>-linux-x86_64
    onedir: Path  # build/pyi/dist/clockd/clockd (what the .deb installs)
    deb: Path  # dist/clockd_<version>_amd64.deb


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """An empty environment (as ``env -i``) plus a fresh CLOCKD_HOME: nothing of the venv leaks in."""
    return {"CLOCKD_HOME": str(home), **extra}


@cache
def _build() -> Artefacts | str:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"build tools missing: {', '.join(missing)} (run: make build-tools)"
    (ROOT / "build").mkdir(exist_ok=True)
    with (ROOT / "build" / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        env = {**os.environ, "PYTHON": os.environ.get("CLOCKD_BUILD_PYTHON", "python3")}
        env.pop("VIRTUAL_ENV", None)
        result = subprocess.run(
            ["packaging/deb.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False
        )
    if result.returncode != 0:
        pytest.fail(f"packaging/deb.sh failed ({result.returncode}):\n{result.stderr[-4000:]}", pytrace=False)
    return Artefacts(
        onefile=ROOT / "dist" / f"clockd-{__version__}-linux-x86_64",
        onedir=ROOT / "build" / "pyi" / "dist" / "clockd" / "clockd",
        deb=ROOT / "dist" / f"clockd_{__version__}_amd64.deb",
    )


def built() -> Artefacts:
    outcome = _build()
    if isinstance(outcome, str):
        if in_ci():
            pytest.fail(f"CI=true and {outcome}", pytrace=False)
        pytest.skip(outcome)
    return outcome
