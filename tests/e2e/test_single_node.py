"""clockd on one machine: real clockd processes, real jobs, the embedded SQLite store."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.e2e.conftest import Clockd, wait_for

pytestmark = pytest.mark.e2e
PY = sys.executable


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_once_job_runs_on_time_and_its_output_is_logged(clockd: Clockd) -> None:
    clockd.start()
    # 5 s ahead: "now" is read before clockctl writes, which can take a second or two on a
    # loaded machine; a run due before it is written is not the on-time run this tests.
    added = clockd.ctl_json("add", "--at", "now+5s", "--name", "hello", "--", "echo", "hi from clockd")
    due = parse(added["next_runs"][0])

    def succeeded() -> dict[str, object] | None:
        runs = clockd.runs("hello")
        return runs[0] if runs and runs[0]["state"] == "SUCCEEDED" else None

    run = wait_for("the once job to succeed", succeeded, timeout=20)
    started = parse(str(run["started_at"]))
    assert abs((started - due).total_seconds()) <= 1.0, (started, due)
    assert clockd.ctl("logs", str(run["id"])).stdout == "hi from clockd\n"
    # The job saw its identity.
    assert run["attempts"] == 1 and run["exit_code"] == 0


def test_job_environment_carries_the_occurrence_identity(clockd: Clockd, tmp_path: Path) -> None:
    clockd.start()
    out = tmp_path / "env.txt"
    script = (
        "import os,sys; open(sys.argv[1],'w').write('\\n'.join("
        "os.environ[k] for k in ('CLOCKD_OCCURRENCE_ID','CLOCKD_SCHEDULE','CLOCKD_SCHEDULED_FOR','CLOCKD_ATTEMPT')))"
    )
    added = clockd.ctl_json("add", "--at", "now+1s", "--name", "ident", "--", PY, "-c", script, str(out))
    run = wait_for("the job to succeed", lambda: [r for r in clockd.runs("ident") if r["state"] == "SUCCEEDED"])[0]
    occ_id, name, scheduled_for, attempt = out.read_text().split("\n")
    assert occ_id == run["id"] and name == "ident" and attempt == "1"
    assert parse(scheduled_for) == parse(added["next_runs"][0])


def test_failing_job_is_retried_with_backoff_then_dead(clockd: Clockd) -> None:
    clockd.start()
    clockd.ctl(
        "add", "--at", "now+1s", "--name", "flaky", "--retries", "2", "--backoff", "1s",
        "--", "sh", "-c", "echo failing >&2; exit 3",
    )  # fmt: skip
    run = wait_for("the job to go DEAD", lambda: [r for r in clockd.runs("flaky") if r["state"] == "DEAD"], 30)[0]
    assert run["attempts"] == 3
    assert run["exit_code"] == 3
    attempts = [clockd.ctl_json("logs", run["id"], "--attempt", str(n)) for n in (1, 2, 3)]
    assert [a["outcome"] for a in attempts] == ["failed", "failed", "failed"]
    assert attempts[0]["output"] == "failing\n"
    # Backoff: each retry starts after the previous attempt finished.
    for before, after in itertools.pairwise(attempts):
        assert parse(after["started_at"]) >= parse(before["finished_at"])


def test_missing_executable_fails_at_once_without_retries(clockd: Clockd) -> None:
    clockd.start()
    clockd.ctl("add", "--at", "now+1s", "--name", "nobin", "--retries", "3", "--", "/no/such/binary")
    run = wait_for("DEAD", lambda: [r for r in clockd.runs("nobin") if r["state"] == "DEAD"], 15)[0]
    assert run["attempts"] == 1
    attempt = clockd.ctl_json("logs", run["id"])
    assert "not found" in attempt["error"]


def test_timeout_kills_the_whole_process_group(clockd: Clockd, tmp_path: Path) -> None:
    clockd.start("--kill-grace", "1s")
    pids = tmp_path / "pids"
    clockd.ctl(
        "add", "--at", "now+1s", "--name", "slow", "--timeout", "2s", "--retries", "0", "--shell",
        "--", f"sleep 300 & echo $! > {pids}; echo $$ >> {pids}; wait",
    )  # fmt: skip
    run = wait_for("the job to time out", lambda: [r for r in clockd.runs("slow") if r["state"] == "DEAD"], 20)[0]
    attempt = clockd.ctl_json("logs", run["id"])
    assert attempt["outcome"] == "timed_out"
    for pid in (int(p) for p in pids.read_text().split()):

        def gone(pid: int = pid) -> bool:
            return not _alive(pid)

        wait_for(f"pid {pid} to be gone", gone, 10)


def test_sigkill_mid_job_redelivers_the_same_occurrence_as_attempt_2(clockd: Clockd, tmp_path: Path) -> None:
    fast = ("--visibility-timeout", "3s", "--heartbeat", "1s")
    clockd.start(*fast)
    marks = tmp_path / "marks"
    marks.mkdir()
    # Attempt 1 records itself and then hangs; attempt 2 records itself and succeeds.
    script = (
        "import os,sys,time; d=sys.argv[1]; n=os.environ['CLOCKD_ATTEMPT']; "
        "open(os.path.join(d, n), 'w').write(str(os.getpid())); "
        "time.sleep(300 if n == '1' else 0)"
    )
    clockd.ctl("add", "--at", "now+1s", "--name", "survivor", "--", PY, "-c", script, str(marks))
    wait_for("attempt 1 to start", lambda: (marks / "1").exists())
    first_pid = int(wait_for("pid of attempt 1", lambda: (marks / "1").read_text()))
    clockd.kill()
    try:
        clockd.start(*fast)
        run = wait_for(
            "attempt 2 to succeed", lambda: [r for r in clockd.runs("survivor") if r["state"] == "SUCCEEDED"], 30
        )[0]
        assert run["attempts"] == 2
        assert (marks / "2").exists()
        first = clockd.ctl_json("logs", run["id"], "--attempt", "1")
        assert first["outcome"] == "lost"
        assert len(clockd.runs("survivor")) == 1  # the same occurrence id, not a new one
    finally:
        if _alive(first_pid):
            os.kill(first_pid, signal.SIGKILL)


def test_sigterm_lets_a_running_job_finish(clockd: Clockd, tmp_path: Path) -> None:
    clockd.start("--drain-grace", "30s")
    started = tmp_path / "started"
    clockd.ctl(
        "add", "--at", "now+1s", "--name", "graceful", "--shell",
        "--", f"touch {started}; sleep 2; echo done",
    )  # fmt: skip
    wait_for("the job to start", started.exists)
    clockd.signal(signal.SIGTERM)
    assert clockd.proc is not None
    assert clockd.proc.wait(30) == 0
    run = clockd.runs("graceful")[0]
    assert run["state"] == "SUCCEEDED"
    assert clockd.ctl("logs", run["id"]).stdout == "done\n"


def test_pause_stops_new_occurrences_and_resume_does_not_replay(clockd: Clockd) -> None:
    clockd.start()
    clockd.ctl("add", "--every", "1s", "--name", "ticker", "--noop")
    wait_for("a few runs", lambda: len([r for r in clockd.runs("ticker") if r["state"] == "SUCCEEDED"]) >= 2)
    paused_doc = clockd.ctl_json("pause", "ticker")
    assert paused_doc["state"] == "paused"
    paused_at = datetime.now(UTC)

    # Runs that were already claimed may finish; nothing new is created once paused.
    def live() -> int:
        return len([r for r in clockd.runs("ticker") if r["state"] != "CANCELED"])

    settled = live()
    resume_marker = wait_for(
        "3 seconds of pause", lambda: (datetime.now(UTC) - paused_at).total_seconds() >= 3 or None, 10, 0.2
    )
    assert resume_marker
    assert live() == settled
    # Taken before the command: resume plans from the instant after its own now, which an
    # instant between that and the command's return belongs to (not the pause).
    resumed_at = datetime.now(UTC)
    clockd.ctl("resume", "ticker")
    wait_for("runs after resume", lambda: live() > settled)
    runs = clockd.runs("ticker")
    in_pause = [
        r for r in runs
        if paused_at < parse(r["scheduled_for"]) < resumed_at and r["state"] not in ("CANCELED",)
    ]  # fmt: skip
    assert in_pause == [], in_pause


def test_second_clockd_on_the_same_store_exits_with_a_clear_message(clockd: Clockd) -> None:
    clockd.start()
    second = subprocess.run(
        [str(Path(PY).parent / "clockd"), "run"], env=clockd.env, capture_output=True, text=True, timeout=30
    )
    assert second.returncode == 4
    assert "another clockd" in second.stderr and "already runs" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1


def _runs_once_on_time(clockd: Clockd, name: str) -> None:
    """Add a once job 5 s ahead (room for a slow clockctl); it succeeds, started within a
    second of its instant."""
    added = clockd.ctl_json("add", "--at", "now+5s", "--name", name, "--", "echo", name)
    due = parse(added["next_runs"][0])

    def succeeded() -> dict[str, object] | None:
        runs = clockd.runs(name)
        return runs[0] if runs and runs[0]["state"] == "SUCCEEDED" else None

    run = wait_for("the once job to succeed", succeeded, timeout=20)
    started = parse(str(run["started_at"]))
    assert 0 <= (started - due).total_seconds() <= 1.0, (started, due)
    assert clockd.ctl("logs", str(run["id"])).stdout == f"{name}\n"


def test_direct_dispatch_runs_jobs_on_time_without_a_relay(clockd: Clockd) -> None:
    """direct_dispatch (the default): the materializer queues the occurrence itself
    (visible at its due time, not before), so the job runs on time with no relay at all
    (without the setting it would wait in the outbox)."""
    clockd.start("--mode", "leader,materializer,worker")
    _runs_once_on_time(clockd, "direct")


def test_with_direct_dispatch_off_the_relay_carries_every_run(clockd: Clockd) -> None:
    """direct_dispatch: false — the materializer writes outbox rows only: without a relay
    the run stays SCHEDULED past its instant; a relay then stages it and it runs."""
    clockd.env["CLOCKD_DIRECT_DISPATCH"] = "false"
    clockd.start("--mode", "leader,materializer,worker")
    added = clockd.ctl_json("add", "--at", "now+1s", "--name", "outboxed", "--", "echo", "outboxed")
    due = parse(added["next_runs"][0])
    runs = wait_for(
        "the run to be planned and due",
        lambda: datetime.now(UTC) > due + timedelta(seconds=2) and clockd.runs("outboxed"),
        10,
    )
    assert [r["state"] for r in runs] == ["SCHEDULED"]
    clockd.stop()
    clockd.start()  # every mode: the relay stages the overdue row
    wait_for(
        "the outboxed run to succeed", lambda: [r for r in clockd.runs("outboxed") if r["state"] == "SUCCEEDED"], 15
    )
    _runs_once_on_time(clockd, "relayed")
