"""clockd speaks the systemd notify protocol itself: READY=1 when running, STOPPING=1 on SIGTERM."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def test_ready_and_stopping_are_sent(tmp_path: Path) -> None:
    address = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(30)
    env = {
        **os.environ,
        "NOTIFY_SOCKET": address,
        "CLOCKD_HOME": str(tmp_path / "home"),
        "CLOCKD_METRICS_ADDR": "off",
        "CLOCKD_API_ADDR": "127.0.0.1:0",
        "WATCHDOG_USEC": "2000000",
    }
    env.pop("CLOCKD_STORE", None)
    env.pop("WATCHDOG_PID", None)
    proc = subprocess.Popen([str(BIN / "clockd"), "run"], env=env, stderr=subprocess.DEVNULL)
    try:
        messages: list[str] = []
        deadline = time.monotonic() + 30
        while not any(m.startswith("READY=1") for m in messages) and time.monotonic() < deadline:
            messages.append(sock.recv(4096).decode())
        assert any(m.startswith("READY=1") for m in messages), messages
        while "WATCHDOG=1" not in messages and time.monotonic() < deadline:
            messages.append(sock.recv(4096).decode())
        assert "WATCHDOG=1" in messages
        proc.terminate()
        while "STOPPING=1" not in messages and time.monotonic() < deadline:
            messages.append(sock.recv(4096).decode())
        assert "STOPPING=1" in messages
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()
