"""A clockd cluster on one machine for the failure drills: real PostgreSQL, real etcd,
one ``clockd run --mode …`` process per role, and a reconciliation that accounts for
every expected instant exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from tests.e2e.conftest import api_url_in, wait_for

BIN = Path(sys.executable).parent

# Short leases keep the drills short; the ratios match production (TTL 10 s, refresh TTL/3).
FAST = (
    "--lease-ttl", "3s", "--visibility-timeout", "4s", "--heartbeat", "1s",
    "--drain-grace", "5s", "--kill-grace", "1s", "--horizon", "20s",
)  # fmt: skip


@dataclass
class Proc:
    name: str
    modes: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def log_lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def actions(self, action: str) -> list[dict[str, Any]]:
        return [d for d in self.log_lines() if d.get("action") == action]

    def api_url(self, within: float = 30) -> str:
        """The URL this process's API serves, from its last ``api_listening`` line: start it
        with ``--api-addr 127.0.0.1:0`` (a port picked ahead can be taken meanwhile)."""
        return wait_for("the api to listen", lambda: api_url_in(self.log_path.read_text(errors="replace")), within)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class Cluster:
    dsn: str
    etcd: list[str]
    workdir: Path
    name: str = field(default_factory=lambda: f"drill-{uuid.uuid4().hex[:8]}")
    procs: dict[str, Proc] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "CLOCKD_METRICS_ADDR": "off",
            "CLOCKD_API_ADDR": "127.0.0.1:0",  # an ephemeral port: processes never collide
            "CLOCKD_LOG_FORMAT": "json",
        }
        env["CLOCKD_STORE"] = self.dsn
        env.pop("CLOCKD_CONFIG", None)
        return env

    def migrate(self, bin_dir: Path = BIN) -> None:
        """``clockd migrate``, of this release or of the one in ``bin_dir``."""
        subprocess.run([str(bin_dir / "clockd"), "migrate"], env=self.env, check=True, capture_output=True, timeout=60)

    def start(
        self,
        name: str,
        modes: str,
        *extra: str,
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
        etcd: list[str] | None = None,
        bin_dir: Path = BIN,
    ) -> Proc:
        """Start ``clockd run`` as node ``name``; ``prefix`` wraps the command (e.g. ``ip
        netns exec …``, which execs it: the PID is clockd's), ``etcd`` overrides the
        endpoints (a namespaced process reaches etcd through a relay), ``bin_dir`` runs
        another release's ``clockd`` (``tests.harness.release``)."""
        log_path = self.workdir / f"{name}.log"
        popen = subprocess.Popen(
            [
                *(prefix or []),
                str(bin_dir / "clockd"),
                "run",
                "--mode",
                modes,
                "--etcd",
                ",".join(etcd or self.etcd),
                "--cluster",
                self.name,
                "--node-id",
                name,
                *FAST,
                *extra,
            ],
            env={**self.env, **(env or {})},
            stdout=log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc = Proc(name, modes, popen, log_path)
        self.procs[name] = proc
        wait_for(f"{name} to start", lambda: proc.actions("started") or not proc.alive(), 30)
        assert proc.alive(), proc.log_path.read_text()
        return proc

    def ctl(self, *args: str, bin_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
        """clockctl of this release (or of the one in ``bin_dir``: an older release's, which
        a schema it does not know yet would refuse)."""
        result = subprocess.run(
            [str((bin_dir or BIN) / "clockctl"), *args], env=self.env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        return result

    def stop_all(self) -> None:
        """Stop every process, then print the end of each one's log: pytest shows a
        test's captured output only when it fails, and a drill's assertion says what did
        not happen, not what each process was doing meanwhile."""
        for proc in self.procs.values():
            if proc.alive():
                try:
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.popen.terminate()
                    proc.popen.wait(20)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    proc.popen.kill()
                    proc.popen.wait(10)
        for proc in self.procs.values():
            lines = proc.log_path.read_text(errors="replace").splitlines() if proc.log_path.exists() else []
            print(f"--- {proc.name} ({proc.modes}), the last {min(40, len(lines))} of {len(lines)} log lines")
            for line in lines[-40:]:
                print(line[:400])

    def leader(self) -> Proc | None:
        """The process whose latest leadership log line says it leads."""
        for proc in self.procs.values():
            if not proc.alive():
                continue
            events = [d for d in proc.log_lines() if d.get("action") in ("leadership_acquired", "leadership_lost")]
            if events and events[-1]["action"] == "leadership_acquired":
                return proc
        return None

    def materialized_past(self, cursor_before: dict[str, datetime | None], horizon: float = 20) -> bool:
        """Every schedule whose cursor was due within the horizon (FAST: what a paused
        materializer may hold) has had its cursor moved past where it was."""
        due_by = now() + timedelta(seconds=horizon)
        for sid, cursor in self.rows("SELECT id, next_run_at FROM schedules"):
            before = cursor_before.get(sid)
            if before is not None and before <= due_by and (cursor is None or cursor <= before):
                return False
        return True

    # -- accounting ------------------------------------------------------------------

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def reconcile(self, start: datetime, end: datetime, settle: timedelta = timedelta(seconds=0)) -> dict[str, int]:
        """:func:`reconcile` over this cluster's store."""
        return reconcile(self.env, start, end, settle)


def reconcile(
    env: dict[str, str], start: datetime, end: datetime, settle: timedelta = timedelta(seconds=0)
) -> dict[str, int]:
    """The product's reconciler (``clockctl reconcile --all -o json``): every instant each
    schedule should have fired in [start, end] has exactly one occurrence (none missing,
    doubled or unexpected), and for the drills that occurrence SUCCEEDED. Returns counts
    for the report."""
    end = max(end, start)  # a drill that ends within a second of its start expects nothing
    result = subprocess.run(
        [
            str(BIN / "clockctl"), "reconcile", "--all", "-o", "json",
            "--from", _iso(start), "--to", _iso(end + settle),
        ],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    doubled = [p for p in report["problems"] if p["status"] == "doubled"]
    assert doubled == [], f"instants materialized twice: {doubled[:5]}"
    missing = [p for p in report["problems"] if p["status"] != "doubled"]
    assert missing == [], f"{len(missing)} expected instants are not accounted for: {missing[:5]}"
    assert result.returncode == 0, report
    not_done = [(i["schedule"], i["instant"], i["status"]) for i in report["instants"] if i["status"] != "SUCCEEDED"]
    assert not_done == [], f"{len(not_done)} occurrences did not succeed: {not_done[:5]}"
    return {"expected": int(report["expected"])}


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat()


def now() -> datetime:
    return datetime.now(UTC)
