"""A new user's first runs against a real ``clockd`` (issue 15 item 12): ``logs NAME``,
a finished ``--at`` schedule shown as done, a busy metrics port refused at start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import Clockd, wait_for

BIN = Path(sys.executable).parent


def test_logs_name_shows_the_latest_run_and_a_finished_at_schedule_is_done(clockd: Clockd) -> None:
    clockd.start()
    clockd.ctl("add", "--at", "now+1s", "--name", "hello", "--", "echo", "hello from clockd")
    wait_for("the run to succeed", lambda: [r for r in clockd.runs("hello") if r["state"] == "SUCCEEDED"])
    logs = clockd.ctl("logs", "hello")
    assert logs.stdout == "hello from clockd\n"
    assert clockd.ctl_json("show", "hello")["state"] == "done"
    listed = next(line for line in clockd.ctl("list").stdout.splitlines() if line.lstrip().startswith("hello"))
    assert " done " in listed and " active " not in listed
    clockd.ctl("add", "--at", "now+1h", "--name", "later", "--", "true")
    missing = clockd.ctl("logs", "later", check=False)
    assert missing.returncode == 1 and "has not run yet" in missing.stderr
    nothing = clockd.ctl("logs", "no-such-thing", check=False)
    assert nothing.returncode == 1, nothing
    assert "no occurrence and no schedule named 'no-such-thing'" in nothing.stderr
    short = clockd.ctl("logs", "0951", check=False)  # it said only "no occurrence '0951'"
    assert short.returncode == 1 and "needs 6 or more characters" in short.stderr, short
    # A run with no output says so (logs printed nothing at all).
    clockd.ctl("add", "--at", "now+1s", "--name", "quiet", "--", "true")
    wait_for("the quiet run to succeed", lambda: [r for r in clockd.runs("quiet") if r["state"] == "SUCCEEDED"])
    quiet = clockd.ctl("logs", "quiet")
    assert quiet.stdout == "" and "no output captured" in quiet.stderr, quiet


def _run_with_a_busy_port(home: Path, setting: str, **extra: str) -> tuple[int, subprocess.CompletedProcess[str]]:
    """``clockd run`` with ``setting`` (an env variable) on a loopback port another socket
    holds; returns the port and the finished run."""
    home.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "CLOCKD_HOME": str(home), setting: f"127.0.0.1:{port}", **extra}
        env.pop("CLOCKD_STORE", None)
        result = subprocess.run([str(BIN / "clockd"), "run"], env=env, capture_output=True, text=True, timeout=60)
    return port, result


def test_a_busy_metrics_port_stops_clockd_run_with_exit_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    port, result = _run_with_a_busy_port(home, "CLOCKD_METRICS_ADDR")
    assert result.returncode == 2, result
    assert f"cannot listen on 127.0.0.1:{port}: port {port} is in use" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (home / "clockd.db").exists()  # nothing written: it made and migrated a store first


def test_a_busy_api_port_stops_clockd_run_with_exit_2_and_says_what_to_do(tmp_path: Path) -> None:
    # It said only "cannot listen there (Address already in use)".
    port, result = _run_with_a_busy_port(tmp_path / "home", "CLOCKD_API_ADDR", CLOCKD_METRICS_ADDR="off")
    assert result.returncode == 2, result
    assert f"api_addr: cannot listen on 127.0.0.1:{port}: port {port} is in use" in result.stderr
    assert "--api-addr" in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_clockd_flag_mistakes_and_bad_config_are_one_line_with_exit_2(tmp_path: Path) -> None:
    # argparse printed its usage block before the error; a config file's `log_level:
    # verbose` was a traceback.
    config = tmp_path / "clockd.yaml"
    config.write_text("log_level: verbose\n")
    env = {**os.environ, "CLOCKD_HOME": str(tmp_path / "home")}
    cases = {
        ("run", "--bogus"): "clockd: error: unrecognized arguments: --bogus (see clockd --help)",
        ("check-config", "--log-level", "loud"): "argument --log-level: invalid choice: 'loud'",
        ("nonsense",): "argument COMMAND: invalid choice: 'nonsense'",
        ("check-config", "--config", str(config)): "log_level: 'verbose' is not one of debug, info, warning, error",
    }
    for args, needle in cases.items():
        result = subprocess.run([str(BIN / "clockd"), *args], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, (args, result)
        assert result.stderr.startswith("clockd: error: ") and len(result.stderr.splitlines()) == 1, result.stderr
        assert needle in result.stderr, result.stderr
