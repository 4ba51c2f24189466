"""The e2e harness's own promise: a test that wants clockd's metrics never picks a port
before clockd binds it (another test's server could take it meanwhile; tests run in
parallel, and one failed CI run that way, 2026-12-04). It gives ``127.0.0.1:0`` and reads
the bound port from clockd's ``metrics_listening`` line (``Clockd.metrics_port``)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from tests.e2e.conftest import Clockd


def test_the_metrics_port_is_the_one_clockd_bound(tmp_path: Path) -> None:
    daemon = Clockd(tmp_path / "home", {"CLOCKD_METRICS_ADDR": "127.0.0.1:0"})
    daemon.home.mkdir()
    try:
        daemon.start()
        assert daemon.metrics_port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
            assert response.status == 200
    finally:
        daemon.stop(timeout=30)
