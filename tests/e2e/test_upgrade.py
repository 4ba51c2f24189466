"""Rolling upgrade drill (issue 19, item 5): a cluster on the previous release is upgraded
one process at a time while jobs fire every second, with ``clockd migrate`` in the middle.

The previous release is ``OLD_RELEASE`` from this repository's history, in a virtualenv
of its own (``tests.harness.release``). It predates ``stdin:`` and worker capabilities
(``clockd.core.capabilities``): an old worker would run a ``stdin:`` job with its
standard input on /dev/null. Expected: no run lost or doubled across the upgrade (both
``clockctl reconcile`` and the independent checker at 0 unaccounted), and a schedule
that needs ``stdin`` is not planned while any old worker lives, so no old worker runs
it; once every worker is upgraded it runs, fed its input, every time.

The order is the documented one (README, "Upgrading a cluster"): ``clockd migrate``
(expand-only), then the leaders, relays and materializers, then the workers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, Proc, now
from tests.e2e.conftest import wait_for
from tests.e2e.test_partitions import add_logged_load, both_accountings, more_runs
from tests.harness import EtcdServer, PostgresServer
from tests.harness.release import build_release
from tests.soak.checker import job_argv

pytestmark = [pytest.mark.e2e, pytest.mark.drill]

# The previous release: the merge of round one's drills, before stdin:, notifications
# and worker capabilities. A commit of main's history, so a fresh (full) clone has it.
OLD_RELEASE = "8adff2a76ef0ab7c975d7bac64de9a3749a31c43"

CONTROL = (("n1", "leader,relay"), ("n2", "leader,relay"), ("m1", "materializer"), ("m2", "materializer"))
WORKERS = (("w1", "worker"), ("w2", "worker"))


@pytest.fixture(scope="module")
def old_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_release(OLD_RELEASE, tmp_path_factory.mktemp("old-release"))


@pytest.fixture
def cluster(pg_server: PostgresServer, etcd_server: EtcdServer, tmp_path: Path) -> Iterator[Cluster]:
    name = f"upgrade_{uuid.uuid4().hex[:10]}"
    dsn = pg_server.create_database(name)
    c = Cluster(dsn, etcd_server.endpoints, tmp_path)
    try:
        yield c
    finally:
        c.stop_all()
        pg_server.drop_database(name)


def upgrade(c: Cluster, name: str, modes: str) -> Proc:
    """SIGTERM the old process (it drains and gives its leases up), then start the new
    release under the same node id."""
    old = c.procs[name]
    old.popen.terminate()
    assert old.popen.wait(30) == 0, old.log_path.read_text()[-2000:]
    return c.start(name, modes)


def stdin_rows(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_rolling_upgrade_under_load_loses_nothing_and_old_workers_never_run_what_they_cannot_honour(
    cluster: Cluster, old_bin: Path, tmp_path: Path
) -> None:
    log, fed = tmp_path / "runs.log", tmp_path / "stdin.log"
    cluster.migrate(old_bin)  # the old release's schema
    for name, modes in CONTROL + WORKERS:
        cluster.start(name, modes, bin_dir=old_bin)
    names = add_logged_load(cluster, log, bin_dir=old_bin)  # as its operators would, before the upgrade
    start_at = now() + timedelta(seconds=1)
    more_runs(log, 5, "runs on the old release", 30)

    cluster.migrate()  # the new release's schema, with every old process running
    for name, modes in CONTROL:
        upgrade(cluster, name, modes)
        more_runs(log, 2, f"runs once {name} runs the new release", 30)

    # A job only the new workers can honour: it records what its standard input held.
    argv = job_argv(log)
    argv[2] += '; s=$(cat); printf "%s %s\\n" "$CLOCKD_OCCURRENCE_ID" "${s:-NO-STDIN}" >> "$1"'
    cluster.ctl("add", "--every", "1s", "--name", "fed-1s", "--stdin", "fed", "--", *argv, str(fed))
    materializers = [cluster.procs[n] for n, _ in CONTROL if n.startswith("m")]
    wait_for(
        "a materializer to hold fed-1s back for the old workers",
        lambda: any(p.actions("capability_wait") for p in materializers),
        30,
    )
    more_runs(log, 3, "the other schedules running meanwhile", 30)
    for name, modes in WORKERS:
        assert stdin_rows(fed) == [], "a job needing stdin ran while an old worker lived"
        assert not cluster.rows(
            "SELECT o.id FROM occurrences o JOIN schedules s ON s.id = o.schedule_id WHERE s.name = 'fed-1s'"
        ), "fed-1s was planned while an old worker lived"
        upgrade(cluster, name, modes)

    wait_for("fed-1s to run on the new workers", lambda: len(stdin_rows(fed)) >= 5, 60, 0.5)
    assert {row.split(" ", 1)[1] for row in stdin_rows(fed)} == {"fed"}
    assert any(p.actions("capability_ready") for p in materializers)
    more_runs(log, 5, "runs after the upgrade", 30)
    assert all(p.alive() for p in cluster.procs.values())
    both_accountings(cluster, log, start_at, [*names, "fed-1s"])
