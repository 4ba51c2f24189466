"""Throwaway system users for run-as-user tests (root only; CI runs as root).

``throwaway_users(n)`` creates ``clockd-tN-<pid>`` with ``useradd --system
--no-create-home`` and removes them (and anything they still run) afterwards. The
pid suffix keeps concurrent test sessions from deleting each other's users.
Outside root the tests that need them skip, saying why.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# Python the throwaway users can execute: the venv's interpreter may live under
# /root, which they cannot enter.
SYSTEM_PY = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create throwaway users and switch to them (CI runs as root)")
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("useradd/userdel not installed")


def processes_of(uid: int) -> list[int]:
    """Pids (not zombies) whose real uid is ``uid``."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry.name}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1 ").split()[0]) == uid and not fields.get("State", "").strip().startswith("Z"):
            pids.append(int(entry.name))
    return pids


@contextmanager
def throwaway_users(count: int) -> Iterator[list[pwd.struct_passwd]]:
    require_root()
    names = [f"clockd-t{i}-{os.getpid()}" for i in range(1, count + 1)]
    created: list[str] = []
    try:
        for name in names:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", name], check=True)
            created.append(name)
        yield [pwd.getpwnam(n) for n in names]
    finally:
        for name in created:
            try:
                uid = pwd.getpwnam(name).pw_uid
            except KeyError:
                continue
            for pid in processes_of(uid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["userdel", name], check=False, capture_output=True)


@contextmanager
def shared_dir() -> Iterator[Path]:
    """A directory under /tmp every user may enter and write (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="clockd-trust-"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
