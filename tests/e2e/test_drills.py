"""Failure drills (DESIGN.md §8): real clockd processes, real PostgreSQL, real etcd.

Each drill injects one failure under load and ends with the product's reconciliation
(``clockctl reconcile``, exit 0): every instant each schedule should have fired is
accounted for exactly once, and ran.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, now
from tests.e2e.conftest import wait_for
from tests.harness import EtcdCluster, EtcdServer, PostgresServer, freeze_process

pytestmark = pytest.mark.e2e
PY = sys.executable
TTL = 3.0


@pytest.fixture
def cluster(pg_server: PostgresServer, etcd_server: EtcdServer, tmp_path: Path) -> Iterator[Cluster]:
    name = f"drill_{uuid.uuid4().hex[:10]}"
    dsn = pg_server.create_database(name)
    c = Cluster(dsn, etcd_server.endpoints, tmp_path)
    c.migrate()
    try:
        yield c
    finally:
        c.stop_all()
        pg_server.drop_database(name)


def add_load(c: Cluster) -> None:
    c.ctl("add", "--every", "1s", "--name", "tick-1s", "--noop")
    c.ctl("add", "--every", "2s", "--name", "tick-2s", "--noop")
    c.ctl("add", "*/1 * * * *", "--name", "minutely", "--noop")


def succeeded(c: Cluster) -> int:
    return int(c.rows("SELECT count(*) FROM occurrences WHERE state = 'SUCCEEDED'")[0][0])


def settle_and_reconcile(c: Cluster, start_at: object, timeout: float = 60) -> dict[str, int]:
    end = now() - timedelta(seconds=2)

    def ok() -> dict[str, int] | None:
        try:
            return c.reconcile(start_at, end)  # type: ignore[arg-type]  # datetime
        except AssertionError:
            return None

    try:
        return wait_for("every expected instant to be accounted for", ok, timeout, 0.5)
    except AssertionError:
        return c.reconcile(start_at, end)  # type: ignore[arg-type]  # raises, saying what is not accounted for


def reconcile_exit_0(c: Cluster, start_at: datetime) -> None:
    """``clockctl reconcile`` over the drill, as an operator would run it: exit 0."""
    result = c.ctl("reconcile", "--from", start_at.isoformat(), "--to", now().isoformat())
    assert "all accounted for" in result.stdout, result.stdout


def test_drill_1_sigkill_leader_standby_takes_over(cluster: Cluster) -> None:
    cluster.start("n1", "leader,relay,worker")
    cluster.start("n2", "leader,relay,worker")
    cluster.start("m1", "materializer")
    add_load(cluster)
    start_at = now() + timedelta(seconds=1)
    leader = wait_for("a leader", cluster.leader, 15)
    wait_for("runs", lambda: succeeded(cluster) >= 3, 20)
    leader.popen.kill()
    killed = time.monotonic()
    successor = wait_for("a new leader", lambda: (p := cluster.leader()) and p is not leader and p, TTL + 5 + 2)
    assert time.monotonic() - killed <= TTL + 5 + 1
    assert successor.name != leader.name
    before = succeeded(cluster)
    wait_for("runs under the new leader", lambda: succeeded(cluster) >= before + 8, 30)
    # Those 8 may be the failover's backlog, run at once; the reconciled window (it ends
    # 2 s before now) must itself hold 8 instants: 7 s of 1 s and 2 s ticks hold 10.
    window_end = start_at + timedelta(seconds=7 + 2)
    wait_for("a reconciled window of 7 s", lambda: now() >= window_end, 30)
    report = settle_and_reconcile(cluster, start_at)
    assert report["expected"] >= 8
    reconcile_exit_0(cluster, start_at)


def test_drill_2_paused_materializer_is_fenced(cluster: Cluster, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    cluster.start("n1", "leader,relay,worker")
    zombie = cluster.start("m1", "materializer", env={"CLOCKD_FAULT_HOLD_WHILE": str(hold)})
    add_load(cluster)
    start_at = now() + timedelta(seconds=1)
    # Freeze the materializer inside its commit window (after its lease check). It holds
    # there while the file exists: a pause of a fixed length could end before the freeze.
    held = len(zombie.actions("fault_hold"))
    hold.touch()
    wait_for("m1 to hold a batch", lambda: len(zombie.actions("fault_hold")) > held, 20)
    freeze_process(zombie.pid)
    cursor_before = cluster.rows("SELECT id, next_run_at FROM schedules")
    successor = cluster.start("m2", "materializer")
    wait_for("m2 to own all shards", lambda: len(successor.actions("shard_acquired")) >= 64, TTL + 15)
    # Every schedule, not just one: m2 commits shard by shard, and resuming the zombie while
    # m2 has not reached the zombie's shard yet would let the zombie's (still valid) write win.
    moved_from = dict(cursor_before)
    wait_for("m2 to materialize every due schedule", lambda: cluster.materialized_past(moved_from), 20)
    hold.unlink()  # the pause ends when the process runs again: it commits with its old token
    os.kill(zombie.pid, signal.SIGCONT)
    fenced = wait_for("the zombie's write to bounce off the fence", lambda: zombie.actions("fenced_out"), 15)
    assert fenced
    # No cursor moved backwards.
    after = dict(cluster.rows("SELECT id, next_run_at FROM schedules"))
    for sid, before in cursor_before:
        if before is not None and after.get(sid) is not None:
            assert after[sid] >= before
    settle_and_reconcile(cluster, start_at)
    reconcile_exit_0(cluster, start_at)


def _job_script(marks: Path, release: Path) -> list[str]:
    """A job that marks each attempt with its pid; attempt 1 runs until ``release`` exists
    (the drill's choice of when, not a sleep the drill's own steps could outlast), later
    attempts end at once."""
    script = (
        "import os,sys,time; d, r = sys.argv[1:3]; n=os.environ['CLOCKD_ATTEMPT']; "
        "open(os.path.join(d, n), 'w').write(str(os.getpid()))\n"
        "while n == '1' and not os.path.exists(r): time.sleep(0.05)"
    )
    return [PY, "-c", script, str(marks), str(release)]


def _worker_of_attempt(cluster: Cluster, attempt: int) -> str:
    # A running attempt's worker is on its lease (the claimed batch's row, schema 0022); the
    # attempt row is written when it ends.
    rows = cluster.rows(
        "SELECT worker_id FROM attempt_history WHERE attempt = %s UNION ALL "
        "SELECT b.worker_id FROM claim_batches AS b JOIN occurrences AS o ON o.lease_batch = b.token "
        "WHERE o.state = 'RUNNING' AND o.attempts = %s",
        attempt,
        attempt,
    )
    return str(rows[0][0]) if rows else ""


def test_drill_3_sigkill_worker_mid_job_redelivers(cluster: Cluster, tmp_path: Path) -> None:
    began = now()
    cluster.start("n1", "leader,relay,materializer")
    cluster.start("w1", "worker")
    cluster.start("w2", "worker")
    marks = tmp_path / "marks"
    marks.mkdir()
    cluster.ctl("add", "--at", "now+2s", "--name", "job", "--", *_job_script(marks, tmp_path / "never"))
    wait_for("attempt 1", lambda: (marks / "1").exists(), 20)
    first_pid = int(wait_for("pid", lambda: (marks / "1").read_text()))
    owner = wait_for("attempt 1's worker", lambda: _worker_of_attempt(cluster, 1))
    victim = cluster.procs[owner.split(":")[0]]
    victim.popen.kill()
    try:
        wait_for(
            "attempt 2 to succeed",
            lambda: cluster.rows("SELECT 1 FROM occurrences WHERE state = 'SUCCEEDED' AND attempts = 2"),
            30,
        )
        rows = cluster.rows("SELECT id FROM occurrences")
        assert len(rows) == 1  # one occurrence, same id, two attempts
        outcomes = cluster.rows("SELECT attempt, outcome FROM attempt_history ORDER BY attempt")
        assert outcomes == [(1, "lost"), (2, "succeeded")]
    finally:
        if os.path.exists(f"/proc/{first_pid}"):
            os.kill(first_pid, signal.SIGKILL)
    reconcile_exit_0(cluster, began)


def test_drill_4_stale_worker_completion_is_rejected(cluster: Cluster, tmp_path: Path) -> None:
    began = now()
    cluster.start("n1", "leader,relay,materializer")
    cluster.start("w1", "worker")
    cluster.start("w2", "worker")
    marks = tmp_path / "marks"
    marks.mkdir()
    release = tmp_path / "release"
    cluster.ctl("add", "--at", "now+2s", "--name", "job", "--", *_job_script(marks, release))
    wait_for("attempt 1", lambda: (marks / "1").exists(), 20)
    owner = wait_for("attempt 1's worker", lambda: _worker_of_attempt(cluster, 1))
    stale = cluster.procs[owner.split(":")[0]]
    freeze_process(stale.pid)
    release.touch()  # attempt 1 ends while its worker is frozen: a completion it reports late
    try:
        wait_for(
            "attempt 2 to succeed elsewhere",
            lambda: cluster.rows("SELECT 1 FROM occurrences WHERE state = 'SUCCEEDED' AND attempts = 2"),
            30,
        )
    finally:
        os.kill(stale.pid, signal.SIGCONT)
    wait_for("the stale completion to be rejected", lambda: stale.actions("stale_completion"), 20)
    outcomes = cluster.rows("SELECT attempt, outcome FROM attempt_history ORDER BY attempt")
    assert outcomes == [(1, "lost"), (2, "succeeded")]
    assert cluster.rows("SELECT state, attempts FROM occurrences") == [("SUCCEEDED", 2)]
    reconcile_exit_0(cluster, began)


def test_drill_5_postgres_restart_under_load(cluster: Cluster, pg_server: PostgresServer) -> None:
    cluster.start("n1", "leader,materializer,relay,worker")
    cluster.start("n2", "leader,materializer,relay,worker")
    add_load(cluster)
    start_at = now() + timedelta(seconds=1)
    wait_for("runs", lambda: succeeded(cluster) >= 5, 20)
    pg_server.restart()
    before = succeeded(cluster)
    wait_for("runs after the restart", lambda: succeeded(cluster) >= before + 5, 30, 0.5)
    for proc in cluster.procs.values():
        assert proc.alive(), f"{proc.name} died when PostgreSQL restarted"
    settle_and_reconcile(cluster, start_at)
    reconcile_exit_0(cluster, start_at)


def test_drill_6_etcd_outage_stops_materialization_then_drains(pg_server: PostgresServer, tmp_path: Path) -> None:
    etcd = EtcdServer().start()
    name = f"drill_{uuid.uuid4().hex[:10]}"
    dsn = pg_server.create_database(name)
    cluster = Cluster(dsn, etcd.endpoints, tmp_path)
    try:
        cluster.migrate()
        cluster.start("n1", "leader,relay,worker")
        cluster.start("m1", "materializer")
        add_load(cluster)
        start_at = now() + timedelta(seconds=1)
        wait_for("runs", lambda: succeeded(cluster) >= 3, 20)
        etcd.kill()
        down_at = time.monotonic()
        # Once every lease has passed its deadline, nothing new may be materialized.
        time.sleep(TTL + 1)  # the deadline itself is what is being waited for
        frozen_rows = len(cluster.rows("SELECT id FROM occurrences"))
        while time.monotonic() - down_at < 30:
            assert len(cluster.rows("SELECT id FROM occurrences")) == frozen_rows
            time.sleep(1)
        etcd.restart()
        settle_and_reconcile(cluster, start_at, timeout=60)
        for proc in cluster.procs.values():
            assert proc.alive()
        reconcile_exit_0(cluster, start_at)
    finally:
        cluster.stop_all()
        etcd.stop()
        pg_server.drop_database(name)


def test_drill_7_killing_an_etcd_member_keeps_leadership(
    pg_server: PostgresServer, etcd_cluster: EtcdCluster, tmp_path: Path
) -> None:
    name = f"drill_{uuid.uuid4().hex[:10]}"
    dsn = pg_server.create_database(name)
    cluster = Cluster(dsn, etcd_cluster.endpoints, tmp_path)
    try:
        cluster.migrate()
        cluster.start("n1", "leader,relay,worker")
        cluster.start("n2", "leader,relay,worker")
        cluster.start("m1", "materializer")
        add_load(cluster)
        start_at = now() + timedelta(seconds=1)
        leader = wait_for("a leader", cluster.leader, 15)
        wait_for("runs", lambda: succeeded(cluster) >= 3, 20)
        etcd_cluster.member(etcd_cluster.leader_index()).kill()
        killed = time.monotonic()
        before = succeeded(cluster)
        wait_for("runs after the etcd member died", lambda: succeeded(cluster) >= before + 8, 30)
        # Leadership never lapsed for longer than the TTL: any loss was followed by a
        # (re)acquisition within TTL seconds, and someone leads now.
        for proc in cluster.procs.values():
            events = [d for d in proc.log_lines() if d.get("action") in ("leadership_acquired", "leadership_lost")]
            for lost, regained in itertools.pairwise(events):
                if lost["action"] == "leadership_lost":
                    gap = datetime.fromisoformat(regained["ts"]) - datetime.fromisoformat(lost["ts"])
                    assert gap.total_seconds() <= TTL, (proc.name, gap)
        assert cluster.leader() is not None
        assert time.monotonic() - killed < 60
        assert leader.alive()
        settle_and_reconcile(cluster, start_at)
    finally:
        cluster.stop_all()
        pg_server.drop_database(name)
