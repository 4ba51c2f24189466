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
import tempfile
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


_TICKS = os.sysconf("SC_CLK_TCK")


def planning_tracked(dsn: str) -> tuple[sql.SQL | sql.Composed, ...]:
    """The statements that make ``pg_stat_statements`` count this database's statements
    with their planning time: run them on one connection before the sessions to be
    measured open (a database setting reaches only the sessions opened after it)."""
    database = sql.Identifier(str(conninfo_to_dict(dsn)["dbname"]))
    return (
        sql.SQL("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"),
        sql.SQL("ALTER DATABASE {} SET pg_stat_statements.track_planning = on").format(database),
    )


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name: [0] state, [1] ppid, [11] utime, [12] stime,
    [13] cutime, [14] cstime (in clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (its threads included), in seconds."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / _TICKS


def statement_totals(conn: psycopg.Connection[Any], like: str) -> tuple[float, int, float]:
    """(total ms, rows, WAL bytes) of this database's statements (pg_stat_statements) whose
    text matches the LIKE pattern ``like`` (clockd's begin ``/* name */``)."""
    found = conn.execute(
        "SELECT coalesce(sum(total_exec_time), 0), coalesce(sum(rows), 0), coalesce(sum(wal_bytes), 0) "
        "FROM pg_stat_statements "
        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query LIKE %s",
        (like,),
    ).fetchone()
    assert found is not None
    return float(found[0]), int(found[1]), float(found[2])


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
        found = self.top_statements(dsn, top, with_bench=True)
        if found is None:
            return
        with open(path, "w") as f:
            f.write("calls\ttotal_ms\tmean_ms\trows\tquery\n")
            for calls, total, nrows, query in found:
                f.write(f"{calls}\t{total:.0f}\t{total / max(1, calls):.3f}\t{nrows}\t{query[:300]}\n")

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

    def server_cpu_seconds(self) -> float | None:
        """utime + stime of the whole PostgreSQL server so far — the postmaster, every live
        backend and (through the postmaster's cutime/cstime) every exited one — when it
        runs on this machine; None otherwise. The database's share of the cores, which
        ``db_time_ms`` (wall time of execution, waits included) does not tell."""
        try:
            # The backend's parent is read while its connection is open: a backend exits
            # as its client closes, and a read after the close lost that race now and
            # then (run OO2's 500,000 drill printed its server CPU as nan).
            with self.connect() as conn:
                found = conn.execute("SELECT pg_backend_pid()").fetchone()
                backend = int(found[0]) if found else 0
                postmaster = int(_stat(backend)[1])
            total = sum(int(v) for v in _stat(postmaster)[11:15])
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    with contextlib.suppress(OSError, IndexError):
                        fields = _stat(int(entry))
                        if int(fields[1]) == postmaster:
                            total += int(fields[11]) + int(fields[12])
        except (OSError, psycopg.Error, ValueError, IndexError):
            return None
        return total / _TICKS

    def backend_cpu(self) -> dict[int, tuple[str, float]]:
        """CPU seconds so far of each live backend of the server, by pid, labelled with its
        ``application_name`` (the bench's processes set ``PGAPPNAME``) or its
        ``backend_type`` (autovacuum worker, walwriter, checkpointer…); empty when the
        server is not on this machine."""
        found: dict[int, tuple[str, float]] = {}
        with contextlib.suppress(psycopg.Error), self.connect() as conn:
            for pid, label in conn.execute(
                "SELECT /* bench */ pid, coalesce(nullif(application_name, ''), backend_type) FROM pg_stat_activity"
            ).fetchall():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    found[int(pid)] = (str(label), cpu_seconds(int(pid)))
        return found

    def top_statements(
        self, dsn: str, top: int = 8, with_bench: bool = False
    ) -> list[tuple[int, float, int, str]] | None:
        """(calls, total ms, rows, query on one line) of ``dsn``'s statements that took the
        most execution time since the last reset (pg_stat_statements), the bench's own
        (``/* bench */``) left out unless ``with_bench``; None when the server lacks the
        extension."""
        try:
            with self.connect(dsn) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                rows = conn.execute(
                    "SELECT calls, total_exec_time, rows, query FROM pg_stat_statements "
                    "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                    "AND (%(with_bench)s OR query NOT LIKE '%%/* bench */%%') "
                    "ORDER BY total_exec_time DESC LIMIT %(top)s",
                    {"top": top, "with_bench": with_bench},
                ).fetchall()
        except psycopg.Error as exc:
            log(f"pg_stat_statements unavailable: {exc}")
            return None
        return [(int(calls), float(total), int(n), " ".join(str(query).split())) for calls, total, n, query in rows]

    def wait_events(self, dsn: str) -> list[str]:
        """What each of ``dsn``'s active backends is doing now, from ``pg_stat_activity``:
        ``Lock:transactionid``, ``IO:WALSync``, ``CPU`` (active with no wait event: running
        or waiting for a core) — the sustained run counts them every half second."""
        with contextlib.suppress(psycopg.Error), self.connect(dsn) as conn:
            return [
                str(r[0])
                for r in conn.execute(
                    "SELECT /* bench */ coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity "
                    "WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()"
                ).fetchall()
            ]
        return []

    def describe(self) -> str:
        pg = "own PostgreSQL 15 (fsync=on, synchronous_commit=on)" if self.own_postgres else "given PostgreSQL"
        etcd = "own etcd" if self.own_etcd else "given etcd"
        return f"{pg}, {etcd}"


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of every core since boot, from /proc/stat: the share of the
    machine's CPU that was not idle (nor waiting for IO) over an interval."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return float(sum(values[:8]) - idle), float(sum(values[:8]))


# The throwaway cluster also logs the plan (EXPLAIN, not ANALYZE: no cost to the others) of
# every statement that ran for more than a second. A drill that once drained 30 times
# slower than the runs around it (2026-12-06: the finish's statements at ~1.2 s per call,
# PostgreSQL's CPU saturated) could not be explained afterwards; next time the plans are
# kept (_keep_slow_plans).
SLOW_PLANS = {
    "shared_preload_libraries": "'pg_stat_statements,auto_explain'",
    "auto_explain.log_min_duration": "1000",
    "auto_explain.log_analyze": "off",
}


def _keep_slow_plans(pg: PostgresServer) -> None:
    """Copy the server's log out of its throwaway directory when a statement's plan is in it."""
    try:
        text = pg.logfile.read_text(errors="replace")
    except OSError:
        return
    slow = text.count("duration:")
    if slow:
        fd, path = tempfile.mkstemp(prefix="clockd-bench-slow-plans-", suffix=".log")
        with os.fdopen(fd, "w") as out:
            out.write(text)
        log(f"postgres: {slow} statement(s) ran over 1 s; their plans are kept in {path}")


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
            settings = dict(PG_SETTINGS) | SLOW_PLANS
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
            _keep_slow_plans(pg)
            pg.stop()
