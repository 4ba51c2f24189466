"""``clockctl preview``: next fire times, DST gaps and repeated hours marked, errors on stderr."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from clockctl.app import app

BIN = Path(sys.executable).parent
runner = CliRunner()
ACCEPTANCE = ["preview", "30 2 * * *", "--tz", "Europe/Paris", "--after", "2026-03-28T00:00:00Z", "-n", "3"]


def flat(text: str) -> str:
    """Table text with wrapped cells joined (narrow terminals wrap the note column)."""
    return " ".join(text.split())


def test_acceptance_table_marks_the_skipped_day() -> None:
    result = runner.invoke(app, ACCEPTANCE)
    assert result.exit_code == 0, result.output
    out = flat(result.stdout)
    assert "At 02:30 every day (Europe/Paris)" in out
    assert "2026-03-28 02:30:00 +01:00" in out and "2026-03-28 01:30:00Z" in out
    assert "2026-03-30 02:30:00 +02:00" in out and "2026-03-30 00:30:00Z" in out
    assert "2026-03-31 02:30:00 +02:00" in out
    assert "DST gap: 02:30 does not exist on 2026-03-29, skipped" in out
    assert "2026-03-29 02:30:00" not in out  # only as a note, never as a fire
    assert result.stderr == ""


def test_acceptance_json_is_a_stable_array_of_real_fires() -> None:
    result = runner.invoke(app, [*ACCEPTANCE, "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {"utc": "2026-03-28T01:30:00Z", "local": "2026-03-28T02:30:00+01:00", "note": None, "skipped": []},
        {
            "utc": "2026-03-30T00:30:00Z",
            "local": "2026-03-30T02:30:00+02:00",
            "note": "DST gap: 02:30 does not exist on 2026-03-29, skipped",  # as the table says (issue 15.10)
            "skipped": ["2026-03-29T02:30"],
        },
        {"utc": "2026-03-31T00:30:00Z", "local": "2026-03-31T02:30:00+02:00", "note": None, "skipped": []},
    ]


def test_acceptance_through_the_installed_command() -> None:
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run([str(BIN / "clockctl"), *ACCEPTANCE], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any("2026-03-28 02:30:00 +01:00" in line for line in lines)
    skipped_row = next(line for line in lines if "2026-03-30 02:30:00 +02:00" in line)
    assert "DST gap: 02:30 does not exist on 2026-03-29, skipped" in skipped_row


def test_repeated_hour_notes_for_fixed_and_interval_jobs() -> None:
    fixed = runner.invoke(
        app,
        [
            "preview",
            "30 1 * * *",
            "--tz",
            "America/New_York",
            "--after",
            "2026-10-31T12:00:00Z",
            "-n",
            "2",
            "-o",
            "json",
        ],
    )
    assert fixed.exit_code == 0, fixed.output
    assert json.loads(fixed.stdout)[0] == {
        "utc": "2026-11-01T05:30:00Z",
        "local": "2026-11-01T01:30:00-04:00",
        "note": "repeated hour: runs once, at the first 01:30",
        "skipped": [],
    }
    interval = runner.invoke(
        app,
        [
            "preview",
            "*/30 * * * *",
            "--tz",
            "America/New_York",
            "--after",
            "2026-11-01T05:00:00Z",
            "-n",
            "4",
            "-o",
            "json",
        ],
    )
    assert interval.exit_code == 0, interval.output
    doc = json.loads(interval.stdout)
    assert [(d["local"], d["note"]) for d in doc] == [
        ("2026-11-01T01:30:00-04:00", "repeated hour: runs at both 01:30s (first)"),
        ("2026-11-01T01:00:00-05:00", "repeated hour: runs at both 01:00s (second)"),
        ("2026-11-01T01:30:00-05:00", "repeated hour: runs at both 01:30s (second)"),
        ("2026-11-01T02:00:00-05:00", None),
    ]
    table = runner.invoke(
        app, ["preview", "30 1 * * *", "--tz", "America/New_York", "--after", "2026-10-31T12:00:00Z", "-n", "1"]
    )
    assert "repeated hour: runs once, at the first 01:30" in flat(table.stdout)


def test_many_skipped_times_in_one_gap_are_summarized() -> None:
    result = runner.invoke(
        app, ["preview", "*/20 * * * *", "--tz", "Europe/Paris", "--after", "2026-03-29T00:30:00Z", "-n", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "DST gap: 02:00-02:40 (3 times) do not exist on 2026-03-29, skipped" in flat(result.stdout)
    doc = json.loads(
        runner.invoke(
            app,
            [
                "preview",
                "*/20 * * * *",
                "--tz",
                "Europe/Paris",
                "--after",
                "2026-03-29T00:30:00Z",
                "-n",
                "2",
                "-o",
                "json",
            ],
        ).stdout
    )
    assert doc[1]["skipped"] == ["2026-03-29T02:00", "2026-03-29T02:20", "2026-03-29T02:40"]


def test_defaults_are_utc_and_ten_fires_after_now() -> None:
    result = runner.invoke(app, ["preview", "@hourly", "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc) == 10
    assert all(d["utc"].endswith(":00:00Z") and d["local"].endswith("+00:00") for d in doc)


def test_after_accepts_an_offset_and_a_local_time_in_the_zone() -> None:
    with_offset = runner.invoke(
        app,
        [
            "preview",
            "0 9 * * *",
            "--tz",
            "Europe/Paris",
            "--after",
            "2026-03-28T09:00:00+01:00",
            "-n",
            "1",
            "-o",
            "json",
        ],
    )
    local = runner.invoke(
        app, ["preview", "0 9 * * *", "--tz", "Europe/Paris", "--after", "2026-03-28T09:00", "-n", "1", "-o", "json"]
    )
    assert json.loads(with_offset.stdout)[0]["local"] == "2026-03-29T09:00:00+02:00"
    assert json.loads(local.stdout) == json.loads(with_offset.stdout)


def test_bad_expression_exits_2_with_nothing_on_stdout() -> None:
    result = runner.invoke(app, ["preview", "61 * * * *"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip() == "error: minute: 61 is out of range 0-59"


def test_never_firing_expression_exits_2() -> None:
    result = runner.invoke(app, ["preview", "0 0 31 2 *", "-o", "json"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "day-of-month: 31 never occurs in FEB" in result.stderr


def test_reboot_is_refused_with_the_reason() -> None:
    result = runner.invoke(app, ["preview", "@reboot"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "clockd has no boot event" in result.stderr


def test_unknown_zone_suggests_the_close_name() -> None:
    result = runner.invoke(app, ["preview", "0 9 * * *", "--tz", "Europe/Pari", "-o", "json"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip() == "error: unknown time zone 'Europe/Pari'; did you mean Europe/Paris?"


def test_bad_after_exits_2() -> None:
    result = runner.invoke(app, ["preview", "0 9 * * *", "--after", "yesterday"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "not an ISO 8601 instant: 'yesterday'" in result.stderr


def test_errors_through_the_installed_command() -> None:
    result = subprocess.run(
        [str(BIN / "clockctl"), "preview", "0 9 * * *", "--tz", "Europe/Pari"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert "did you mean Europe/Paris?" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_each_time_says_how_far_from_now_it_is() -> None:
    result = subprocess.run(
        [str(BIN / "clockctl"), "preview", "@yearly", "-n", "2"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "-01-01 00:00:00Z" in line]
    assert len(rows) == 2 and all(re.search(r"\bin \d+d( \d+h)?\b", row) for row in rows), result.stdout
    past = runner.invoke(app, ["preview", "0 0 1 1 *", "--after", "2001-01-01T00:00:00Z", "-n", "1"])
    assert re.search(r"\d+d( \d+h)? ago", flat(past.stdout)), past.stdout
