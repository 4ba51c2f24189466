"""Session-wide fixtures: real PostgreSQL and etcd servers, started by the tests themselves.

* ``pg_server`` (session) — a ``harness.PostgresServer``.
* ``pg_template`` (session) — name of a template database, built once per session:
  created empty, then every ``pytest_clockd_pg_template(dsn)`` hook implementation runs on it
  (a conftest registers migrations that way), then it is marked a template.
* ``pg_dsn`` (function) — DSN of a fresh database copied from ``pg_template``,
  dropped after the test.
* ``etcd_server`` (session) — a single-node ``harness.EtcdServer``; tests isolate
  themselves by key prefix (e.g. a unique clockd cluster name) and must leave it
  running and thawed.
* ``etcd_cluster`` (function) — a fresh 3-node ``harness.EtcdCluster``, for drills
  that kill or freeze members.

A missing server binary skips the tests that need it, except under ``CI=true``,
where it fails them (``require_binary``). Tests using these fixtures get the
``postgres`` / ``etcd`` markers automatically. Nothing here knows about clockd's
store: store fixtures live in the conftest files next to their tests.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.harness import EtcdCluster, EtcdServer, PostgresServer, require_binary, teardown_on_sigterm
from tests.harness import hooks as harness_hooks

__all__ = ["require_binary"]

PG_TEMPLATE = "clockd_template"

# Every clockd a test starts with this environment serves its API on an ephemeral port:
# the default 127.0.0.1:8470 may be held by an operator's clockd (`make run`) or another
# test, and a full-disk test failed on "Address already in use" instead of its own error.
os.environ.setdefault("CLOCKD_API_ADDR", "127.0.0.1:0")

_PG_FIXTURES = {"pg_server", "pg_template", "pg_dsn"}
_ETCD_FIXTURES = {"etcd_server", "etcd_cluster"}


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(harness_hooks)


def pytest_sessionstart(session: pytest.Session) -> None:
    # A SIGTERM (a CI timeout, `timeout 600 pytest`) still tears the servers down.
    teardown_on_sigterm()


@pytest.hookimpl(trylast=True)  # after pytest's own fixture-driven ordering, which it keeps per file
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & _PG_FIXTURES:
            item.add_marker(pytest.mark.postgres)
        if names & _ETCD_FIXTURES:
            item.add_marker(pytest.mark.etcd)
    _long_files_first(items)


def _long_files_first(items: list[pytest.Item]) -> None:
    """Files of drills first, then files that start clockd processes, then the rest.

    ``make test`` hands whole files to its xdist workers in this order
    (``--dist loadfile --no-loadscope-reorder``): a 3-minute soak handed out last would
    run alone at the end while the other worker idles. The order inside a file is kept.
    """

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("drill") is not None:
            return 0
        return 1 if item.get_closest_marker("e2e") is not None else 2

    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    by_file: dict[str, int] = {}
    for item in items:
        by_file[file_of(item)] = min(rank(item), by_file.get(file_of(item), 2))
    items.sort(key=lambda item: by_file[file_of(item)])


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    for tool in ("initdb", "pg_ctl", "postgres"):
        require_binary(tool)
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_template(pg_server: PostgresServer, pytestconfig: pytest.Config) -> str:
    pg_server.drop_database(PG_TEMPLATE)
    dsn = pg_server.create_database(PG_TEMPLATE)
    pytestconfig.hook.pytest_clockd_pg_template(dsn=dsn)
    with pg_server.connect() as conn:
        conn.execute(f'ALTER DATABASE "{PG_TEMPLATE}" WITH IS_TEMPLATE true')
    return PG_TEMPLATE


@pytest.fixture
def pg_dsn(pg_server: PostgresServer, pg_template: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    dsn = pg_server.create_database(name, template=pg_template)
    try:
        yield dsn
    finally:
        pg_server.drop_database(name)


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    require_binary("etcd")
    server = EtcdServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def etcd_cluster() -> Iterator[EtcdCluster]:
    require_binary("etcd")
    cluster = EtcdCluster(3).start()
    try:
        yield cluster
    finally:
        cluster.stop()
