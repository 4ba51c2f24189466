"""A clockd on etcd stops on SIGTERM within a bound even when etcd does not answer.

The coordinator's stop is bounded (``clockd.coord.etcd.STOP_BOUND``): background tasks,
lease revokes and the client's close each get a deadline, so a frozen (SIGSTOPped) or
dead etcd cannot keep the daemon from exiting. The leases it could not revoke expire by
their TTL. With no job running, nothing else waits.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from clockd.coord.etcd import STOP_BOUND
from tests.e2e.cluster import Cluster
from tests.e2e.conftest import wait_for
from tests.harness import EtcdServer, PostgresServer, require_binary

pytestmark = pytest.mark.e2e

EXIT_WITHIN = STOP_BOUND + 8.0  # the coordinator's bound, plus the rest of a shutdown on a loaded box


# A dead etcd refuses at once (the cheaper case): `make soak` only, for make test's time.
@pytest.mark.parametrize("fault", ["frozen", pytest.param("killed", marks=pytest.mark.soak)])
def test_sigterm_exits_within_its_bound_when_etcd_is_frozen_or_dead(
    pg_server: PostgresServer, tmp_path: Path, fault: str
) -> None:
    require_binary("etcd")
    name = f"stop_{uuid.uuid4().hex[:10]}"
    dsn = pg_server.create_database(name)
    etcd = EtcdServer().start()
    cluster = Cluster(dsn, etcd.endpoints, tmp_path)
    try:
        cluster.migrate()
        n1 = cluster.start("n1", "leader,relay,materializer,worker")
        wait_for(
            "n1 to lead and own shards",
            lambda: n1.actions("leadership_acquired") and n1.actions("shard_acquired"),
            20,
        )
        if fault == "frozen":
            etcd.freeze()
        else:
            etcd.kill()
        sent = time.monotonic()
        n1.popen.send_signal(signal.SIGTERM)
        try:
            code = n1.popen.wait(EXIT_WITHIN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"clockd did not exit within {EXIT_WITHIN:.0f}s of SIGTERM with etcd {fault}")
        took = time.monotonic() - sent
        assert code == 0, n1.log_path.read_text()[-2000:]
        print(f"exit {took:.1f}s after SIGTERM with etcd {fault}")
    finally:
        cluster.stop_all()
        etcd.stop()  # thaws a frozen one first
        pg_server.drop_database(name)
