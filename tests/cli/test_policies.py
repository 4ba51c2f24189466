"""clockctl's policy verbs and options on the embedded store: add with policies and an
idempotency key, update, show --versions, resume --from, dlq, tenant, preview --window."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from clockd.core.ids import occurrence_id
from clockd.core.model import AttemptOutcome, OccurrenceState
from clockd.store import Completion, CursorAdvance, Fence, NewOccurrence
from clockd.store.sqlite import SqliteStore
from tests.cli.conftest import STORE_AND_API, make_ctl
from tests.harness.home import existing_store

BIN = Path(sys.executable).parent


@pytest.fixture
def ctl(tmp_path: Path) -> Any:
    env = {**os.environ, "CLOCKD_HOME": str(tmp_path / "home")}
    env.pop("CLOCKD_STORE", None)
    existing_store(tmp_path / "home")  # clockd has run here: reads find an empty store

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "clockctl"), *args], env=env, capture_output=True, text=True, timeout=60)

    run.db = tmp_path / "home" / "clockd.db"  # type: ignore[attr-defined]  # test helper attribute
    return run


@pytest.fixture(params=STORE_AND_API)
def both(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """clockctl on the store, and through a real clockd's HTTP API (tests.cli.conftest)."""
    return make_ctl(tmp_path, request)


def doc(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_add_with_policies_shows_them_and_the_start_of_each_run_in_its_window(ctl: Any) -> None:
    added = doc(
        ctl(
            "add", "*/5 * * * *", "--name", "spread", "--window", "2m", "--misfire", "catch_up",
            "--catch-up-limit", "3", "--max-lateness", "90s", "--overlap", "queue_one",
            "--permanent-exit-codes", "64,2", "-o", "json", "--", "/bin/true",
        )
    )  # fmt: skip
    assert (added["misfire"], added["catch_up_limit"], added["max_lateness"]) == ("catch_up", 3, "1m30s")
    assert (added["overlap"], added["window"], added["permanent_exit_codes"]) == ("queue_one", "2m", [2, 64])
    shown = doc(ctl("show", "spread", "-o", "json"))
    assert shown["next_runs"] == added["next_runs"]
    for run, start in zip(shown["next_runs"], shown["next_starts"], strict=True):
        offset = datetime.fromisoformat(start) - datetime.fromisoformat(run)
        assert timedelta(0) <= offset < timedelta(minutes=2)
    assert len(set(shown["next_starts"])) == 5
    table = ctl("show", "spread")
    assert "queue_one" in table.stdout and "at most 3 late runs" in table.stdout and "starts " in table.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--window", "6m"], "window: 6m is not between 0 (strict) and 5m"),
        (["--misfire", "sometimes"], "sometimes"),
        (["--overlap", "never"], "never"),
        (["--max-lateness", "0s"], "max_lateness: must be at least 1s"),
        (["--catch-up-limit", "-1"], "catch_up_limit"),
        (["--permanent-exit-codes", "2,x"], "--permanent-exit-codes"),
    ],
)
def test_bad_policy_options_exit_2_and_add_nothing(ctl: Any, args: list[str], needle: str) -> None:
    result = ctl("add", "* * * * *", "--name", "bad", *args, "--", "/bin/true")
    assert result.returncode == 2, result
    assert needle in result.stderr
    assert doc(ctl("list", "-o", "json")) == []


def test_an_idempotency_key_adds_once_and_refuses_another_definition(both: Any) -> None:
    ctl = both
    args = ("add", "0 3 * * *", "--name", "nightly", "--idempotency-key", "deploy-42")
    first = doc(ctl(*args, "-o", "json", "--", "/bin/true"))
    assert first["already_existed"] is False
    again = ctl(*args, "--", "/bin/true")
    assert again.returncode == 0 and "already exists" in again.stdout and first["id"] in again.stdout
    twice = doc(ctl(*args, "-o", "json", "--", "/bin/true"))
    assert (twice["id"], twice["already_existed"]) == (first["id"], True)
    other = ctl("add", "0 4 * * *", "--name", "nightly", "--idempotency-key", "deploy-42", "--", "/bin/true")
    assert other.returncode == 1 and "deploy-42" in other.stderr and other.stdout == ""
    assert [d["name"] for d in doc(ctl("list", "-o", "json"))] == ["nightly"]


def test_update_writes_a_version_and_show_lists_the_versions(both: Any) -> None:
    ctl = both
    ctl("add", "*/5 * * * *", "--name", "report", "--", "/usr/bin/report", "--full")
    result = ctl("update", "report", "--cron", "30 9 * * 1-5", "--tz", "Europe/Paris", "--overlap", "skip")
    assert result.returncode == 0, result.stderr
    assert "version 1 → 2" in result.stdout
    # On the store nothing was planned yet; through the API the module's daemon may have
    # planned the next */5 runs: each canceled one is then re-planned or dropped, and said.
    found = re.search(r"canceled (\d+) pending", result.stdout)
    assert found, result.stdout
    said = "dropped" in result.stdout or "re-planned" in result.stdout
    assert int(found[1]) == 0 or (ctl.via == "api" and said), result.stdout
    updated = doc(ctl("update", "report", "--command", "/usr/bin/report --short", "-o", "json"))
    assert (updated["version"], updated["previous_version"], updated["canceled"]) == (3, 2, 0)
    assert updated["target"]["argv"] == ["/usr/bin/report", "--short"]
    assert (updated["expr"], updated["tz"], updated["overlap"]) == ("30 9 * * 1-5", "Europe/Paris", "skip")
    assert "unchanged" in ctl("update", "report", "--overlap", "skip").stdout
    shown = doc(ctl("show", "report", "-o", "json"))
    assert [(v["version"], v["expr"], v["valid_to"] is None) for v in shown["versions"]] == [
        (1, "*/5 * * * *", False),
        (2, "30 9 * * 1-5", False),
        (3, "30 9 * * 1-5", True),
    ]
    table = ctl("show", "report", "--versions").stdout
    assert "versions:" in table and "current" in table
    bad = ctl("update", "report", "--cron", "0 * * * *", "--every", "1h")
    assert bad.returncode == 2 and "one of --cron, --every or --at" in bad.stderr


