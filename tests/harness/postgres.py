"""A throwaway PostgreSQL cluster on a free loopback port, for tests.

``initdb`` refuses to run as root, so when the tests run as uid 0 (CI does) every
server command runs as the ``postgres`` system user through ``runuser``, and the
temporary directory is handed to that user. Settings trade durability for speed
(``fsync=off``) unless ``durable=True``; ``jit=off`` always (see notes/postgres.md).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import psycopg
from psycopg import sql

from .procs import (
    children_of,
    find_binary,
    free_port,
    pid_alive,
    tail,
    track,
    track_dir,
    untrack,
    untrack_dir,
)

_START_ATTEMPTS = 3


class PostgresError(RuntimeError):
    pass


class PostgresServer:
    """One PostgreSQL cluster. ``start()`` runs initdb and starts it; ``stop()`` removes it.

    Connect with ``dsn(dbname)`` (trust auth as superuser ``postgres`` over TCP on
    127.0.0.1). Never listens on 5432 or on anything but loopback.
    """

    def __init__(
        self,
        *,
        bindir: str | None = None,
        durable: bool = False,
        settings: dict[str, str] | None = None,
        parent: Path | None = None,
    ) -> None:
        initdb = find_binary("initdb") if bindir is None else os.path.join(bindir, "initdb")
        if initdb is None:
            raise PostgresError("initdb not found in /usr/lib/postgresql/*/bin or PATH")
        self.bindir = os.path.dirname(initdb)
        self.durable = durable
        self.settings = dict(settings or {})
        self.parent = parent  # where the temporary directory goes (e.g. a small tmpfs)
        self.host = "127.0.0.1"
        self.port = 0
        self.user = "postgres"
        self.root: Path | None = None
        self._run_as: list[str] = []
        self._uid: int | None = None
        self._gid: int | None = None
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise PostgresError(
                    "running as root, and initdb refuses root: a 'postgres' system user is "
                    "needed (install the postgresql package)"
                ) from exc
            self._run_as = ["runuser", "-u", "postgres", "--"]
            self._uid, self._gid = pw.pw_uid, pw.pw_gid

    # -- paths ---------------------------------------------------------------------------

    @property
    def datadir(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "data"

    @property
    def logfile(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "postgres.log"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{dbname}"

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> PostgresServer:
        """initdb into a fresh temporary directory and start on a free port (waits until ready)."""
        self.root = Path(tempfile.mkdtemp(prefix="clockd-pg-", dir=self.parent))
        track_dir(self.root)
        if self._uid is not None and self._gid is not None:
            os.chown(self.root, self._uid, self._gid)
        try:
            self._cmd(
                "initdb",
                "-D",
                str(self.datadir),
                "-A",
                "trust",
                "-U",
                self.user,
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            )
            self._write_config()
            last: Exception | None = None
            for _ in range(_START_ATTEMPTS):
                self.port = free_port()
                try:
                    self._pg_ctl_start()
                    return self
                except PostgresError as exc:  # most likely the port was taken meanwhile
                    last = exc
            raise PostgresError(f"PostgreSQL did not start: {last}")
        except BaseException:
            self._remove_root()
            raise

    def stop(self) -> None:
        """pg_ctl stop -m fast, then remove the directory. Safe to call twice."""
        if self.root is None:
            return
        pid = self.pid()
        if pid is not None and pid_alive(pid):
            try:
                self._cmd("pg_ctl", "-D", str(self.datadir), "-m", "fast", "-w", "-t", "30", "stop")
            except PostgresError:
                self.kill()
        if pid is not None:
            untrack(pid)
        self._remove_root()

    def kill(self) -> None:
        """SIGKILL the postmaster and its backends (a crash); the data directory stays."""
        pid = self.pid()
        if pid is None:
            return
        kids = children_of(pid)
        for p in [pid, *kids]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(pid_alive(p) for p in [pid, *kids]) and time.monotonic() < deadline:
            time.sleep(0.02)
        untrack(pid)
        # Orphans are reparented to PID 1, which may never reap them (it does not in these
        # containers); PostgreSQL's own check, kill(pid, 0), would then see the zombie as a
        # live postmaster and refuse to start. The process is gone, so the lock file is stale.
        assert self.root is not None
        for stale in (
            self.datadir / "postmaster.pid",
            self.root / f".s.PGSQL.{self.port}.lock",
            self.root / f".s.PGSQL.{self.port}",
        ):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()

    def restart(self) -> None:
        """Stop (fast) if running, then start again on the same port and data directory."""
        pid = self.pid()
        if pid is not None and pid_alive(pid):
            self._cmd("pg_ctl", "-D", str(self.datadir), "-m", "fast", "-w", "-t", "30", "stop")
            untrack(pid)
        self._pg_ctl_start()

    def pid(self) -> int | None:
        """The postmaster's PID from postmaster.pid, or None."""
        if self.root is None:
            return None
        try:
            first = (self.datadir / "postmaster.pid").read_text().split("\n", 1)[0]
        except OSError:
            return None
        return int(first) if first.strip().isdigit() else None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- databases -----------------------------------------------------------------------

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.dsn(dbname), autocommit=True, connect_timeout=10)

    def create_database(self, name: str, template: str | None = None) -> str:
        """CREATE DATABASE name [TEMPLATE template]; returns its DSN."""
        stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            stmt = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
        with self.connect() as conn:
            conn.execute(stmt)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """DROP DATABASE IF EXISTS name WITH (FORCE): lingering sessions are terminated."""
        with self.connect() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    # -- internals -----------------------------------------------------------------------

    def _write_config(self) -> None:
        assert self.root is not None
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.root}'",
            "jit": "off",
            "max_connections": "200",
            "shared_buffers": "128MB",
            "max_wal_size": "1GB",
            "log_min_messages": "warning",
            "logging_collector": "off",
        }
        if not self.durable:
            conf |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        conf |= self.settings
        with open(self.datadir / "postgresql.conf", "a") as f:
            f.write("\n# clockd test harness\n")
            for key, value in conf.items():
                f.write(f"{key} = {value}\n")

    def _pg_ctl_start(self) -> None:
        try:
            self._cmd(
                "pg_ctl",
                "-D",
                str(self.datadir),
                "-l",
                str(self.logfile),
                "-w",
                "-t",
                "60",
                "-o",
                f"-p {self.port}",
                "start",
            )
        except PostgresError as exc:
            raise PostgresError(f"{exc}\n--- server log ---\n{tail(self.logfile)}") from None
        pid = self.pid()
        if pid is not None:
            track(pid)

    def _cmd(self, tool: str, *args: str) -> None:
        argv = [*self._run_as, os.path.join(self.bindir, tool), *args]
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=self.root,
        )
        if proc.returncode != 0:
            raise PostgresError(f"{tool} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")

    def _remove_root(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            untrack_dir(self.root)
            self.root = None
