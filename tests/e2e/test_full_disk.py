"""Failure drills, round two: PostgreSQL's disk fills up under load (issue 19).

PostgreSQL's data directory is on a small tmpfs that the drill fills with a file.
Expected: clockd logs and retries (no process dies), ``clockctl`` exits 4 with a
message that names the cause, nothing committed is lost, and everything resumes when
the space comes back. (The embedded store's full disk is the worker/SQLite side's.)
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from tests.e2e.cluster import BIN, Cluster, now
from tests.e2e.conftest import wait_for
from tests.e2e.test_drills import reconcile_exit_0, settle_and_reconcile
from tests.e2e.test_partitions import more_runs
from tests.harness import EtcdServer, PostgresServer, require_binary
from tests.soak.checker import check, job_argv

pytestmark = [pytest.mark.e2e, pytest.mark.drill]


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 192 MiB tmpfs that the ``postgres`` user can reach."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = Path(tempfile.mkdtemp(prefix="clockd-disk-"))
    os.chmod(where, 0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192M,mode=0755", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        with contextlib.suppress(OSError):
            where.rmdir()


def fill(disk: Path) -> Path:
    """Write a file until the disk is full (ENOSPC); return it."""
    filler = disk / "filler"
    block = b"\0" * (1 << 20)
    with filler.open("wb") as f:
        try:
            while True:
                f.write(block)
                f.flush()
        except OSError:
            pass
    return filler


@pytest.mark.soak  # 90 s: `make soak` only, for `make test`'s time
def test_postgres_disk_full_clockd_retries_clockctl_exits_4_and_resumes(
    small_disk: Path, etcd_server: EtcdServer, tmp_path: Path
) -> None:
    require_binary("initdb")
    # Recycled WAL segments are kept (min_wal_size) so that running out of space hits a
    # table extension (ERROR 53100, disk full) rather than a new WAL file (a PANIC).
    pg = PostgresServer(parent=small_disk, settings={"min_wal_size": "96MB", "max_wal_size": "96MB"}).start()
    name = f"drill_{uuid.uuid4().hex[:10]}"
    log = tmp_path / "runs.log"
    try:
        dsn = pg.create_database(name)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(5):
                conn.execute("SELECT pg_switch_wal()")
                conn.execute("CREATE TABLE IF NOT EXISTS wal_warmup (x int)")
                conn.execute("INSERT INTO wal_warmup SELECT generate_series(1, 1000)")
            conn.execute("CHECKPOINT")
        c = Cluster(dsn, etcd_server.endpoints, tmp_path)
        c.migrate()
        n1 = c.start("n1", "leader,relay,materializer,worker")
        names = []
        for every in ("1s", "2s"):
            c.ctl("add", "--every", every, "--name", f"tick-{every}", "--misfire", "catch_up",
                  "--", *job_argv(log))  # fmt: skip
            names.append(f"tick-{every}")
        start_at = now() + timedelta(seconds=1)
        more_runs(log, 5, "runs", 20)

        filler = fill(small_disk)

        # Operators see the cause: some write of clockctl's fails with exit 4, naming it.
        def refused() -> subprocess.CompletedProcess[str] | None:
            result = subprocess.run(
                [str(BIN / "clockctl"), "add", "--every", "1m", "--name", f"probe-{uuid.uuid4().hex[:6]}",
                 "--noop"],
                env=c.env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            return result if result.returncode != 0 else None

        result = wait_for("clockctl to be refused for lack of space", refused, 60, 0.2)
        assert result.returncode == 4, (result.returncode, result.stderr)
        assert "out of disk" in result.stderr or "No space left" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
        wait_for(
            "clockd to log its failing writes",
            lambda: any("out of disk" in d.get("msg", "") or "No space" in d.get("msg", "") for d in n1.log_lines()),
            60,
            0.5,
        )
        assert n1.alive()

        filler.unlink()  # space returns
        c.ctl("add", "--every", "1m", "--name", "after", "--noop")
        more_runs(log, 5, "runs after space returned", 60)
        assert n1.alive()
        settle_and_reconcile(c, start_at)
        reconcile_exit_0(c, start_at)
        end = now() - timedelta(seconds=3)
        report = wait_for(
            "the checker to account for every instant",
            lambda: (r := check(dsn, [log], start_at, end, schedules=names)).unaccounted == 0 and r,
            60,
            0.5,
        )
        print(report.summary())
    finally:
        with contextlib.suppress(Exception):
            c.stop_all()
        pg.stop()
