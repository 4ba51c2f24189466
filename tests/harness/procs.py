"""Shared plumbing for the server fixtures: free ports, binaries, child processes, waiting.

Every process a harness class starts is recorded here by PID, and an ``atexit`` hook
SIGKILLs whatever is still alive when the interpreter exits — the last line of
defence if a fixture's teardown never ran (a crash, a KeyboardInterrupt mid-setup).
Normal teardown stops each process itself and unregisters it.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

_live_pids: set[int] = set()


def track(pid: int) -> None:
    _live_pids.add(pid)


def untrack(pid: int) -> None:
    _live_pids.discard(pid)


@atexit.register
def _kill_leftovers() -> None:
    for pid in list(_live_pids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCONT)  # a frozen process must not outlive us either
            os.kill(pid, signal.SIGKILL)
    _live_pids.clear()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago (bind-to-0 probe).

    Another process may take it before the server binds it; the harness classes retry
    their start with fresh ports when that happens.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _version_key(path: str) -> tuple[int, ...]:
    # /usr/lib/postgresql/15/bin -> (15,); non-numeric parts sort first
    parts = Path(path).parent.name.split(".")
    return tuple(int(p) if p.isdigit() else -1 for p in parts)


def find_binary(name: str) -> str | None:
    """Locate a server binary: PostgreSQL tools in /usr/lib/postgresql/<highest>/bin first,
    then $PATH (etcd lives in /usr/bin)."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    for bindir in candidates:
        path = os.path.join(bindir, name)
        if os.access(path, os.X_OK):
            return path
    return shutil.which(name)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def require_binary(name: str) -> str:
    """Path of ``name``; skip the test when it is missing — except under CI=true, where a
    missing server is a failure, never a silent skip."""
    path = find_binary(name)
    if path is None:
        reason = f"{name} not found in /usr/lib/postgresql/*/bin or PATH (run: make servers)"
        if in_ci():
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return path


def wait_until(
    predicate: Callable[[], bool], *, timeout: float, interval: float = 0.05, what: str = "condition"
) -> None:
    """Poll ``predicate`` until it is true; raise TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); look at its state.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc), for killing a postmaster's backends."""
    kids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            kids.append(int(entry.name))
    return kids


def tail(path: Path, limit: int = 4000) -> str:
    try:
        data = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return data[-limit:]
