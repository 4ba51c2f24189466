"""Shared plumbing for the server fixtures: free ports, binaries, child processes, waiting.

Every process a harness class starts is recorded here by PID, and an ``atexit`` hook
SIGKILLs whatever is still alive when the interpreter exits — the last line of
defence if a fixture's teardown never ran (a crash, a KeyboardInterrupt mid-setup).
Normal teardown stops each process itself and unregisters it.
"""

from __future__ import annotations

import asyncio
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

_DEFAULT_PORTS = frozenset({5432, 2379, 2380})  # a system PostgreSQL or etcd may own these
_live_pids: set[int] = set()
_live_dirs: set[Path] = set()


def track(pid: int) -> None:
    _live_pids.add(pid)


def untrack(pid: int) -> None:
    _live_pids.discard(pid)


def track_dir(path: Path) -> None:
    _live_dirs.add(path)


def untrack_dir(path: Path) -> None:
    _live_dirs.discard(path)


@atexit.register
def _kill_leftovers() -> None:
    for pid in list(_live_pids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCONT)  # a frozen process must not outlive us either
            os.kill(pid, signal.SIGKILL)
    _live_pids.clear()
    for path in list(_live_dirs):
        shutil.rmtree(path, ignore_errors=True)
    _live_dirs.clear()


def teardown_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt, so that pytest still runs fixture teardown
    (which stops the servers) and the atexit hook above, instead of dying on the spot
    and orphaning them. Leaves a handler someone else installed alone."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def _raise(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills outright
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _raise)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago (bind-to-0 probe).

    Another process may take it before the server binds it; the harness classes retry
    their start with fresh ports when that happens.
    """
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _DEFAULT_PORTS:
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


async def until(predicate: Callable[[], object], *, within: float, what: str, interval: float = 0.01) -> None:
    """``wait_until`` for a test's event loop: poll ``predicate`` (the loop keeps running
    in between); raise TimeoutError after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {within:.1f}s waiting for {what}")
        await asyncio.sleep(interval)


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


def thread_states(pid: int) -> list[str]:
    """The state letter of each thread of ``pid`` (/proc/PID/task/*/stat): R, S, T, ..."""
    states: list[str] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that exits meanwhile
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
    return states


def freeze_process(pid: int, *, timeout: float = 10.0) -> None:
    """SIGSTOP ``pid`` and return only once the kernel reports every thread stopped.

    ``kill()`` returns when the signal is queued, not when it took effect: the kernel wakes
    one thread to carry out the group stop, and until that thread gets a CPU the others go
    on running user code — on a loaded 2-core machine for long enough to answer a request
    or commit a transaction after the test believed the process hung.
    """
    os.kill(pid, signal.SIGSTOP)
    wait_until(
        lambda: all(state in "tT" for state in thread_states(pid)),
        timeout=timeout,
        interval=0.005,
        what=f"every thread of pid {pid} to stop",
    )


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
