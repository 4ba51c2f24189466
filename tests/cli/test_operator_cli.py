"""clockctl reconcile / explain / status on the embedded store, without a daemon: output and exit codes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import STORE_AND_API, make_ctl

BIN = Path(sys.executable).parent


@pytest.fixture
def ctl(tmp_path: Path) -> Any:
    env = {**os.environ, "CLOCKD_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    env.pop("CLOCKD_STORE", None)
    env.pop("CLOCKD_ETCD", None)
    env["CLOCKD_CONFIG"] = str(tmp_path / "none.yaml")
    (tmp_path / "none.yaml").write_text("{}\n")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "clockctl"), *args], env=env, capture_output=True, text=True, timeout=60)

    run.db = tmp_path / "home" / "clockd.db"  # type: ignore[attr-defined]  # test helper attribute
    return run


def _us(instant: datetime) -> int:
    return int((instant - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))


def test_reconcile_exit_codes_and_json(ctl: Any) -> None:
    assert ctl("add", "* * * * *", "--name", "m", "--noop").returncode == 0
    clean = ctl("reconcile", "--from", "now-1h", "--to", "now+10m")
    assert clean.returncode == 0, clean.stderr
    assert "all accounted for" in clean.stdout and "not_yet_due" in clean.stdout
    # An occurrence at an instant nobody expects (half past a minute): exit 1, listed.
    odd = (datetime.now(UTC) - timedelta(minutes=5)).replace(second=30, microsecond=0)
    conn = sqlite3.connect(ctl.db)
    with conn:
        (sid,) = conn.execute("SELECT id FROM schedules").fetchone()
        conn.execute(
            "INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for, "
            "available_at, state, attempts, max_attempts) VALUES ('odd', ?, 1, 'default', 'default', ?, ?, "
            "'SUCCEEDED', 1, 3)",
            (sid, _us(odd), _us(odd)),
        )
    conn.close()
    bad = ctl("reconcile", "m", "--from", "now-1h", "-o", "json")
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert doc["ok"] is False and doc["unaccounted"] == 1
    [problem] = doc["problems"]
    assert (problem["schedule"], problem["status"], problem["occurrences"][0]["id"]) == ("m", "unexpected", "odd")
    table = ctl("reconcile", "--from", "now-1h")
    assert table.returncode == 1 and "unexpected" in table.stdout and "1 not accounted for" in table.stderr
    # --tenant without NAME checks that tenant's schedules only (it checked every tenant's).
    other = ctl("reconcile", "--from", "now-1h", "--tenant", "elsewhere", "-o", "json")
    assert other.returncode == 0 and json.loads(other.stdout)["schedules"] == 0, other
    assert (
        json.loads(ctl("reconcile", "--from", "now-1h", "--tenant", "default", "-o", "json").stdout)["schedules"] == 1
    )
    assert ctl("reconcile", "--from", "now", "--to", "now-1h").returncode == 2
    assert ctl("reconcile", "ghost").returncode == 1


@pytest.fixture(params=STORE_AND_API)
def both(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """clockctl on the store, and through a real clockd's HTTP API (tests.cli.conftest)."""
    return make_ctl(tmp_path, request, columns="200")


def test_explain_table_and_json(both: Any) -> None:
    ctl = both
    ctl("add", "30 2 * * *", "--tz", "Europe/Paris", "--name", "paris", "--noop")
    gap = ctl("explain", "paris", "--at", "2027-03-28T02:30")
    assert gap.returncode == 0, gap.stderr
    assert "dst_gap" in gap.stdout and "DST gap: 02:30 does not exist on 2027-03-28, skipped" in gap.stdout
    doc = json.loads(ctl("explain", "paris", "--at", "2030-01-01T01:30:00Z", "-o", "json").stdout)
    assert doc["why"] == "not_yet_due" and doc["at"] == "2030-01-01T01:30:00Z"
    assert ctl("explain", "paris", "--at", "soon").returncode == 2


def test_status_without_a_daemon(ctl: Any) -> None:
    ctl("add", "* * * * *", "--name", "m", "--noop")
    result = ctl("status", "-o", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["coordination"]["kind"] == "embedded" and doc["coordination"]["lock"]["held"] is False
    assert doc["unaccounted"]["count"] == 0
    table = ctl("status")
    assert "not held: no clockd is running on it" in table.stdout


def test_reconcile_of_one_schedule_on_the_store_and_over_the_api(both: Any) -> None:
    assert both("add", "* * * * *", "--name", "m", "--noop").returncode == 0
    clean = both("reconcile", "m", "--from", "now-1h", "--to", "now+10m")
    assert clean.returncode == 0, clean.stderr
    assert "all accounted for" in clean.stdout and "not_yet_due" in clean.stdout
    doc = json.loads(both("reconcile", "m", "--from", "now-1h", "--to", "now+10m", "--all", "-o", "json").stdout)
    assert doc["ok"] is True and doc["schedules"] == 1 and doc["problems"] == []
    # Accounted for (a run may have fired, the daemon runs over the API): Status's values.
    assert {i["status"] for i in doc["instants"]} <= {"not_yet_due", "SUCCEEDED", "RUNNING", "queued"}
    assert both("reconcile", "m", "--from", "now", "--to", "now-1h").returncode == 2
    assert both("reconcile", "ghost").returncode == 1


def test_status_on_the_store_and_over_the_api(both: Any) -> None:
    both("add", "* * * * *", "--name", "m", "--noop")
    result = both("status", "-o", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["coordination"]["kind"] == "embedded" and doc["unaccounted"]["count"] == 0
    # Over the API it is the daemon's view: the daemon holds the store's lock.
    assert doc["coordination"]["lock"]["held"] is (both.via == "api")
    table = both("status")
    assert table.returncode == 0 and "clock offset" in table.stdout and "backlog" in table.stdout