def test_resume_from_now_or_from_the_pause(both: Any) -> None:
    ctl = both
    ctl("add", "*/5 * * * *", "--name", "job", "--", "/bin/true")
    ctl("pause", "job")
    assert doc(ctl("resume", "job", "--from", "paused-at", "-o", "json"))["state"] == "active"
    ctl("pause", "job")
    assert "next run:" in ctl("resume", "job", "--from", "now").stdout
    bad = ctl("resume", "job", "--from", "yesterday")
    assert bad.returncode == 2


def test_tenant_limits_are_set_listed_and_refuse_a_create_over_quota(ctl: Any) -> None:
    assert ctl("tenant", "set", "acme", "--max-schedules", "1", "--max-running", "5").returncode == 0
    assert ctl("add", "* * * * *", "--name", "a", "--tenant", "acme", "--", "/bin/true").returncode == 0
    refused = ctl("add", "* * * * *", "--name", "b", "--tenant", "acme", "--", "/bin/true")
    assert refused.returncode == 1
    assert "tenant acme is at its limit of 1 active schedules" in refused.stderr
    listed = {t["tenant"]: t for t in doc(ctl("tenant", "list", "-o", "json"))}
    assert listed["acme"]["schedules"] == 1 and listed["acme"]["max_running"] == 5
    cleared = doc(ctl("tenant", "set", "acme", "--max-schedules", "none", "-o", "json"))
    assert (cleared["max_schedules"], cleared["max_running"]) == (None, 5)  # the others kept
    assert ctl("add", "* * * * *", "--name", "b", "--tenant", "acme", "--", "/bin/true").returncode == 0
    assert ctl("tenant", "set", "acme").returncode == 2
    assert ctl("tenant", "set", "acme", "--max-running", "-3").returncode == 2


async def _make_dead(db: Path, name: str) -> str:
    """Run the schedule's first occurrence into the dead-letter queue, as a worker would."""
    store = SqliteStore(db)
    await store.open()
    try:
        schedule = await store.get_schedule("default", name)
        assert schedule is not None and schedule.next_run_at is not None
        at = schedule.next_run_at
        oid = occurrence_id(schedule.id, schedule.version, at)
        new = NewOccurrence(oid, schedule.id, schedule.version, at, at, "default", "default", 1)
        cursor = CursorAdvance(schedule.id, schedule.version, at, at + timedelta(days=1))
        now = datetime.now(UTC)
        await store.materialize(Fence("shard:0", 1), [new], [cursor], now)
        await store.relay(at, 10, now)
        [claim] = await store.claim(["default"], "w", 10, timedelta(minutes=1), at)
        failed = Completion(claim.lease_token, AttemptOutcome.FAILED, OccurrenceState.DEAD, exit_code=64, error="boom")
        await store.finish([failed], at)
        return oid
    finally:
        await store.close()


def test_dlq_list_replay_and_drop(ctl: Any) -> None:
    ctl("add", "0 0 1 1 *", "--name", "yearly", "--permanent-exit-codes", "64", "--", "/bin/false")
    assert ctl("dlq", "list").stdout == "no dead letters in tenant 'default' (--tenant NAME for another tenant's)\n"
    oid = asyncio.run(_make_dead(ctl.db, "yearly"))
    [dead] = doc(ctl("dlq", "list", "yearly", "-o", "json"))
    assert (dead["id"], dead["state"], dead["last_error"], dead["exit_code"]) == (oid, "DEAD", "boom", 64)
    assert "boom" in ctl("dlq", "list").stdout
    replayed = doc(ctl("dlq", "replay", oid[:10], "-o", "json"))
    assert (replayed["id"], replayed["state"], replayed["attempts"]) == (oid, "ENQUEUED", 1)
    assert doc(ctl("dlq", "list", "-o", "json")) == []
    again = ctl("dlq", "replay", oid)
    assert again.returncode == 1 and "not in the dead-letter queue" in again.stderr
    assert ctl("dlq", "drop", "ffffffff-0000").returncode == 1


def test_dlq_drop_cancels_and_keeps_history(ctl: Any) -> None:
    ctl("add", "0 0 1 1 *", "--name", "yearly", "--", "/bin/false")
    oid = asyncio.run(_make_dead(ctl.db, "yearly"))
    dropped = ctl("dlq", "drop", oid)
    assert dropped.returncode == 0 and "CANCELED" in dropped.stdout
    [run] = doc(ctl("runs", "yearly", "--upcoming", "-o", "json"))
    assert (run["state"], run["reason"]) == ("CANCELED", "dropped from the dead-letter queue (was: boom)")


def test_preview_window_shows_the_span_each_run_starts_in(ctl: Any) -> None:
    after = ("--after", "2026-03-01T00:00:00Z")
    fires = doc(ctl("preview", "0 9 * * *", *after, "-n", "2", "--window", "5m", "-o", "json"))
    assert [(f["utc"], f["starts_by"]) for f in fires] == [
        ("2026-03-01T09:00:00Z", "2026-03-01T09:05:00Z"),
        ("2026-03-02T09:00:00Z", "2026-03-02T09:05:00Z"),
    ]
    assert ctl("preview", "0 9 * * *", "--window", "10m").returncode == 2
