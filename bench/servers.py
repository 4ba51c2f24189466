"""The servers the distributed benchmarks run against: PostgreSQL and etcd.

Unless ``--store DSN`` / ``--etcd URLS`` are given (``BENCH_STORE`` / ``BENCH_ETCD`` in
the environment, set by ``python -m bench``), a throwaway PostgreSQL cluster and a
one-node etcd are started with the test harness classes and removed afterwards.

The PostgreSQL cluster is **durable** (``fsync=on``, ``synchronous_commit=on``): the
figures are the ones a production server would give on this disk. Its other settings
follow notes/postgres.md: shared_buffers of a few GB, ``max_wal_size`` large enough
that a 500 k-row burst does not checkpoint, ``jit=off`` (the harness sets it).

Every scenario gets its own database (``new_database``), created on the server and
dropped afterwards, also on a server given with ``--store`` (the role needs CREATEDB).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.harness.etcd import EtcdServer
from tests.harness.postgres import PostgresServer

# Settings of the throwaway cluster (on top of the harness's durable defaults).
PG_SETTINGS = {
    "shared_buffers": "2GB",
    "max_wal_size": "16GB",
    "min_wal_size": "1GB",
    "checkpoint_timeout": "30min",
    "max_connections": "300",
    "wal_buffers": "64MB",
}
# ... and with pg_stat_statements counting every statement (the database-time figures).
STATS_SETTINGS = dict(PG_SETTINGS) | {
    "shared_preload_libraries": "'pg_stat_statements'",
    "pg_stat_statements.track": "all",
}


def load_average() -> str:
    """The load average, printed beside figures taken on a shared machine."""
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f} on {os.cpu_count()} cores"


def log(message: str) -> None:
    """Progress on stderr (the figures table goes to stdout)."""
    sys.stderr.write(f"   {message}\n")
    sys.stderr.flush()


def url_dsn(dsn: str, dbname: str) -> str:
    """``dsn`` (URL or key=value) pointing at ``dbname``, as a ``postgresql://`` URL:
    clockd recognises a PostgreSQL store by that prefix."""
    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    params.pop("dbname", None)
    user = quote(params.pop("user", "postgres"), safe="")
    password = params.pop("password", None)
    host = params.pop("host", "localhost")
    port = params.pop("port", "5432")
    auth = f"{user}:{quote(password, safe='')}@" if password else f"{user}@"
    where = f"[{host}]" if ":" in host else host
    query = f"?{urlencode(params)}" if params else ""
    return f"postgresql://{auth}{where}:{port}/{quote(dbname, safe='')}{query}"


@dataclass
class Servers:
    admin_dsn: str  # a database on the server we may CREATE DATABASE from
    etcd: list[str]
    own_postgres: bool
    own_etcd: bool
    created: list[str] = field(default_factory=list)

    def connect(self, dsn: str | None = None, **kwargs: Any) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(dsn or self.admin_dsn, autocommit=True, connect_timeout=10, **kwargs)

    def new_database(self, label: str) -> str:
        """A fresh empty database; returns its DSN."""
        name = f"clockd_bench_{label}_{secrets.token_hex(3)}"
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.created.append(name)
        return url_dsn(self.admin_dsn, name)

    def drop_database(self, dsn: str) -> None:
        name = conninfo_to_dict(dsn).get("dbname")
        if not name or name not in self.created:
            return
        with contextlib.suppress(psycopg.Error), self.connect() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(name))))
        self.created.remove(str(name))

    def statements(self, dsn: str, path: str, top: int = 20) -> None:
        """With ``BENCH_PROFILE``: write the statements of ``dsn``'s database that took the
        most server time (pg_stat_statements, if the server has it loaded)."""
        try:
            with self.connect(dsn) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                rows = conn.execute(
                    "SELECT calls, total_exec_time, mean_exec_time, rows, query FROM pg_stat_statements "
                    "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                    "ORDER BY total_exec_time DESC LIMIT %(top)s",
                    {"top": top},
                ).fetchall()
        except psycopg.Error as exc:
            log(f"pg_stat_statements unavailable: {exc}")
            return
        with open(path, "w") as f:
            f.write("calls\ttotal_ms\tmean_ms\trows\tquery\n")
            for calls, total, mean, nrows, query in rows:
                f.write(f"{calls}\t{total:.0f}\t{mean:.3f}\t{nrows}\t{' '.join(str(query).split())[:300]}\n")

    def db_time_ms(self, dsn: str, reset: bool = False, like: str = "%") -> float | None:
        """Server execution time of ``dsn``'s database so far (pg_stat_statements, ms) of
        the statements whose text is ``LIKE like``, then reset with ``reset``; None when
        the server does not have the extension loaded. Statements marked ``/* bench */``
        (the benchmark's own probes) are left out."""
        try:
            with self.connect(dsn) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                found = conn.execute(
                    "SELECT coalesce(sum(total_exec_time), 0) FROM pg_stat_statements "
                    "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                    "AND query NOT LIKE '%%/* bench */%%' AND query LIKE %(like)s",
                    {"like": like},
                ).fetchone()
                if reset:
                    conn.execute("SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database "
                                 "WHERE datname = current_database()), 0)")  # fmt: skip
        except psycopg.Error:
            return None
        return None if found is None else float(found[0])

    def describe(self) -> str:
        pg = "own PostgreSQL 15 (fsync=on, synchronous_commit=on)" if self.own_postgres else "given PostgreSQL"
        etcd = "own etcd" if self.own_etcd else "given etcd"
        return f"{pg}, {etcd}"


@contextlib.contextmanager
def servers(store: str | None = None, etcd: str | None = None) -> Iterator[Servers]:
    """PostgreSQL and etcd for the run: the given ones, or throwaway ones (stopped after)."""
    store = store or os.environ.get("BENCH_STORE") or None
    etcd = etcd or os.environ.get("BENCH_ETCD") or None
    pg: PostgresServer | None = None
    etcd_server: EtcdServer | None = None
    found: Servers | None = None
    try:
        if store is None:
            # pg_stat_statements always (the sustained run prints database time per
            # execution); every nested statement only when profiling.
            settings = dict(PG_SETTINGS) | {"shared_preload_libraries": "'pg_stat_statements'"}
            if os.environ.get("BENCH_PROFILE"):
                settings |= {"pg_stat_statements.track": "all"}
            pg = PostgresServer(durable=True, settings=settings).start()
            admin = pg.dsn("postgres")
        else:
            admin = store
        if etcd is None:
            etcd_server = EtcdServer().start()
            endpoints = etcd_server.endpoints
        else:
            endpoints = [e.strip() for e in etcd.split(",") if e.strip()]
        found = Servers(admin, endpoints, own_postgres=pg is not None, own_etcd=etcd_server is not None)
        yield found
    finally:
        if found is not None:
            for name in list(found.created):
                found.drop_database(url_dsn(found.admin_dsn, name))
        if etcd_server is not None:
            etcd_server.stop()
        if pg is not None:
            pg.stop()
