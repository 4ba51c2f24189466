"""A coordinator in its own process, for crash drills: the test SIGKILLs it, so its
leases are never revoked. Prints ``LEADER <token>`` and ``SHARDS <n>`` on changes.

Usage: python _holder.py ENDPOINTS(comma-separated) CLUSTER NODE TTL
"""

from __future__ import annotations

import asyncio
import sys

from clockd.coord.etcd import EtcdCoordinator


async def main() -> None:
    endpoints, cluster, node, ttl = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4]
    coord = EtcdCoordinator(endpoints, cluster, node, ttl=float(ttl))
    await coord.start(lead=True, materialize=True, modes=["leader", "materializer"])
    token: int | None = None
    shards = -1
    while True:
        lease = coord.leader_lease()
        now_token = lease.token if lease else None
        if now_token != token:
            token = now_token
            print(f"LEADER {token}", flush=True)
        n = len(coord.shard_leases())
        if n != shards:
            shards = n
            print(f"SHARDS {n}", flush=True)
        await asyncio.sleep(0.01)  # this process only reports; it is killed from outside


if __name__ == "__main__":
    asyncio.run(main())
