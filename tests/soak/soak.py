"""The randomized soak (issue 19): ``make soak`` (``python -m tests.soak.soak --minutes 30 --seed 1``).

A 3-member etcd cluster, one PostgreSQL, two clockd processes of each mode (leader,
relay, materializer, worker), ~2,000 schedules of mixed kinds and policies whose jobs
write their own execution log, and a chaos loop that, at random (seeded), SIGKILLs and
restarts, SIGSTOPs/SIGCONTs any clockd process, restarts PostgreSQL, kills and restarts
an etcd member, black-holes the etcd or PostgreSQL link of the processes on the
network-namespace island (m2, w2), and jumps m1's wall clock by an hour.

At the end everything is healed and restarted, the backlog drains, and two judges
must both say 0 unaccounted: ``clockctl reconcile`` and the independent checker
(``tests.soak.checker``). It prints the faults injected, instants checked, executions,
redeliveries and the start lag p99 outside the fault windows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from tests.e2e.cluster import BIN, Cluster, Proc, now
from tests.e2e.conftest import wait_for
from tests.harness import EtcdCluster, PostgresServer, freeze_process
from tests.harness.faketime import FakeClock
from tests.harness.netns import Namespace, Relay
from tests.soak.checker import Report, check, job_argv

ROLES = {
    "l1": "leader", "l2": "leader", "r1": "relay", "r2": "relay",
    "m1": "materializer", "m2": "materializer", "w1": "worker", "w2": "worker",
}  # fmt: skip
ISLAND = ("m2", "w2")  # these reach etcd and PostgreSQL through the namespace's relays
SKEWED = "m1"  # runs under libfaketime


@dataclass
class SoakResult:
    seed: int
    minutes: float
    schedules: int
    faults: list[str] = field(default_factory=list)
    fault_windows: list[tuple[datetime, datetime]] = field(default_factory=list)
    report: Report | None = None
    reconcile_problems: int = -1
    reconcile_expected: int = 0

    def summary(self) -> str:
        assert self.report is not None
        kinds: dict[str, int] = {}
        for f in self.faults:
            kinds[f.split()[0]] = kinds.get(f.split()[0], 0) + 1
        return (
            f"soak seed {self.seed}, {self.minutes:g} min, {self.schedules} schedules: {len(self.faults)} faults "
            f"{kinds}; clockctl reconcile: {self.reconcile_expected} expected, {self.reconcile_problems} problems; "
            f"{self.report.summary()} (start lag of first attempts outside the fault windows)"
        )


def schedule_file(path: Path, log: Path, count: int, rng: random.Random, minutes: float) -> None:
    """``count`` schedules of mixed kinds and policies (a YAML file for ``clockctl apply``;
    JSON is YAML)."""
    jobs = []
    for i in range(count):
        roll = rng.random()
        job: dict[str, object] = {"name": f"s{i:04d}", "command": job_argv(log)}
        if roll < 0.02:
            job["every"] = "1s"
        elif roll < 0.12:
            job["every"] = rng.choice(["5s", "10s", "15s", "30s"])
        elif roll < 0.72:
            job["schedule"] = "* * * * *"
            if rng.random() < 0.5:
                job["window"] = "30s"  # flexible: start within 30 s, spread
        elif roll < 0.82:
            job["schedule"] = "*/2 * * * *"
        elif roll < 0.87:
            job["schedule"] = f"{rng.randrange(60)} * * * *"
        elif roll < 0.95:
            at = now() + timedelta(seconds=rng.uniform(20, max(30.0, minutes * 60)))
            job["at"] = at.isoformat()
        else:
            job["schedule"] = "* * * * *"
            job["command"] = job_argv(log, fail=True)  # a failing job: retried, then DEAD
            job["retries"] = 1
            job["backoff"] = "1s"
        job["overlap"] = rng.choice(["allow", "allow", "skip", "queue_one"])
        job["misfire"] = rng.choice(["fire_once", "fire_once", "catch_up", "skip"])
        jobs.append(job)
    path.write_text(json.dumps({"jobs": jobs}))


class Soak:
    def __init__(self, minutes: float, seed: int, schedules: int, workdir: Path) -> None:
        self.minutes, self.seed, self.count = minutes, seed, schedules
        self.rng = random.Random(seed)
        self.workdir = workdir
        self.log = workdir / "runs.log"
        self.result = SoakResult(seed, minutes, schedules)
        self.pg = PostgresServer()
        self.etcd = EtcdCluster(3)
        self.ns = Namespace()
        self.relays: list[Relay] = []
        self.clock = FakeClock(workdir / "faketime")
        self.cluster: Cluster | None = None
        self.island_dsn = ""
        self.island_etcd: list[str] = []

    # -- set-up -------------------------------------------------------------------------

    def up(self) -> Cluster:
        self.pg.start()
        self.etcd.start()
        self.ns.create()
        dsn = self.pg.dsn("postgres")
        c = Cluster(dsn, self.etcd.endpoints, self.workdir)
        c.migrate()
        pg_relay = Relay(self.ns.host_ip, self.pg.port).start()
        self.relays.append(pg_relay)
        for endpoint in self.etcd.endpoints:
            relay = Relay(self.ns.host_ip, int(endpoint.rsplit(":", 1)[1])).start()
            self.relays.append(relay)
            self.island_etcd.append(f"http://{self.ns.host_ip}:{relay.port}")
        self.island_dsn = dsn.replace(f"{self.pg.host}:{self.pg.port}", f"{self.ns.host_ip}:{pg_relay.port}")
        self.cluster = c
        for name in ROLES:
            self.start(name)
        return c

    def start(self, name: str) -> Proc:
        assert self.cluster is not None
        extra = ["--concurrency", "16"] if ROLES[name] == "worker" else []
        if name in ISLAND:
            return self.cluster.start(
                name, ROLES[name], *extra, env={"CLOCKD_STORE": self.island_dsn},
                prefix=self.ns.prefix, etcd=self.island_etcd,
            )  # fmt: skip
        env = self.clock.env if name == SKEWED else None
        return self.cluster.start(name, ROLES[name], *extra, env=env)

    def down(self) -> None:
        if self.cluster is not None:
            self.cluster.stop_all()
        for relay in self.relays:
            relay.stop()
        self.ns.close()
        self.etcd.stop()
        self.pg.stop()

    # -- chaos --------------------------------------------------------------------------

    def fault(self) -> None:
        c = self.cluster
        assert c is not None
        kind = self.rng.choice(["kill", "kill", "stop", "stop", "pg", "etcd", "part_etcd", "part_pg", "clock"])
        began = now()
        name = self.rng.choice(sorted(ROLES))
        proc = c.procs[name]
        if kind == "kill":
            proc.popen.kill()
            proc.popen.wait(10)
            time.sleep(self.rng.uniform(1, 5))  # the outage itself is the fault
            self.start(name)
            what = f"kill {name}"
        elif kind == "stop":
            freeze_process(proc.pid)
            time.sleep(self.rng.uniform(2, 8))
            os.kill(proc.pid, signal.SIGCONT)
            what = f"stop {name}"
        elif kind == "pg":
            self.pg.restart()
            what = "pg restart"
        elif kind == "etcd":
            member = self.rng.randrange(3)
            self.etcd.member(member).kill()
            time.sleep(self.rng.uniform(2, 6))
            self.etcd.member(member).restart()
            what = f"etcd member {member} killed"
        elif kind in ("part_etcd", "part_pg"):
            ports = [r.port for r in (self.relays[1:] if kind == "part_etcd" else self.relays[:1])]
            for port in ports:
                self.ns.blackhole(port)
            time.sleep(self.rng.uniform(5, 12))
            for port in ports:
                self.ns.heal(port)
            what = f"partition {'etcd' if kind == 'part_etcd' else 'postgres'} from {','.join(ISLAND)}"
        else:
            self.clock.jump(self.rng.choice([3600, -3600]))
            time.sleep(self.rng.uniform(5, 15))
            self.clock.jump(0)
            what = f"clock {SKEWED} jumped"
        self.result.faults.append(what)
        # A partitioned PostgreSQL link recovers at TCP's retransmission pace (~25 s).
        grace = 40 if kind == "part_pg" else 15
        self.result.fault_windows.append((began, now() + timedelta(seconds=grace)))
        print(f"{now().isoformat(timespec='seconds')} fault: {what}", flush=True)

    def run(self) -> SoakResult:
        c = self.up()
        try:
            sched = self.workdir / "schedules.json"
            schedule_file(sched, self.log, self.count, self.rng, self.minutes)
            subprocess.run(
                [str(BIN / "clockctl"), "apply", "-f", str(sched)], env=c.env, check=True,
                capture_output=True, timeout=600,
            )  # fmt: skip
            start_at = now() + timedelta(seconds=5)
            deadline = time.monotonic() + self.minutes * 60
            while time.monotonic() < deadline:
                time.sleep(self.rng.uniform(3, 10))
                if time.monotonic() >= deadline:
                    break
                self.fault()
            end_at = now()
            for name, proc in c.procs.items():  # anything a fault left dead comes back
                if not proc.alive():
                    self.start(name)
            self.judge(c, start_at, end_at)
            return self.result
        finally:
            self.down()

    # -- the judges ---------------------------------------------------------------------

    def judge(self, c: Cluster, start_at: datetime, end_at: datetime) -> None:
        def reconciled() -> dict[str, object] | None:
            out = subprocess.run(
                [str(BIN / "clockctl"), "reconcile", "--all", "-o", "json",
                 "--from", start_at.isoformat(), "--to", end_at.isoformat()],
                env=c.env, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            doc: dict[str, object] = json.loads(out.stdout)
            return doc if out.returncode == 0 and not doc["problems"] else None

        def checked() -> Report | None:
            r = check(
                c.dsn, [self.log], start_at, end_at, must_succeed=False,
                fault_windows=self.result.fault_windows,
            )  # fmt: skip
            self.result.report = r
            return r if r.unaccounted == 0 else None

        try:
            doc = wait_for("clockctl reconcile to account for everything", reconciled, 300, 2)
            self.result.reconcile_problems = 0
            self.result.reconcile_expected = int(str(doc["expected"]))
        except AssertionError:
            self.result.reconcile_problems = 1
        try:
            wait_for("the checker to account for everything", checked, 300, 2)
        except AssertionError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--schedules", type=int, default=2000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="clockd-soak-") as tmp:
        result = Soak(args.minutes, args.seed, args.schedules, Path(tmp)).run()
    print(result.summary())
    assert result.report is not None
    if result.report.problems:
        print("\n".join(result.report.problems[:20]), file=sys.stderr)
    return 0 if result.reconcile_problems == 0 and result.report.unaccounted == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
