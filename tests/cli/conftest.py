"""The real ``clockctl`` on a fresh ``CLOCKD_HOME``, for CLI tests that need nothing more.

``CLOCKCTL_BIN_DIR`` runs the tests against another build (e.g. ``/work/main/.venv/bin``,
to see a new test fail on the code before a fix). ``COLUMNS`` is dropped: output is
piped, as a script reads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness.home import existing_store

BIN = Path(os.environ.get("CLOCKCTL_BIN_DIR", Path(sys.executable).parent))


@pytest.fixture
def ctl(tmp_path: Path) -> Any:
    env = {**os.environ, "CLOCKD_HOME": str(tmp_path / "home")}
    env.pop("CLOCKD_STORE", None)
    env.pop("COLUMNS", None)
    existing_store(tmp_path / "home")  # clockd has run here: reads find an empty store

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "clockctl"), *args], env=env, capture_output=True, text=True, timeout=60)

    return run
