"""Jobs started with a real fork survive a busy gRPC client in the same process.

A job with ``user:``/``group:`` is started with fork, not vfork, and
gRPC's fork handlers ran in those children: with the etcd client busy, 7 % of them died of
SIGSEGV before exec (an operator's walkthrough of a cluster saw team jobs go DEAD at
random). ``clockd.coord.etcd`` switches the handlers off. The check runs in a fresh
interpreter — grpc reads the switch when it loads — with a real etcd, a lease kept alive
and reads in flight, and 150 jobs run as ``nobody`` through the worker's ProcessRunner.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.harness import EtcdServer
from tests.harness.users import require_root

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import UTC, datetime

    import clockd.coord.etcd  # noqa: F401 - what the daemon imports before any job runs
    import aetcd

    from clockd.core.model import AttemptOutcome, CommandTarget
    from clockd.runner import RunRequest
    from clockd.runner.identity import UserPolicy
    from clockd.runner.process import ProcessRunner

    async def main(port: int, jobs: int) -> None:
        client = aetcd.Client(host="127.0.0.1", port=port, timeout=5)
        await client.put(b"clockd-fork-test", b"v")
        lease = await client.lease(10)
        done = asyncio.Event()

        async def busy() -> None:  # gRPC's threads at work while the jobs start
            while not done.is_set():
                await lease.refresh()
                await client.get(b"clockd-fork-test")

        traffic = asyncio.create_task(busy())
        runner = ProcessRunner(policy=UserPolicy(allowed={"*": ("*",)}))
        target = CommandTarget(argv=("true",), user="nobody")
        outcomes = []
        for n in range(jobs):
            request = RunRequest(occurrence_id=f"occ-{n}", schedule_name="fork", attempt=1, target=target,
                                 scheduled_for=datetime.now(UTC), timeout=30, tenant="default")
            result = await runner.run(request, asyncio.Event())
            outcomes.append(result.outcome is AttemptOutcome.SUCCEEDED or f"{result.outcome} {result.error}")
        done.set()
        await traffic
        await client.close()
        failed = [o for o in outcomes if o is not True]
        print(f"{len(failed)} of {jobs} failed: {failed[:3]}")

    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
    """
)


def test_jobs_run_as_another_user_survive_a_busy_etcd_client(etcd_server: EtcdServer) -> None:
    require_root()
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(etcd_server.client_port), "150"],
        env=env, capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("0 of 150 failed"), result.stdout + result.stderr[-2000:]
