"""What a new user meets first (issue 15 items 10 and 12), through the real ``clockctl``:
``-o json`` everywhere, ``--version``, readable times, rows that stay rows in a pipe,
import problems in line order."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


def test_version_as_json_and_as_a_flag(ctl: Any) -> None:
    doc = json.loads(ctl("version", "-o", "json").stdout)
    assert set(doc) == {"clockctl", "commit", "tzdata"} and re.fullmatch(r"\d{4}[a-z]", doc["tzdata"])
    flag = ctl("--version")
    assert flag.returncode == 0 and flag.stdout == ctl("version").stdout
    assert flag.stdout.startswith(f"clockctl {doc['clockctl']} (commit {doc['commit']}, tzdata {doc['tzdata']})")


CRONTAB = """\
MAILTO=ops@example.com
@reboot /usr/local/bin/warm-cache
* * * * * echo ok
61 * * * * echo bad minute
not a cron line
"""


def test_import_crontab_lists_problems_in_line_order(ctl: Any, tmp_path: Path) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text(CRONTAB)
    result = ctl("import-crontab", str(crontab), "--tz", "UTC", "--dry-run")
    assert result.returncode == 2
    lines = [int(m.group(1)) for m in re.finditer(rf"^{re.escape(str(crontab))}:(\d+):", result.stderr, re.M)]
    assert lines == [1, 2, 4, 5], result.stderr  # before: notes, then skipped lines, then errors
    assert result.stderr.endswith("2 error(s); nothing was applied\n")


def test_import_crontab_dry_run_as_json(ctl: Any, tmp_path: Path) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text("\n".join(CRONTAB.splitlines()[:3]) + "\n")
    result = ctl("import-crontab", str(crontab), "--tz", "UTC", "--dry-run", "-o", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["source"] == str(crontab) and doc["system"] is False
    assert [r["line"] for r in doc["remarks"]] == [1, 2]
    assert [(j["name"], j["schedule"], j["command"]) for j in doc["jobs"]] == [("echo-3", "* * * * *", "echo ok")]
    assert ctl("list", "-o", "json").stdout.strip() == "[]"  # a dry run writes nothing


def test_times_print_without_microseconds(ctl: Any) -> None:
    added = ctl("add", "--at", "now+1h", "--name", "once", "--", "true")
    assert added.returncode == 0, added.stderr
    shown = ctl("show", "once")
    for out in (added.stdout, shown.stdout, ctl("list").stdout):
        assert not re.search(r":\d\d\.\d+", out), out
    doc = json.loads(ctl("show", "once", "-o", "json").stdout)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["expr"])  # --at now+1h: a whole second


def test_runs_rows_do_not_wrap_when_piped(ctl: Any) -> None:
    name = "a-schedule-with-a-long-name-" + "x" * 170
    assert ctl("add", "--every", "1h", "--name", name, "--", "true").returncode == 0
    assert ctl("run-now", name).returncode == 0
    out = ctl("runs").stdout.splitlines()
    assert len(out) == 2, out  # the header and one row: nothing wrapped at 80 or 200 columns
    assert name in out[1] and "SCHEDULED" in out[1]


def test_a_deleted_schedules_runs_are_still_listed_by_its_name(ctl: Any) -> None:
    assert ctl("add", "--every", "1h", "--name", "backup", "--", "true").returncode == 0
    queued = json.loads(ctl("run-now", "backup", "-o", "json").stdout)["id"]
    assert ctl("rm", "backup").returncode == 0
    runs = ctl("runs", "backup", "-o", "json")
    assert runs.returncode == 0, runs.stderr
    assert [r["id"] for r in json.loads(runs.stdout)] == [queued]  # canceled by the delete, still there
    missing = ctl("runs", "never-existed")
    assert missing.returncode != 0 and "no schedule named 'never-existed'" in missing.stderr
