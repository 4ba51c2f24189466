"""The operator's view of a running clockd (embedded store): SIGHUP reloads, status, /metrics."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Clockd, wait_for
from tests.harness.home import existing_store

pytestmark = pytest.mark.e2e
PY = sys.executable

# Every family /metrics must carry (counters without their _total suffix).
FAMILIES = (
    "clockd_schedule_lag_seconds",  # step = enqueued | started
    "clockd_backlog",  # stage = due | outbox | queued | running
    "clockd_queue_depth",  # per queue
    "clockd_queue_oldest_age_seconds",  # per queue
    "clockd_running_jobs",
    "clockd_attempts",  # by outcome
    "clockd_retries",
    "clockd_dlq_size",
    "clockd_occurrences_not_run",  # MISSED / SKIPPED_OVERLAP by reason
    "clockd_occurrences_unaccounted",
    "clockd_fenced_writes_rejected",
    "clockd_leadership_changes",
    "clockd_shard_moves",
    "clockd_clock_offset_seconds",
    "clockd_tzdata_info",
    "clockd_definition_cache_hits",  # the claims' definition cache (hit rate = hits / (hits + misses))
    "clockd_definition_cache_misses",
    "clockd_definition_cache_read_ahead",
    "clockd_definition_cache_entries",
    "clockd_definition_cache_capacity",
)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _actions(clockd: Clockd, action: str) -> list[dict[str, Any]]:
    out = []
    for line in clockd.log().splitlines():
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        if doc.get("action") == action:
            out.append(doc)
    return out


def _jobs(path: Path, jobs: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"jobs": jobs}, indent=2))  # JSON is YAML


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sighup_applies_schedules_dir_while_a_running_job_keeps_running(clockd: Clockd, tmp_path: Path) -> None:
    schedules = tmp_path / "schedules.d"
    schedules.mkdir()
    started, done, release = tmp_path / "started", tmp_path / "done", tmp_path / "release"
    # The job runs until the test releases it (a fixed sleep could end before the reload
    # checks on a loaded machine).
    script = (
        "import os,sys,time; open(sys.argv[1],'w').write(str(os.getpid()))\n"
        "while not os.path.exists(sys.argv[3]): time.sleep(0.05)\n"
        "open(sys.argv[2],'w').write('done')"
    )
    # Far enough ahead that it is still in the future when clockd applies the directory:
    # an `at` already past never fires and the whole directory is refused (a start under
    # load took more than the 2 s this once allowed).
    at = (datetime.now(UTC) + timedelta(seconds=8)).replace(microsecond=0)
    long_job = {
        "name": "long",
        "at": at.isoformat().replace("+00:00", "Z"),
        "command": [PY, "-c", script, str(started), str(done), str(release)],
        "retries": 0,
    }
    _jobs(schedules / "jobs.yaml", [long_job])
    config = tmp_path / "clockd.yaml"
    config.write_text(f"schedules_dir: {schedules}\nlog_level: info\n")
    clockd.start("--config", str(config))
    [applied] = wait_for("the directory applied at start", lambda: _actions(clockd, "schedules_applied"), 10)
    assert applied["schedules_created"] == ["long"]
    pid = int(wait_for("the long job to start", lambda: started.exists() and started.read_text(), 20))

    # Edit the files (a new schedule) and the config (a live and a restart-only setting).
    _jobs(schedules / "jobs.yaml", [long_job, {"name": "added", "schedule": "0 0 1 1 *", "noop": True}])
    config.write_text(f"schedules_dir: {schedules}\nlog_level: debug\nhorizon: 5m\n")
    clockd.signal(signal.SIGHUP)

    names = wait_for(
        "the new schedule to appear",
        lambda: {d["name"] for d in clockd.ctl_json("list")} >= {"long", "added"} or None,
        10,
    )
    assert names
    [reloaded] = wait_for("the reload to be logged", lambda: _actions(clockd, "config_reloaded"), 5)
    assert reloaded["changed"] == ["log_level"]
    assert _actions(clockd, "config_reload_restart_needed")[0]["settings"] == ["horizon"]
    assert wait_for("the apply", lambda: [a for a in _actions(clockd, "schedules_applied") if a is not applied], 5)
    # The running job was not touched: same process, still RUNNING, then done once.
    assert _alive(pid) and not done.exists()
    assert [r["state"] for r in clockd.runs("long")] == ["RUNNING"]
    release.touch()
    run = wait_for("the long job to finish", lambda: [r for r in clockd.runs("long") if r["state"] == "SUCCEEDED"], 20)
    assert run[0]["attempts"] == 1 and done.read_text() == "done"
    assert clockd.proc is not None and clockd.proc.poll() is None


def test_status_shows_the_clockd_holding_the_embedded_store(clockd: Clockd) -> None:
    existing_store(clockd.home)  # clockd ran here once (status never creates a store)
    idle = clockd.ctl_json("status")
    assert idle["coordination"]["kind"] == "embedded" and idle["coordination"]["lock"]["held"] is False
    proc = clockd.start()
    doc = clockd.ctl_json("status")
    assert doc["coordination"]["lock"] == {
        "path": str(clockd.home / "clockd.db.lock"),
        "held": True,
        "pid": proc.pid,
    }
    assert doc["coordination"]["leader"]["node"] == f"pid {proc.pid}"
    assert doc["unaccounted"]["count"] == 0 and doc["dlq"] == 0
    table = clockd.ctl("status").stdout
    assert f"held by clockd pid {proc.pid}" in table and "lag from due to start" in table


def test_metrics_carry_every_family_and_no_occurrence_id(clockd: Clockd) -> None:
    clockd.env["CLOCKD_METRICS_ADDR"] = "127.0.0.1:0"
    clockd.start()
    port = clockd.metrics_port
    clockd.ctl("add", "--every", "1s", "--name", "ticker", "--noop")
    clockd.ctl("add", "--at", "now+1s", "--name", "broken", "--retries", "0", "--", "false")

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text: str = response.read().decode()
            return text

    def sampled() -> str | None:
        text = scrape()
        enqueued = 'clockd_schedule_lag_seconds_count{step="enqueued"}'
        dlq = re.search(r"^clockd_dlq_size (\S+)$", text, re.M)
        return text if enqueued in text and dlq and float(dlq.group(1)) >= 1 else None

    text = wait_for("the leader to sample the store", sampled, 40, 0.5)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert [name for name in FAMILIES if name not in families] == []

    def cache_hits() -> float | None:
        found = {f.name: f for f in text_string_to_metric_families(scrape())}
        hits = found["clockd_definition_cache_hits"].samples[0].value
        return hits if hits >= 1 else None

    # The ticker's second claim finds its definition cached.
    wait_for("a claim to find its definition in the cache", cache_hits, 20, 0.5)
    steps = {s.labels.get("step") for s in families["clockd_schedule_lag_seconds"].samples}
    assert steps >= {"started", "enqueued"}
    assert {s.labels["queue"] for s in families["clockd_queue_depth"].samples} >= {"default"}
    # Bounded labels only: no occurrence (or schedule) id anywhere.
    occurrence_ids = {r["id"] for name in ("ticker", "broken") for r in clockd.runs(name)}
    values = {v for f in families.values() for s in f.samples for v in s.labels.values()}
    assert occurrence_ids and not (values & occurrence_ids)
    assert [v for v in values if _UUID.search(v)] == []
