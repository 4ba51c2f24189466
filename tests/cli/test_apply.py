"""``clockctl apply`` and ``export`` on the embedded store, run as the real program: the
diff, idempotence, dry runs, all-or-nothing refusals with ``file:line``, prune, the
export round trip (HTTP targets, users, limits and secret references included),
hostile files, and the progress bar."""

from __future__ import annotations

import io
import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from clockctl.commands.files import PROGRESS_THRESHOLD, _progress
from clockd.formats.schedfile import FIELD_NAMES
from tests.cli.conftest import STORE_AND_API, make_ctl

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "schedules.d"


@pytest.fixture(params=STORE_AND_API)
def ctl(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """clockctl on the store, and through a real clockd's HTTP API (tests.cli.conftest)."""
    return make_ctl(tmp_path, request, columns="200", cwd=tmp_path)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def names(ctl: Any, *args: str) -> list[str]:
    return [d["name"] for d in json.loads(ctl("list", "-o", "json", *args).stdout)]


A = """\
jobs:
  - name: nightly-report
    schedule: "0 9 * * *"
    tz: Europe/Paris
    command: ["/usr/local/bin/report.sh", "--daily"]
    timeout: 30m
  - name: tick
    every: 90m
    command: "echo tick"
    shell: true
"""
B = """\
jobs:
  - name: heartbeat
    every: 1m
    noop: true
"""


def test_apply_creates_then_says_no_changes(ctl: Any, tmp_path: Path) -> None:
    write(tmp_path / "schedules.d" / "a.yaml", A)
    write(tmp_path / "schedules.d" / "b.yml", B)
    first = ctl("apply", "-f", "schedules.d")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[0] == "+ create nightly-report  (schedules.d/a.yaml:2)"
    assert lines[1].startswith("      next run: 20") and (
        "T09:00:00+01:00 (" in lines[1] or "T09:00:00+02:00 (" in lines[1]
    )
    assert lines[2] == "+ create tick  (schedules.d/a.yaml:7)"
    assert lines[4] == "+ create heartbeat  (schedules.d/b.yml:2)"
    assert lines[-2] == "3 to create, 0 to update, 0 to delete, 0 unchanged"
    assert lines[-1] == "applied: 3 created, 0 updated, 0 deleted"
    assert names(ctl) == ["heartbeat", "nightly-report", "tick"]

    second = ctl("apply", "-f", "schedules.d")
    assert second.returncode == 0, second.stderr
    assert second.stdout == "no changes (3 unchanged)\n"


def test_update_prints_the_changed_fields_and_bumps_the_version(ctl: Any, tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", A)
    assert ctl("apply", "-f", str(path)).returncode == 0
    write(path, A.replace('"0 9 * * *"', '"0 10 * * 1-5"').replace("timeout: 30m", "retries: 5"))
    result = ctl("apply", "-f", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:4] == [
        f"~ update nightly-report  ({path}:2)",
        '      schedule: "0 9 * * *" → "0 10 * * 1-5"',
        '      timeout: "30m" → (none)',
        "      retries: 2 → 5",
    ]
    assert lines[4].startswith("      next run: 20") and "T10:00:00+0" in lines[4]
    assert "0 to create, 1 to update, 0 to delete, 1 unchanged" in result.stdout
    doc = json.loads(ctl("show", "nightly-report", "-o", "json").stdout)
    assert (doc["version"], doc["expr"], doc["retries"], doc["timeout"]) == (2, "0 10 * * 1-5", 5, None)


def test_dry_run_writes_nothing(ctl: Any, tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", A)
    result = ctl("apply", "-f", str(path), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "+ create nightly-report" in result.stdout
    assert (
        result.stdout.splitlines()[-1] == "2 to create, 0 to update, 0 to delete, 0 unchanged; dry run: nothing written"
    )
    assert names(ctl) == []


def test_one_bad_file_among_good_ones_applies_nothing(ctl: Any, tmp_path: Path) -> None:
    write(tmp_path / "schedules.d" / "a.yaml", A)
    write(
        tmp_path / "schedules.d" / "b.yaml",
        """\
jobs:
  - name: ok
    every: 1h
    noop: true
  - name: broken
    tz: Europe/Paris
    schedule: "61 * * * *"
    command: [/bin/true]
    retries: lots
    colour: blue
""",
    )
    write(tmp_path / "schedules.d" / "c.yaml", B)
    result = ctl("apply", "-f", "schedules.d")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "schedules.d/b.yaml:7: schedule: minute: 61 is out of range 0-59",
        "schedules.d/b.yaml:9: retries: expected an integer, got a string",
        f"schedules.d/b.yaml:10: colour: unknown field (valid: {', '.join(FIELD_NAMES)})",
        "3 error(s); nothing was applied",
    ]
    assert names(ctl) == []


def test_duplicate_names_across_files_name_both_places(ctl: Any, tmp_path: Path) -> None:
    write(tmp_path / "one.yaml", A)
    write(
        tmp_path / "two.yaml",
        "jobs:\n  - name: other\n    every: 1m\n    noop: true\n  - name: tick\n    every: 2m\n    noop: true\n",
    )
    result = ctl("apply", "-f", "one.yaml", "-f", "two.yaml")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "one.yaml:7: name: 'tick' is defined more than once (also at two.yaml:5)",
        "two.yaml:5: name: 'tick' is defined more than once (also at one.yaml:7)",
        "2 error(s); nothing was applied",
    ]
    assert names(ctl) == []


def test_a_hand_added_schedule_is_refused_by_name(ctl: Any, tmp_path: Path) -> None:
    assert ctl("add", "*/5 * * * *", "--name", "tick", "--", "/bin/true").returncode == 0
    path = write(tmp_path / "a.yaml", A)
    result = ctl("apply", "-f", str(path))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{path}:7: name: schedule 'tick' already exists and was not created by apply (added with clockctl add?); "
        "apply does not take it over: rename the entry, or remove the schedule first (clockctl rm tick)",
        "1 error(s); nothing was applied",
    ]
    assert names(ctl) == ["tick"]


def test_plan_time_problems_point_at_the_line(ctl: Any, tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "jobs:\n  - name: past\n    noop: true\n    at: 2020-01-01T00:00:00Z\n")
    result = ctl("apply", "-f", str(path))
    assert result.returncode == 2
    assert result.stderr.startswith(f"{path}:4: at: 2020-01-01T00:00:00Z is in the past (now ")


def test_prune_removes_only_apply_managed_schedules_of_the_tenant(ctl: Any, tmp_path: Path) -> None:
    both = write(tmp_path / "both.yaml", A)
    assert ctl("apply", "-f", str(both)).returncode == 0
    assert ctl("apply", "-f", str(both), "--tenant", "team-b").returncode == 0
    assert ctl("add", "0 * * * *", "--name", "handmade", "--", "/bin/true").returncode == 0
    one = write(tmp_path / "one.yaml", A.split("  - name: tick")[0])

    kept = ctl("apply", "-f", str(one))
    assert kept.stdout.splitlines()[-1] == (
        "1 schedule(s) created by apply are not in this input (kept; apply --prune deletes them): tick"
    )
    assert names(ctl, "--tenant", "default") == ["handmade", "nightly-report", "tick"]

    dry = ctl("apply", "-f", str(one), "--prune", "--dry-run")
    assert dry.stdout.splitlines()[0] == "- delete tick"
    pruned = ctl("apply", "-f", str(one), "--prune")
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.splitlines() == [
        "- delete tick",
        "0 to create, 0 to update, 1 to delete, 1 unchanged",
        "applied: 0 created, 0 updated, 1 deleted",
    ]
    assert names(ctl, "--tenant", "default") == ["handmade", "nightly-report"]
    assert names(ctl, "--tenant", "team-b") == ["nightly-report", "tick"]


def test_export_then_apply_is_a_no_op(ctl: Any, tmp_path: Path) -> None:
    applied = ctl("apply", "-f", str(EXAMPLES))
    assert applied.returncode == 0, applied.stderr
    assert ctl("pause", "heartbeat").returncode == 0
    assert ctl("add", "0 * * * *", "--name", "handmade", "--", "/bin/true").returncode == 0
    exported = ctl("export")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith("# clockd schedules of tenant 'default' (clockctl export).")
    assert "clockd.managed-by" not in exported.stdout and "handmade" not in exported.stdout
    assert exported.stderr.splitlines() == [
        "heartbeat is paused: the file carries its definition, not its state",
        "1 schedule(s) added by hand (not managed by apply) left out; --all includes them",
    ]
    path = write(tmp_path / "exported.yaml", exported.stdout)
    again = ctl("apply", "-f", str(path), "--prune")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "no changes (7 unchanged)\n"
    doc = json.loads(ctl("export", "-o", "json").stdout)
    assert [j["name"] for j in doc["jobs"]] == [
        "heartbeat", "monthly-billing", "new-year-maintenance", "nightly-report", "rotate-tokens", "sync-inventory",
        "warm-cache",
    ]  # fmt: skip
    everything = ctl("export", "--all")
    assert "name: handmade" in everything.stdout
    other = ctl("export", "--tenant", "nobody")
    assert other.stdout.endswith("jobs: []\n")


MORE = """\
jobs:
  - name: hook
    every: 5m
    http:
      method: post
      url: https://hooks.example.com/ping
      headers:
        - "Authorization: Bearer ${file:/etc/clockd/hook.token}"
        - [X-Dup, "1"]
        - "X-Dup: 2"
      body: |
        {"event": "ping"}
      expect_status: [200, 204]
      insecure: true
    misfire: catch_up
    catch_up_limit: 4
  - name: as-me
    schedule: "0 3 * * *"
    command: [/bin/true]
    user: USER
    env: {TOKEN: "${env:CLOCKD_TEST_TOKEN}"}
    env_from_file: /etc/clockd/job.env
    memory_limit: 256M
    cpu_limit: 90s
    nproc_limit: 32
    permanent_exit_codes: [64, 2]
"""


def test_http_targets_users_and_limits_round_trip_through_export(ctl: Any, tmp_path: Path) -> None:
    try:
        me = pwd.getpwuid(os.getuid()).pw_name  # a user that exists here, whatever the host
    except KeyError:
        pytest.skip("this uid has no name on this host")
    path = write(tmp_path / "more.yaml", MORE.replace("USER", me))
    applied = ctl("apply", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    docs = {d["name"]: d for d in json.loads(ctl("list", "-o", "json").stdout)}
    hook, job = docs["hook"], docs["as-me"]
    assert (hook["target"]["method"], hook["target"]["insecure"], hook["catch_up_limit"]) == ("POST", True, 4)
    assert hook["target"]["headers"] == [  # order and repeats kept; the reference as written
        ["Authorization", "Bearer ${file:/etc/clockd/hook.token}"],
        ["X-Dup", "1"],
        ["X-Dup", "2"],
    ]
    assert hook["target"]["expect_status"] == [200, 204] and hook["target"]["body"] == '{"event": "ping"}\n'
    assert {k: job["target"][k] for k in ("user", "env_from_file", "memory_limit", "cpu_limit", "nproc_limit")} == {
        "user": me,
        "env_from_file": "/etc/clockd/job.env",
        "memory_limit": 256 << 20,
        "cpu_limit": 90,
        "nproc_limit": 32,
    }
    assert job["permanent_exit_codes"] == [2, 64]

    exported = ctl("export")
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr == ""  # nothing left out
    out = exported.stdout
    assert "        - 'Authorization: Bearer ${file:/etc/clockd/hook.token}'\n" in out  # never resolved
    assert "      TOKEN: ${env:CLOCKD_TEST_TOKEN}\n" in out
    assert f"    user: {me}\n" in out and "    memory_limit: 256M\n    cpu_limit: 1m30s\n" in out
    again = ctl("apply", "-f", str(write(tmp_path / "exported.yaml", out)), "--prune")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "no changes (2 unchanged)\n"
    doc = json.loads(ctl("export", "-o", "json").stdout)
    # "Name: value" whenever that reads back the same, else a pair (padded values)
    assert doc["jobs"][1]["http"]["headers"][1:] == ["X-Dup: 1", "X-Dup: 2"]

    write(path, MORE.replace("USER", me).replace("/ping", "/pong"))
    changed = ctl("apply", "-f", str(path), "--dry-run")
    assert changed.returncode == 0, changed.stderr
    lines = changed.stdout.splitlines()
    assert lines[0] == f"~ update hook  ({path}:2)"
    assert lines[1].startswith('      http: {"method": "POST", "url": "https://hooks.example.com/ping"')
    assert '→ {"method": "POST", "url": "https://hooks.example.com/pong"' in lines[1]


def test_errors_of_http_and_user_fields_name_their_lines(ctl: Any, tmp_path: Path) -> None:
    path = write(
        tmp_path / "bad.yaml",
        """\
jobs:
  - name: hook
    every: 5m
    http:
      url: ftp://example.com
      headers: ["Idempotency-Key: 1"]
    user: root
  - name: job
    every: 5m
    command: [/bin/true]
    user: no-such-user-clockd-test
""",
    )
    result = ctl("apply", "-f", str(path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"{path}:4: http: method: required (e.g. GET or POST)",
        f"{path}:6: http: headers: item 1: Idempotency-Key is set by clockd (the occurrence id, scheduled time, "
        "attempt)",
        f"{path}:7: user: not allowed with http: (line 4), which runs no command",
        f"{path}:11: user: 'no-such-user-clockd-test' does not exist on this host (checked where clockctl runs; "
        "the worker checks again where the job runs)",
        "4 error(s); nothing was applied",
    ]
    assert names(ctl) == []


def test_json_output(ctl: Any, tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", A)
    doc = json.loads(ctl("apply", "-f", str(path), "-o", "json").stdout)
    assert doc["applied"] is True and doc["unchanged"] == 0
    assert [(c["action"], c["name"], c["source"]) for c in doc["changes"]] == [
        ("create", "nightly-report", f"{path}:2"),
        ("create", "tick", f"{path}:7"),
    ]
    write(path, A.replace("every: 90m", "every: 2h"))
    doc = json.loads(ctl("apply", "-f", str(path), "-o", "json", "--dry-run").stdout)
    assert doc["applied"] is False and doc["dry_run"] is True
    assert doc["changes"][0]["fields"] == [{"field": "every", "old": "1h30m", "new": "2h"}]


# -- hostile files -------------------------------------------------------------------------------

BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
jobs: *i
"""


def timed(ctl: Any, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    result = ctl(*args)
    return result, time.perf_counter() - started


@pytest.mark.serial  # a wall-time limit: measured alone, not beside the parallel suite
def test_anchor_bomb_and_oversize_file_are_refused_fast(ctl: Any, tmp_path: Path) -> None:
    empty = write(tmp_path / "empty.yaml", "jobs: []\n")
    baseline = min(timed(ctl, "apply", "-f", str(empty))[1] for _ in range(2))  # start-up cost

    bomb = write(tmp_path / "bomb.yaml", BOMB)
    result, elapsed = timed(ctl, "apply", "-f", str(bomb))
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        f"{bomb}:6: aliases here stand for more than 100000 values (an anchor bomb?): refused"
    )
    assert elapsed - baseline < 1.0, (elapsed, baseline)

    big = tmp_path / "big.yaml"
    with big.open("wb") as stream:
        stream.truncate(10 * 1024 * 1024 + 1)
    result, elapsed = timed(ctl, "apply", "-f", str(big))
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == f"{big}: larger than 10 MiB: refused"
    assert elapsed - baseline < 1.0, (elapsed, baseline)
    assert names(ctl) == []


# -- many schedules and the progress bar ------------------------------------------------------------


def test_many_schedules_apply_in_one_go_without_a_bar_off_a_terminal(ctl: Any, tmp_path: Path) -> None:
    count = PROGRESS_THRESHOLD + 50
    path = write(
        tmp_path / "many.yaml",
        "jobs:\n"
        + "".join(f"  - {{name: job-{i:03d}, schedule: '{i % 60} * * * *', noop: true}}\n" for i in range(count)),
    )
    result = ctl("apply", "-f", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no progress bar: stderr is not a terminal
    assert result.stdout.splitlines()[-1] == f"applied: {count} created, 0 updated, 0 deleted"
    assert len(names(ctl)) == count
    assert ctl("apply", "-f", str(path)).stdout == f"no changes ({count} unchanged)\n"


def test_progress_bar_shows_on_a_terminal_only_for_many_schedules() -> None:
    tty = Console(file=io.StringIO(), force_terminal=True, width=100)
    with _progress(PROGRESS_THRESHOLD + 1, tty) as advance:
        step = advance("checking", PROGRESS_THRESHOLD + 1)
        for _ in range(PROGRESS_THRESHOLD + 1):
            step(1)
        advance("writing in one transaction", None)
    drawn = tty.file.getvalue()  # type: ignore[attr-defined]  # the StringIO given above
    assert "checking" in drawn and "writing in one transaction" in drawn

    for console, count in ((Console(file=io.StringIO(), force_terminal=False), 500), (tty, PROGRESS_THRESHOLD)):
        assert isinstance(console.file, io.StringIO)  # the StringIO given above
        before = console.file.getvalue()
        with _progress(count, console) as advance:
            advance("checking", count)(count)
        assert console.file.getvalue() == before
