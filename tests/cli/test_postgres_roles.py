"""The PostgreSQL role split: each clockctl command works with the least role it needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.harness import PostgresServer

BIN = Path(sys.executable).parent


def _run(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CLOCKD_STORE": dsn, "CLOCKD_LOG_FORMAT": "text"}
    return subprocess.run([str(BIN / args[0]), *args[1:]], env=env, capture_output=True, text=True, timeout=60)


def test_readonly_operator_and_daemon_roles(pg_server: PostgresServer) -> None:
    name = f"roles_{uuid.uuid4().hex[:8]}"
    owner_dsn = pg_server.create_database(name)
    try:
        migrated = _run(owner_dsn, "clockd", "migrate", "--create-roles")
        assert migrated.returncode == 0, migrated.stderr
        suffix = uuid.uuid4().hex[:6]
        ro, op = f"ro_{suffix}", f"op_{suffix}"
        with pg_server.connect(name) as conn:
            conn.execute(f"CREATE ROLE {ro} LOGIN IN ROLE clockd_readonly")
            conn.execute(f"CREATE ROLE {op} LOGIN IN ROLE clockd_operator")
            conn.commit()
        ro_dsn = owner_dsn.replace("postgres@", f"{ro}@")
        op_dsn = owner_dsn.replace("postgres@", f"{op}@")
        assert ro_dsn != owner_dsn and op_dsn != owner_dsn

        added = _run(op_dsn, "clockctl", "add", "0 9 * * *", "--name", "report", "--", "/bin/true")
        assert added.returncode == 0, added.stderr
        assert _run(op_dsn, "clockctl", "pause", "report").returncode == 0
        assert _run(op_dsn, "clockctl", "resume", "report").returncode == 0
        assert _run(op_dsn, "clockctl", "run-now", "report").returncode == 0

        for verb in (["list"], ["show", "report"], ["runs", "report"]):
            result = _run(ro_dsn, "clockctl", *verb, "-o", "json")
            assert result.returncode == 0, (verb, result.stderr)
            json.loads(result.stdout)

        refused = _run(ro_dsn, "clockctl", "add", "* * * * *", "--name", "nope", "--", "/bin/true")
        assert refused.returncode == 4
        assert "refused" in refused.stderr and "clockd_operator" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        listed = json.loads(_run(ro_dsn, "clockctl", "list", "-o", "json").stdout)
        assert [d["name"] for d in listed] == ["report"]
    finally:
        pg_server.drop_database(name)


def test_migrate_keeps_the_roles_grants_on_every_table(pg_server: PostgresServer, tmp_path: Path) -> None:
    """The group roles are cluster-wide and outlive a schema: `clockd migrate` gives them
    what a new table needs (schema 0009's schedule_labels had no grants for roles made
    before it, so an operator's `clockctl apply`, which labels what it manages, was refused
    until `--create-roles` was run again) — in an upgraded database and in a new one."""
    upgraded, fresh = (f"roles_{uuid.uuid4().hex[:8]}" for _ in range(2))
    upgraded_dsn = pg_server.create_database(upgraded)
    fresh_dsn = pg_server.create_database(fresh)
    suffix = uuid.uuid4().hex[:6]
    op = f"op_{suffix}"
    try:
        made = _run(upgraded_dsn, "clockd", "migrate", "--create-roles")
        assert made.returncode == 0, made.stderr
        with pg_server.connect(upgraded) as conn:
            # What a database upgraded to 0009 after --create-roles looked like.
            conn.execute("REVOKE ALL ON schedule_labels FROM clockd_readonly, clockd_operator, clockd_daemon")
            conn.execute(f"CREATE ROLE {op} LOGIN IN ROLE clockd_operator")
        schedules = tmp_path / "jobs.yaml"
        schedules.write_text('jobs:\n  - name: nightly\n    schedule: "0 9 * * *"\n    command: ["/bin/true"]\n')

        for name, dsn in ((upgraded, upgraded_dsn), (fresh, fresh_dsn)):
            migrated = _run(dsn, "clockd", "migrate")
            assert migrated.returncode == 0, migrated.stderr
            with pg_server.connect(name) as conn:
                missing = conn.execute(
                    "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v', 'p') "
                    "AND NOT has_table_privilege('clockd_daemon', c.oid, 'SELECT') "
                    "ORDER BY 1"
                ).fetchall()
            assert missing == [], (name, missing)
            applied = _run(dsn.replace("postgres@", f"{op}@"), "clockctl", "apply", "-f", str(schedules))
            assert applied.returncode == 0, (name, applied.stderr)
    finally:
        pg_server.drop_database(upgraded)
        pg_server.drop_database(fresh)
        with pg_server.connect() as conn:
            conn.execute(f"DROP ROLE IF EXISTS {op}")
