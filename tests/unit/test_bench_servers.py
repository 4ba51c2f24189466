"""``bench.servers.Servers.server_cpu_seconds``: the whole PostgreSQL server's CPU, found
from the bench connection's backend — whose parent is the postmaster — read while that
connection is open. A backend exits as its client closes: read after the close, the
lookup failed now and then and the bench printed the server's CPU as ``nan``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.servers import Servers


class _OneBackend(Servers):
    """A server whose "backend" is a real child process of this test (so the test process
    stands for the postmaster) that exits as its connection closes, as PostgreSQL's do."""

    @contextmanager
    def connect(  # type: ignore[override]  # reason: a connection stand-in, not psycopg's
        self, dsn: str | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            yield _Answers(child.pid)
        finally:
            child.kill()
            child.wait()


class _Answers:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def execute(self, query: str) -> _Answers:
        assert query == "SELECT pg_backend_pid()"
        return self

    def fetchone(self) -> tuple[int]:
        return (self.pid,)


def test_the_server_cpu_is_found_though_the_backend_exits_with_its_connection() -> None:
    servers = _OneBackend(admin_dsn="", etcd=[], own_postgres=False, own_etcd=False)
    spent = servers.server_cpu_seconds()
    assert spent is not None  # was None: the backend's /proc entry was gone when it was read
    ours = os.times()  # this process is the "postmaster": its CPU is part of the total
    assert spent >= ours.user + ours.system - 0.05
