"""``clockctl status`` against a real etcd: the coordination it shows comes through
``clockd.wiring.make_observer`` (clockctl imports no coordinator adapter itself)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

from clockd.coord.etcd import EtcdCoordinator
from tests.harness import EtcdServer, until
from tests.harness.home import existing_store

BIN = Path(sys.executable).parent


async def test_status_names_the_etcd_leader_and_its_shards(etcd_server: EtcdServer, tmp_path: Path) -> None:
    cluster = f"t{uuid.uuid4().hex[:10]}"
    leader = EtcdCoordinator(etcd_server.endpoints, cluster, "n1", shard_count=4, ttl=10.0)
    try:
        await leader.start(lead=True, materialize=True, modes=["leader", "materializer"])
        await until(
            lambda: leader.leader_lease() is not None and len(leader.shard_leases()) == 4,
            within=10,
            what="n1 leads and owns every shard",
        )
        lease = leader.leader_lease()
        assert lease is not None
        (tmp_path / "none.yaml").write_text("{}\n")
        env = {
            **os.environ,
            "CLOCKD_HOME": str(tmp_path / "home"),
            "CLOCKD_CONFIG": str(tmp_path / "none.yaml"),
            "CLOCKD_ETCD": ",".join(etcd_server.endpoints),
            "CLOCKD_CLUSTER": cluster,
            "CLOCKD_SHARD_COUNT": "4",
        }
        env.pop("CLOCKD_STORE", None)
        await asyncio.to_thread(existing_store, tmp_path / "home")  # clockd ran here (status creates none)
        proc = await asyncio.create_subprocess_exec(
            str(BIN / "clockctl"), "status", "-o", "json",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        coordination = json.loads(out)["coordination"]
        assert coordination["kind"] == "etcd" and coordination["reachable"] is True
        assert coordination["cluster"] == cluster
        assert coordination["leader"] == {"node": "n1", "token": lease.token}
        assert [(m["node"], m["shards"]) for m in coordination["members"]] == [("n1", [0, 1, 2, 3])]
    finally:
        await leader.stop()
