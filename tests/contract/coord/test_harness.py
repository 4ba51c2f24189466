"""The server harness itself: what the fixtures promise, checked against real servers."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from tests.harness import EtcdServer, PostgresServer, require_binary
from tests.harness.procs import thread_states


def test_require_binary_skips_locally_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = "clockd-no-such-server-binary"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=missing):
        require_binary(missing)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_binary(missing)
    assert require_binary("sh").endswith("/sh")


def test_etcd_server_drills() -> None:
    require_binary("etcd")
    server = EtcdServer().start()
    try:
        root = server.root
        assert root is not None and server.client_port not in (2379, 2380)
        assert server.endpoints == [f"http://127.0.0.1:{server.client_port}"]
        server.kill()
        assert not server.healthy() and server.data_dir.exists()
        server.restart()
        assert server.healthy()
        server.freeze()
        assert not server.healthy()
        server.thaw()
        server.wait_healthy()
    finally:
        server.stop()
    assert not root.exists()
    assert server.proc is not None and server.proc.poll() is not None


def test_a_frozen_etcd_answers_nothing_even_while_the_cores_are_busy() -> None:
    # kill(SIGSTOP) returns before the stop takes effect: one thread is woken to carry it
    # out and the rest run on until it gets a CPU. On a busy machine a "frozen" etcd
    # answered a health check (CI, 2026-12-03); freeze() now waits for every thread.
    require_binary("etcd")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        with EtcdServer() as server:
            assert server.pid is not None
            for _ in range(5):
                server.freeze()
                states = thread_states(server.pid)
                assert states and all(state in "tT" for state in states), states
                assert not server.healthy()
                server.thaw()
                server.wait_healthy()
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def test_pg_dsn_is_a_fresh_copy_of_the_template(pg_dsn: str, pg_server: PostgresServer, pg_template: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE scratch (x int)")
        assert conn.execute("SHOW jit").fetchone() == ("off",)
    other = "t_harness_copy"
    dsn = pg_server.create_database(other, template=pg_template)
    try:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT to_regclass('scratch') IS NULL").fetchone()
            assert row == (True,)
    finally:
        pg_server.drop_database(other)
    assert pg_server.port != 5432


def test_postgres_server_crash_and_restart() -> None:
    for tool in ("initdb", "pg_ctl", "postgres"):
        require_binary(tool)
    server = PostgresServer().start()
    try:
        root = server.root
        assert root is not None
        with server.connect() as conn:
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("CHECKPOINT")
        server.kill()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.dsn(), connect_timeout=2).close()
        server.restart()
        with server.connect() as conn:
            assert conn.execute("SELECT to_regclass('kept') IS NOT NULL").fetchone() == (True,)
    finally:
        server.stop()
    assert not root.exists()
