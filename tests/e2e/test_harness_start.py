"""The e2e harness's own promise: a loopback metrics port that another process takes
between ``free_port`` and clockd's bind does not fail the test that asked for it (tests
run in parallel; one failed CI run that way, 2026-12-04)."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

from tests.e2e.conftest import Clockd


def test_a_metrics_port_taken_before_the_start_is_replaced(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        daemon = Clockd(tmp_path / "home", {"CLOCKD_METRICS_ADDR": f"127.0.0.1:{port}"})
        daemon.home.mkdir()
        try:
            daemon.start()
            assert f"port {port} is in use" in daemon.log()  # the first try met the taken port
            assert daemon.metrics_port not in (None, port)
            with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
                assert response.status == 200
        finally:
            daemon.stop(timeout=30)
