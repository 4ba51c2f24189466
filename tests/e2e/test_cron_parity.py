"""What a cron user expects, against a real daemon: a log line per run at the default
level, notifications on outcome (a command, an HTTP POST to a real local server, a
mail through a fake ``sendmail``), MISSED telling ``on_missed``, a job's stdin, and a
crontab's environment lines reaching the job (issue 15, items 4-7)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Clockd, wait_for

pytestmark = pytest.mark.e2e
PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
DUMP_ENV = "import json,os,sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"


def log_lines(clockd: Clockd) -> list[dict[str, Any]]:
    out = []
    for line in clockd.log().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def actions(clockd: Clockd, action: str, schedule: str | None = None) -> list[dict[str, Any]]:
    return [
        d
        for d in log_lines(clockd)
        if d.get("action") == action and (schedule is None or d.get("schedule") == schedule)
    ]


def dead(clockd: Clockd, name: str) -> list[dict[str, Any]]:
    return [r for r in clockd.runs(name) if r["state"] == "DEAD"]


def test_each_run_logs_a_start_and_an_end_line_at_info_and_dead_is_a_warning(clockd: Clockd) -> None:
    clockd.start()  # the default level: info
    clockd.ctl("add", "--at", "now+1s", "--name", "greet", "--", "echo", "hi")
    clockd.ctl("add", "--at", "now+1s", "--name", "broken", "--retries", "0", "--", "sh", "-c", "exit 7")
    run = wait_for("broken to go DEAD", lambda: dead(clockd, "broken"), 20)[0]
    ok = wait_for("greet to finish", lambda: actions(clockd, "run_finished", "greet"), 20)[0]
    started = actions(clockd, "run_started", "greet")[0]
    assert started["level"] == "info" and started["attempt"] == 1 and started["target"] == "echo hi"
    assert ok["level"] == "info" and ok["outcome"] == "succeeded" and ok["exit_code"] == 0
    assert ok["duration"] >= 0 and ok["occurrence"] == started["occurrence"]
    [line] = wait_for("the dead line", lambda: actions(clockd, "run_dead", "broken"), 10)
    assert line["level"] == "warning" and line["occurrence"] == run["id"]
    assert line["exit_code"] == 7 and line["state"] == "DEAD"
    assert "exit code 7" in line["msg"] and "-> DEAD" in line["msg"]


def test_a_failing_job_runs_its_on_failure_command_with_the_occurrence_in_its_env(
    clockd: Clockd, tmp_path: Path
) -> None:
    clockd.start()
    seen = tmp_path / "notified.json"
    clockd.ctl(
        "add", "--at", "now+1s", "--name", "flaky", "--retries", "0",
        "--on-failure", f"{PY} -c \"{DUMP_ENV}\" {seen}",
        "--", "sh", "-c", "echo disk full >&2; exit 3",
    )  # fmt: skip
    shown = clockd.ctl("show", "flaky").stdout
    assert "on_failure" in shown and str(seen) in shown
    run = wait_for("flaky to go DEAD", lambda: dead(clockd, "flaky"), 20)[0]
    env = json.loads(wait_for("the on_failure command", lambda: seen.exists() and seen.read_text(), 20))
    assert env["CLOCKD_OCCURRENCE_ID"] == run["id"]
    assert env["CLOCKD_SCHEDULE"] == "flaky"
    assert env["CLOCKD_NOTIFY_EVENT"] == "failure"
    assert env["CLOCKD_STATE"] == "DEAD" and env["CLOCKD_OUTCOME"] == "failed"
    assert env["CLOCKD_EXIT_CODE"] == "3"
    assert env["CLOCKD_OUTPUT"] == "disk full\n"
    assert env["CLOCKD_IDEMPOTENCY_KEY"] == f"{run['id']}:failure:1"


class _Hook(BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    received: list[tuple[dict[str, str], bytes]] = []
    handler = type("Hook", (_Hook,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_an_http_notification_reaches_a_real_server_with_json_and_an_idempotency_key(
    clockd: Clockd, hook: tuple[str, list[tuple[dict[str, str], bytes]]], tmp_path: Path
) -> None:
    url, received = hook
    clockd.start()
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "jobs:\n"
        "  - name: nightly\n"
        "    schedule: '0 0 1 1 *'\n"  # once a year: the run below is run-now's
        "    command: [sh, -c, 'echo all good']\n"
        f"    on_success: {{http: '{url}'}}\n"
        f"    on_dead: {{http: '{url}'}}\n"
    )
    assert clockd.ctl("apply", "-f", str(jobs)).returncode == 0
    clockd.ctl("run-now", "nightly")
    headers, body = wait_for("the POST", lambda: received, 20)[0]
    doc = json.loads(body)
    run = clockd.runs("nightly")[0]
    assert headers["content-type"] == "application/json"
    assert headers["idempotency-key"] == f"{run['id']}:success" == doc["idempotency_key"]
    assert doc["event"] == "success" and doc["schedule"] == "nightly" and doc["occurrence_id"] == run["id"]
    assert doc["state"] == "SUCCEEDED" and doc["exit_code"] == 0 and doc["output_tail"] == "all good\n"
    assert len(received) == 1  # on_dead: nothing died


def test_missed_at_planning_triggers_on_missed(clockd: Clockd, tmp_path: Path) -> None:
    seen = tmp_path / "missed.json"
    # Added while no daemon runs; due in 1 s with 1 s of lateness allowed: missed when it starts.
    added = clockd.ctl_json(
        "add", "--at", "now+1s", "--name", "late", "--misfire", "skip", "--max-lateness", "1s",
        "--on-missed", f"{PY} -c \"{DUMP_ENV}\" {seen}", "--", "true",
    )  # fmt: skip
    due = datetime.fromisoformat(added["next_runs"][0].replace("Z", "+00:00"))
    wait_for("the instant to be past its lateness", lambda: datetime.now(UTC) > due + timedelta(seconds=3), 10)
    clockd.start()
    run = wait_for("MISSED", lambda: [r for r in clockd.runs("late") if r["state"] == "MISSED"], 20)[0]
    env = json.loads(wait_for("the on_missed command", lambda: seen.exists() and seen.read_text(), 20))
    assert env["CLOCKD_NOTIFY_EVENT"] == "missed" and env["CLOCKD_STATE"] == "MISSED"
    assert env["CLOCKD_OCCURRENCE_ID"] == run["id"] and env["CLOCKD_EXIT_CODE"] == ""
    [line] = wait_for("the missed warning", lambda: actions(clockd, "run_missed", "late"), 10)
    assert line["level"] == "warning" and line["count"] == 1


def test_stdin_is_fed_to_the_job(clockd: Clockd) -> None:
    clockd.start()
    clockd.ctl("add", "--at", "now+1s", "--name", "reader", "--stdin", "line one\nline 2%\n", "--", "cat")
    run = wait_for("reader", lambda: [r for r in clockd.runs("reader") if r["state"] == "SUCCEEDED"], 20)[0]
    assert clockd.ctl("logs", run["id"]).stdout == "line one\nline 2%\n"


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user can reach (pytest's tmp_path is root's alone): the jobs of
    an imported system crontab, and their mail, run as their own users."""
    path = Path(tempfile.mkdtemp(prefix="clockd-parity-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        Path("/tmp/clockd-example.lock").unlink(missing_ok=True)


def _occurrence_of(mail: Path) -> str | None:
    """The ``X-Clockd-Occurrence-Id`` of a recorded mail."""
    for line in mail.read_text().splitlines():
        if line.startswith("X-Clockd-Occurrence-Id: "):
            return line.split(": ", 1)[1]
    return None


RECORDING_SENDMAIL = """#!/bin/sh
# A stand-in for sendmail: one file per mail, named by its pid.
printf '%s\\n' "$*" > "{out}/$$.args"
cat > "{out}/$$.tmp" && mv "{out}/$$.tmp" "{out}/$$.mail"
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="jobs of a system crontab run as their users: needs a root worker")
def test_moving_from_cron_as_the_readme_shows(clockd: Clockd, tmp_path: Path, shared_dir: Path) -> None:
    """README "Moving from cron", step by step, with ``clockd run`` for ``systemctl start``
    and a recording sendmail for the host's: the job runs as its user with the crontab's
    env (``$MAILTO`` in its output), ``%`` text as its stdin, MAILTO as mail."""
    crontab = tmp_path / "crontab"
    crontab.write_text((ROOT / "tests/data/crontabs/system.crontab").read_text())
    outbox = shared_dir / "mail"
    outbox.mkdir(mode=0o777)
    outbox.chmod(0o777)
    sendmail = shared_dir / "sendmail"
    sendmail.write_text(RECORDING_SENDMAIL.format(out=outbox))
    sendmail.chmod(0o755)
    clockd.env["PATH"] = f"{shared_dir}:{os.environ['PATH']}"

    # 1. What it becomes.
    dry = clockd.ctl("import-crontab", str(crontab), "--system", "--dry-run")
    assert [line for line in dry.stdout.splitlines() if line.startswith("  - name: ")] == [
        "  - name: echo-8",
        "  - name: ls-9",
        "  - name: cat-10",
    ]
    assert "sendmail" not in dry.stderr
    # 2. Keep it as a schedule file, and apply it.
    schedules = tmp_path / "schedules.d"
    schedules.mkdir()
    (schedules / "crontab.yaml").write_text(dry.stdout)
    clockd.ctl("apply", "-f", str(schedules / "crontab.yaml"))
    # 3. Start clockd.
    clockd.start()
    # 4. The first runs.
    for name in ("echo-8", "ls-9", "cat-10"):
        clockd.ctl("run-now", name)

    def finished(name: str) -> dict[str, Any] | None:
        runs = [r for r in clockd.runs(name) if r["state"] in ("SUCCEEDED", "DEAD")]
        return runs[0] if runs else None

    report = wait_for("echo-8", lambda: finished("echo-8"), 30)
    assert report["state"] == "SUCCEEDED"
    assert clockd.ctl("logs", report["id"]).stdout == "report as nobody, mail to root\n"
    backup = wait_for("ls-9", lambda: finished("ls-9"), 30)
    assert backup["state"] == "DEAD" and backup["exit_code"] == 2
    weekly = wait_for("cat-10", lambda: finished("cat-10"), 30)
    assert clockd.ctl_json("logs", weekly["id"])["output"] == "Weekly summary\nfor ops"  # cron adds no newline

    # The mails and journal lines of these three runs: echo-8 is */10, so when the test
    # crosses a ten-minute mark its scheduled run mails and logs too (not a failure).
    ours = {report["id"], backup["id"], weekly["id"]}

    def our_mails() -> list[Path] | None:
        found = [m for m in outbox.glob("*.mail") if _occurrence_of(m) in ours]
        return found if len(found) == 3 else None

    mails = wait_for("three mails", our_mails, 30)
    texts = sorted(m.read_text() for m in mails)
    assert all(m.with_suffix(".args").read_text() == "-i root\n" for m in mails)
    subjects = sorted(line for t in texts for line in t.splitlines() if line.startswith("Subject: "))
    assert [s.rsplit(" (", 1)[0] for s in subjects] == [
        "Subject: clockd cat-10: SUCCEEDED, exit code 0",
        "Subject: clockd echo-8: SUCCEEDED, exit code 0",
        "Subject: clockd ls-9: DEAD, exit code 2",
    ]
    assert any("report as nobody, mail to root" in t for t in texts)
    # The journal's lines: a start and an end for each run.
    for name in ("echo-8", "ls-9", "cat-10"):
        assert len([d for d in actions(clockd, "run_started", name) if d.get("occurrence") in ours]) == 1
    assert next(d for d in actions(clockd, "run_finished", "echo-8") if d.get("occurrence") in ours)["level"] == "info"
    assert actions(clockd, "run_dead", "ls-9")[0]["level"] == "warning"
