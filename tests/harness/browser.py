"""Debian's Chromium, driven by Playwright (browser downloads are impossible here).

``launch()`` starts ``/usr/bin/chromium`` headless with the flags this machine needs
(no background networking: the closed network refuses those connections), in a
fresh profile. With ``CI=true`` a missing chromium fails the test instead of
skipping it. Screenshots go to ``$CLOCKD_ARTIFACTS`` (default ``test-artifacts/``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("CLOCKD_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",  # the tests run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_or_skip() -> str:
    if Path(CHROMIUM).exists() or shutil.which(CHROMIUM):
        return CHROMIUM
    message = f"chromium not found at {CHROMIUM} (make test installs it with apt: scripts/install-servers.sh)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def artifacts_dir() -> Path:
    path = Path(os.environ.get("CLOCKD_ARTIFACTS", "test-artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def launch(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=chromium_or_skip(), headless=True, args=FLAGS)
