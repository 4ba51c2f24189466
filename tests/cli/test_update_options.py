"""``clockctl update`` takes the options ``add`` has for a job's stdin and notifications
(issue 15 items 5 and 6), defined once for both (``clockctl.policyopts``), through the
real ``clockctl``."""

from __future__ import annotations

import json
from typing import Any


def _show(ctl: Any, name: str) -> dict[str, Any]:
    result = ctl("show", name, "-o", "json")
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_update_sets_and_removes_stdin_and_notifications(ctl: Any) -> None:
    assert ctl("add", "--every", "1h", "--name", "job", "--", "cat").returncode == 0
    updated = ctl(
        "update", "job", "--stdin", "line one\nline two\n", "--on-failure", "mail:ops@example.com",
        "--on-dead", "logger dead", "--on-success", "https://hooks.example.com/ok",
    )  # fmt: skip
    assert updated.returncode == 0, updated.stderr
    assert "version 1 → 2" in updated.stdout
    shown = ctl("show", "job").stdout
    assert "stdin" in shown and "18 bytes" in shown
    notify = _show(ctl, "job")["notify"]
    assert notify["on_failure"]["mail"] == "ops@example.com"
    assert notify["on_dead"] == {"event": "dead", "argv": ["logger dead"], "shell": True}
    assert notify["on_success"]["url"] == "https://hooks.example.com/ok"
    exported = ctl("export", "--all").stdout
    assert "stdin: |" in exported and "line two" in exported

    # Options left out keep their value; "none" and '' remove.
    removed = ctl("update", "job", "--on-dead", "none", "--stdin", "")
    assert removed.returncode == 0, removed.stderr
    doc = _show(ctl, "job")
    assert sorted(doc["notify"]) == ["on_failure", "on_success"]
    assert "stdin" not in ctl("export", "--all").stdout


def test_update_refuses_stdin_for_a_target_that_has_none_and_a_bad_notification(ctl: Any) -> None:
    assert ctl("add", "--every", "1h", "--name", "ping", "--noop").returncode == 0
    refused = ctl("update", "ping", "--stdin", "x")
    assert refused.returncode == 2
    assert refused.stderr.strip() == "error: stdin: not allowed with noop: true"
    bad = ctl("update", "ping", "--on-missed", "mail:-oQ/tmp/x")
    assert bad.returncode == 2 and "mail: expected addresses" in bad.stderr
    assert _show(ctl, "ping")["version"] == 1  # nothing was written


def test_update_changes_and_removes_the_user_and_group_keeping_the_history(ctl: Any) -> None:
    # Changing the user a job runs as took an rm and an add, which lost its history.
    assert ctl("add", "--every", "1h", "--name", "team-job", "--", "true").returncode == 0
    changed = ctl("update", "team-job", "--user", "nobody", "--group", "nogroup")
    assert changed.returncode == 0 and "version 1 → 2" in changed.stdout, changed.stderr
    exported = ctl("export", "--all").stdout
    assert "user: nobody" in exported and "group: nogroup" in exported
    removed = ctl("update", "team-job", "--user", "none", "--group", "none")
    assert removed.returncode == 0, removed.stderr
    exported = ctl("export", "--all").stdout
    assert "user:" not in exported and "group:" not in exported
    assert _show(ctl, "team-job")["version"] == 3
    assert ctl("add", "--every", "1h", "--name", "ping", "--noop").returncode == 0
    refused = ctl("update", "ping", "--user", "nobody")
    assert refused.returncode == 2 and refused.stderr.startswith("error: "), refused
