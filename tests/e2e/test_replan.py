"""Issue 15 item 1 against a real ``clockd``: editing a schedule shortly before its next
instant keeps that run, under the new version (``clockctl update`` and ``apply``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Clockd, wait_for


def _soon() -> datetime:
    """The next whole minute at least 25 s away: inside the materializer's horizon (2 min),
    far enough that no worker has claimed it when the test edits the schedule."""
    now = datetime.now(UTC)
    at = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return at if at - now >= timedelta(seconds=25) else at + timedelta(minutes=1)


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _planned(clockd: Clockd, name: str, at: datetime) -> list[dict[str, Any]]:
    """The occurrences of ``name`` at ``at``, not yet due ones included."""
    rows: list[dict[str, Any]] = clockd.ctl_json("runs", name, "--upcoming", "-n", "200")
    return [r for r in rows if r["scheduled_for"] == _iso(at)]


def test_update_keeps_the_next_runs_of_a_daily_and_a_minutely_job(clockd: Clockd) -> None:
    clockd.start()
    at = _soon()
    clockd.ctl("add", f"{at.minute:02d} {at.hour:02d} * * *", "--tz", "UTC", "--name", "daily", "--", "echo", "v1")
    clockd.ctl("add", "* * * * *", "--name", "minutely", "--", "echo", "v1")
    wait_for("the daily run to be planned", lambda: _planned(clockd, "daily", at))
    wait_for("the minutely runs to be planned", lambda: len(_planned(clockd, "minutely", at)))

    out = clockd.ctl("update", "daily", "--command", "echo v2").stdout
    assert f"re-planned 1 upcoming run under version 2: {_iso(at)}" in out, out
    doc = clockd.ctl_json("update", "minutely", "--command", "echo v2")
    assert _iso(at) in [r["scheduled_for"] for r in doc["replanned"]] and doc["dropped"] == []
    assert all(r["version"] == 2 and r["state"] == "SCHEDULED" for r in doc["replanned"])

    # Today's instant is still planned, under version 2 (before: CANCELED, next run tomorrow).
    rows = {r["version"]: r for r in _planned(clockd, "daily", at)}
    assert rows[1]["state"] == "CANCELED" and rows[1]["reason"].endswith("re-planned under version 2")
    assert rows[2]["state"] in ("SCHEDULED", "ENQUEUED")
    shown = clockd.ctl_json("show", "daily")
    assert shown["next_run"] == _iso(at), shown

    # A change of the time drops the instant the new definition no longer has, and says so.
    other = (at.minute + 30) % 60
    out = clockd.ctl("update", "daily", "--cron", f"{other:02d} {at.hour:02d} * * *").stdout
    assert f"dropped 1 run: version 3 does not fire at {_iso(at)}" in out, out


def test_an_every_job_edited_runs_its_next_instants_with_the_new_command(clockd: Clockd) -> None:
    clockd.start()
    clockd.ctl("add", "--every", "2s", "--name", "tick", "--", "echo", "v1")
    wait_for("a run of version 1", lambda: [r for r in clockd.runs("tick") if r["state"] == "SUCCEEDED"])
    doc = clockd.ctl_json("update", "tick", "--command", "echo v2")
    assert doc["version"] == 2 and len(doc["replanned"]) > 10  # the 2 minutes planned ahead
    first = min(r["scheduled_for"] for r in doc["replanned"])
    ran = wait_for(
        "the first re-planned instant to run",
        lambda: [r for r in clockd.runs("tick") if r["scheduled_for"] == first and r["state"] == "SUCCEEDED"],
        timeout=30,
    )
    # That occurrence's own output: `logs tick` shows the latest run, which for a 2 s job
    # may already be the next one, still running with no output yet.
    assert clockd.ctl("logs", ran[0]["id"]).stdout == "v2\n"


@pytest.mark.parametrize("via", ["store", "api"])
def test_apply_keeps_the_next_run_of_a_changed_job(clockd: Clockd, tmp_path: Path, via: str) -> None:
    clockd.start()
    if via == "api":  # clockctl --server: the API's apply result carries the re-plan
        clockd.env.update(_api_env(clockd))
    at = _soon()
    schedules = tmp_path / "jobs.yaml"
    job = (
        f'jobs:\n  - name: nightly\n    schedule: "{at.minute:02d} {at.hour:02d} * * *"\n'
        "    tz: UTC\n    command: [echo, {v}]\n"
    )
    schedules.write_text(job.format(v="v1"))
    clockd.ctl("apply", "-f", str(schedules))
    wait_for("the nightly run to be planned", lambda: _planned(clockd, "nightly", at))
    schedules.write_text(job.format(v="v2"))
    out = clockd.ctl("apply", "-f", str(schedules)).stdout
    assert f"re-planned 1 upcoming run of nightly under version 2: {_iso(at)}" in out, out
    assert {r["version"]: r["state"] for r in _planned(clockd, "nightly", at)}[2] in ("SCHEDULED", "ENQUEUED")


def _api_env(clockd: Clockd) -> dict[str, str]:
    """CLOCKD_SERVER/CLOCKD_TOKEN for clockctl through this clockd's API (an operator
    token of the default tenant, made on the store as an admin would)."""
    token = json.loads(clockd.ctl("token", "create", "--tenant", "default", "--role", "operator", "-o", "json").stdout)
    return {"CLOCKD_SERVER": clockd.api_url(), "CLOCKD_TOKEN": token["token"]}


def test_update_over_the_api_says_what_it_replanned(clockd: Clockd) -> None:
    """``clockctl --server … update`` prints the re-plan as on the store (the API's answer
    carries ``replanned``)."""
    clockd.start()
    at = _soon()
    clockd.ctl("add", f"{at.minute:02d} {at.hour:02d} * * *", "--tz", "UTC", "--name", "daily", "--", "echo", "v1")
    wait_for("the daily run to be planned", lambda: _planned(clockd, "daily", at))
    clockd.env.update(_api_env(clockd))

    out = clockd.ctl("update", "daily", "--command", "echo v2").stdout
    assert f"re-planned 1 upcoming run under version 2: {_iso(at)}" in out, out
    doc = clockd.ctl_json("update", "daily", "--cron", f"{(at.minute + 30) % 60:02d} {at.hour:02d} * * *")
    assert [r["scheduled_for"] for r in doc["dropped"]] == [_iso(at)], doc
