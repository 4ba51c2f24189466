"""clockctl's everyday verbs on the embedded store, without a daemon: output, errors, exit codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BIN = Path(sys.executable).parent


@pytest.fixture
def ctl(store_and_api: Any) -> Any:
    """clockctl on the store, and the same commands through a real clockd's HTTP API."""
    return store_and_api


def test_add_prints_id_and_next_five_runs(ctl: Any) -> None:
    result = ctl("add", "0 9 * * *", "--tz", "Europe/Paris", "--name", "report", "--", "/bin/true")
    assert result.returncode == 0, result.stderr
    assert "added report" in result.stdout
    assert result.stdout.count("+01:00") + result.stdout.count("+02:00") >= 5
    doc = json.loads(ctl("show", "report", "-o", "json").stdout)
    assert doc["name"] == "report" and doc["tz"] == "Europe/Paris" and doc["state"] == "active"
    assert len(doc["next_runs"]) == 5
    assert all(t.endswith(("T07:00:00Z", "T08:00:00Z")) for t in doc["next_runs"])


def test_duplicate_name_is_refused_and_changes_nothing(ctl: Any) -> None:
    assert ctl("add", "* * * * *", "--name", "dup", "--", "echo", "one").returncode == 0
    second = ctl("add", "*/5 * * * *", "--name", "dup", "--", "echo", "two")
    assert second.returncode == 1
    assert "dup" in second.stderr and second.stdout == ""
    docs = json.loads(ctl("list", "-o", "json").stdout)
    assert [(d["name"], d["expr"], d["target"]["argv"]) for d in docs] == [("dup", "* * * * *", ["echo", "one"])]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["61 * * * *"], "minute: 61 is out of range 0-59"),
        (["0 0 31 2 *"], "never"),
        (["0 9 * * *", "--tz", "Europe/Pari"], "Europe/Paris"),
        (["--every", "soon"], "soon"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(ctl: Any, args: list[str], needle: str) -> None:
    result = ctl("add", *args, "--name", "bad", "--", "/bin/true")
    assert result.returncode == 2, result
    assert needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
    assert json.loads(ctl("list", "-o", "json").stdout) == []


def test_unknown_schedule_name_exits_1_naming_it(ctl: Any) -> None:
    for verb in ("show", "pause", "resume", "rm", "run-now", "runs"):
        result = ctl(verb, "ghost")
        assert result.returncode == 1, (verb, result)
        assert "ghost" in result.stderr


def test_pause_resume_rm_and_name_reuse(ctl: Any) -> None:
    ctl("add", "*/5 * * * *", "--name", "job", "--", "/bin/true")
    assert json.loads(ctl("show", "job", "-o", "json").stdout)["next_run_at"] is not None
    assert json.loads(ctl("pause", "job", "-o", "json").stdout)["state"] == "paused"
    # A paused schedule shows no run to come: no next run, and no planning cursor that
    # reads like one (list and show gave it a future next_run_at).
    for shown in (json.loads(ctl("show", "job", "-o", "json").stdout), json.loads(ctl("list", "-o", "json").stdout)[0]):
        assert shown["state"] == "paused" and shown["next_run_at"] is None and shown["next_run"] is None, shown
    # Again: nothing to do, and it says so (it printed "paused job" as if it had paused it).
    again = ctl("pause", "job")
    assert again.returncode == 0 and again.stdout == "job is paused already; nothing changed\n", again
    assert json.loads(ctl("pause", "job", "-o", "json").stdout)["unchanged"] is True
    resumed = json.loads(ctl("resume", "job", "-o", "json").stdout)
    assert resumed["state"] == "active" and resumed["unchanged"] is False
    assert ctl("resume", "job").stdout.startswith("job is active already; nothing changed\n")
    assert json.loads(ctl("show", "job", "-o", "json").stdout)["next_run_at"] is not None
    assert ctl("rm", "job").returncode == 0
    assert json.loads(ctl("list", "-o", "json").stdout) == []
    assert ctl("add", "0 * * * *", "--name", "job", "--", "/bin/true").returncode == 0


def test_show_prints_whole_occurrence_ids_so_each_names_its_run(ctl: Any) -> None:
    """Ids lead with their instant (schema 0016), so two runs a moment apart share their
    first 12 characters, which is all ``show`` printed of an id."""
    ctl("add", "0 0 1 1 *", "--name", "twice", "--", "/bin/true")
    ids = [json.loads(ctl("run-now", "twice", "-o", "json").stdout)["id"] for _ in range(2)]
    shown = ctl("show", "twice")
    assert shown.returncode == 0, shown.stderr
    assert all(ident in shown.stdout for ident in ids), shown.stdout


def test_run_now_creates_its_own_occurrence(ctl: Any) -> None:
    ctl("add", "0 0 1 1 *", "--name", "yearly", "--", "/bin/true")
    doc = json.loads(ctl("run-now", "yearly", "-o", "json").stdout)
    assert doc["manual"] is True and doc["schedule"] == "yearly"
    runs = json.loads(ctl("runs", "yearly", "-o", "json").stdout)
    assert [r["id"] for r in runs] == [doc["id"]]


def test_unreadable_store_exits_4(ctl: Any, tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-db"
    bogus.write_bytes(b"this is not sqlite" * 100)
    result = ctl("--store", f"sqlite://{bogus}", "list")
    assert result.returncode == 4, result
    assert str(bogus) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
