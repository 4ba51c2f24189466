"""clockd as a shared service, end to end: real clockd processes, real jobs, a real HTTP server.

* HTTP targets: retries on 503 with one Idempotency-Key, Retry-After honoured, 400 → DEAD at once.
* Run as a user: throwaway system users (root only — CI runs as root), allowed_users refusals.
* Secrets: a planted secret (a file, a daemon environment variable, an env file) is used by
  jobs and HTTP requests, and then every output clockd produces — clockctl in both formats,
  the daemon's debug log, /metrics, check-config, the database files — is searched for it.
* Limits and hostile jobs: memory limit, an output flood next to a ticking job, shell
  metacharacters in argv.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import BIN, Clockd, wait_for
from tests.e2e.test_operator import _actions
from tests.harness import free_port
from tests.harness.users import SYSTEM_PY, processes_of, throwaway_users

pytestmark = pytest.mark.e2e
PY = sys.executable
TERMINAL = ("SUCCEEDED", "DEAD", "MISSED", "CANCELED", "SKIPPED_OVERLAP")


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def final(daemon: Clockd, name: str, timeout: float = 30) -> dict[str, Any]:
    """The schedule's only occurrence once it reached a terminal state."""

    def done() -> dict[str, Any] | None:
        runs = daemon.runs(name)
        return runs[0] if runs and runs[0]["state"] in TERMINAL else None

    return wait_for(f"{name} to finish", done, timeout)


# -- a scriptable HTTP server -------------------------------------------------------------

Route = Callable[[int, dict[str, str], bytes], tuple[int, dict[str, str], bytes]]


@dataclass
class Web:
    url: str
    routes: dict[str, Route] = field(default_factory=dict)
    seen: dict[str, list[dict[str, str]]] = field(default_factory=dict)


@pytest.fixture
def web() -> Iterator[Web]:
    state = Web(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = dict(self.headers.items())
            calls = state.seen.setdefault(self.path, [])
            calls.append(headers)
            status, extra, payload = state.routes[self.path](len(calls), headers, body)
            self.send_response(status)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _serve

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


# -- HTTP targets ---------------------------------------------------------------------------


def test_http_503_twice_then_200_is_three_attempts_with_one_idempotency_key(clockd: Clockd, web: Web) -> None:
    def flaky(n: int, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        if n == 1:
            return 503, {}, b"warming up"
        if n == 2:
            return 503, {"Retry-After": "2"}, b"still busy"
        return 200, {}, b"accepted"

    web.routes["/flaky"] = flaky
    clockd.start()
    added = clockd.ctl_json(
        "add", "--at", "now+1s", "--name", "hook", "--retries", "2", "--backoff", "1s",
        "--http", "POST", f"{web.url}/flaky", "--header", "Content-Type: application/json", "--body", '{"x": 1}',
    )  # fmt: skip
    assert added["target"]["type"] == "http"
    run = final(clockd, "hook")
    assert (run["state"], run["attempts"], run["exit_code"]) == ("SUCCEEDED", 3, 200)
    calls = web.seen["/flaky"]
    assert [c["Idempotency-Key"] for c in calls] == [run["id"]] * 3
    assert {parse(c["X-Clockd-Scheduled-For"]) for c in calls} == {parse(run["scheduled_for"])}
    assert [c["X-Clockd-Attempt"] for c in calls] == ["1", "2", "3"]
    attempts = [clockd.ctl_json("logs", run["id"], "--attempt", str(n)) for n in (1, 2, 3)]
    assert [a["outcome"] for a in attempts] == ["failed", "failed", "succeeded"]
    assert attempts[0]["output"] == "HTTP 503 Service Unavailable\nwarming up"
    assert attempts[1]["error"] == "HTTP 503 Service Unavailable; Retry-After 2s"
    assert attempts[2]["output"] == "HTTP 200 OK\naccepted"
    # Retry-After 2 beats the 1s backoff: attempt 3 waited at least 2 seconds.
    gap = parse(attempts[2]["started_at"]) - parse(attempts[1]["finished_at"])
    assert gap.total_seconds() >= 1.9, gap


def test_http_400_is_dead_after_one_attempt(clockd: Clockd, web: Web) -> None:
    web.routes["/bad"] = lambda n, h, b: (400, {}, b'{"error": "no such thing"}')
    clockd.start()
    clockd.ctl("add", "--at", "now+1s", "--name", "bad", "--retries", "3", "--backoff", "1s",
               "--http", "GET", f"{web.url}/bad")  # fmt: skip
    run = final(clockd, "bad")
    assert (run["state"], run["attempts"], run["exit_code"]) == ("DEAD", 1, 400)
    attempt = clockd.ctl_json("logs", run["id"])
    assert attempt["error"].startswith("HTTP 400 Bad Request")
    assert "permanent failure" in run["reason"]
    assert len(web.seen["/bad"]) == 1


# -- run as a user ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_users() -> Iterator[list[pwd.struct_passwd]]:
    with throwaway_users(2) as users:
        yield users


def test_jobs_run_as_the_named_users_and_disallowed_ones_go_dead(
    tmp_path: Path, two_users: list[pwd.struct_passwd]
) -> None:
    t1, t2 = two_users
    g1 = grp.getgrgid(t1.pw_gid).gr_name
    daemon = Clockd(tmp_path / "home", {"CLOCKD_ALLOWED_USERS": f"default=*;team-a={t2.pw_name}"})
    daemon.home.mkdir()
    try:
        daemon.start()
        who = "echo $(id -un):$(id -gn):$HOME:$USER"
        daemon.ctl("add", "--at", "now+1s", "--name", "as-t1", "--user", t1.pw_name, "--shell", "--", who)
        daemon.ctl("add", "--at", "now+1s", "--name", "as-t2", "--user", t2.pw_name, "--group", g1,
                   "--shell", "--", who)  # fmt: skip
        daemon.ctl("add", "--at", "now+1s", "--name", "as-root", "--user", "root", "--", "id")
        daemon.ctl("add", "--at", "now+1s", "--name", "a-t1", "--tenant", "team-a", "--user", t1.pw_name,
                   "--", "id")  # fmt: skip
        daemon.ctl("add", "--at", "now+1s", "--name", "a-t2", "--tenant", "team-a", "--user", t2.pw_name,
                   "--", "id", "-un")  # fmt: skip
        one = final(daemon, "as-t1")
        assert one["state"] == "SUCCEEDED", one
        assert daemon.ctl("logs", one["id"]).stdout == f"{t1.pw_name}:{g1}:{t1.pw_dir}:{t1.pw_name}\n"
        two = final(daemon, "as-t2")
        assert daemon.ctl("logs", two["id"]).stdout == f"{t2.pw_name}:{g1}:{t2.pw_dir}:{t2.pw_name}\n"
        root = final(daemon, "as-root")
        assert (root["state"], root["attempts"]) == ("DEAD", 1)
        assert daemon.ctl_json("logs", root["id"])["error"].startswith(
            "tenant 'default' may not run jobs as user 'root' (allowed_users in the daemon config)"
        )
        wait_for("a-t1 to go dead", lambda: daemon.ctl_json("runs", "a-t1", "--tenant", "team-a")[0]["state"] == "DEAD")
        other_tenant = daemon.ctl_json("runs", "a-t1", "--tenant", "team-a")[0]
        assert f"tenant 'team-a' may not run jobs as user '{t1.pw_name}'" in other_tenant["reason"]
        wait_for(
            "a-t2 to succeed", lambda: daemon.ctl_json("runs", "a-t2", "--tenant", "team-a")[0]["state"] == "SUCCEEDED"
        )
        # A user unknown where clockctl runs is refused at add time.
        refused = daemon.ctl("add", "--at", "now+1s", "--user", "clockd-no-such-user", "--", "id", check=False)
        assert refused.returncode == 2 and "does not exist on this host" in refused.stderr
    finally:
        daemon.stop(timeout=30)


# -- secrets never leak -----------------------------------------------------------------------


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


VERIFY = (
    "import hashlib, os, sys\n"
    "want = dict(a.split('=', 1) for a in sys.argv[1:])\n"
    "bad = [k for k, h in want.items() if hashlib.sha256(os.environ.get(k, '').encode()).hexdigest() != h]\n"
    "print('verified' if not bad else 'mismatch: ' + ','.join(bad))\n"
    "sys.exit(3 if bad or os.environ.get('FAIL') else 0)\n"
)


def test_a_planted_secret_never_appears_in_anything_clockd_outputs(tmp_path: Path, web: Web) -> None:
    file_secret = f"file-secret-{uuid.uuid4().hex}"
    env_secret = f"env-secret-{uuid.uuid4().hex}"
    envfile_secret = f"envfile-secret-{uuid.uuid4().hex}"
    planted = (file_secret, env_secret, envfile_secret)
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir(mode=0o700)
    token = secrets_dir / "token"
    token.write_text(file_secret + "\n")
    token.chmod(0o600)
    env_file = secrets_dir / "job.env"
    env_file.write_text(f"# job secrets\nFROM_FILE={envfile_secret}\n")

    def authorised(n: int, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        ok = headers.get("Authorization") == f"Bearer {file_secret}" and headers.get("X-Key") == env_secret
        return (200, {}, b"welcome") if ok else (401, {}, b"who are you")

    def echo(n: int, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        # The worst server: it repeats the request's headers in an error body.
        return 500, {}, json.dumps(headers).encode()

    web.routes["/auth"] = authorised
    web.routes["/echo"] = echo
    daemon = Clockd(
        tmp_path / "home",
        {"TRUST_ENV_SECRET": env_secret, "CLOCKD_METRICS_ADDR": "127.0.0.1:0", "CLOCKD_LOG_LEVEL": "debug"},
    )
    daemon.home.mkdir()
    file_ref, env_ref = f"${{file:{token}}}", "${env:TRUST_ENV_SECRET}"
    checks = [f"TOKEN={sha(file_secret)}", f"KEY={sha(env_secret)}", f"FROM_FILE={sha(envfile_secret)}"]
    env_args = ["--env", f"TOKEN={file_ref}", "--env", f"KEY={env_ref}", "--env-from-file", str(env_file)]
    try:
        daemon.start()
        daemon.ctl("add", "--at", "now+1s", "--name", "uses-secrets", *env_args, "--", PY, "-c", VERIFY, *checks)
        daemon.ctl("add", "--at", "now+1s", "--name", "fails-with-secrets", "--retries", "1", "--backoff", "1s",
                   *env_args, "--env", "FAIL=1", "--", PY, "-c", VERIFY, *checks)  # fmt: skip
        daemon.ctl("add", "--at", "now+1s", "--name", "missing-secret", "--retries", "3",
                   "--env", f"TOKEN={secrets_dir}/absent", "--env", f"X=${{file:{secrets_dir}/absent}}",
                   "--", "true")  # fmt: skip
        daemon.ctl("add", "--at", "now+1s", "--name", "http-secrets", "--http", "GET", f"{web.url}/auth",
                   "--header", f"Authorization: Bearer {file_ref}", "--header", f"X-Key: {env_ref}")  # fmt: skip
        daemon.ctl("add", "--at", "now+1s", "--name", "http-echo", "--retries", "0", "--http", "POST",
                   f"{web.url}/echo", "--header", f"Authorization: Bearer {file_ref}",
                   "--header", f"X-Key: {env_ref}")  # fmt: skip
        names = ["uses-secrets", "fails-with-secrets", "missing-secret", "http-secrets", "http-echo"]
        runs = {name: final(daemon, name) for name in names}

        # The jobs really had the secrets.
        assert runs["uses-secrets"]["state"] == "SUCCEEDED", runs["uses-secrets"]
        assert daemon.ctl("logs", runs["uses-secrets"]["id"]).stdout == "verified\n"
        assert (runs["fails-with-secrets"]["state"], runs["fails-with-secrets"]["attempts"]) == ("DEAD", 2)
        assert (runs["missing-secret"]["state"], runs["missing-secret"]["attempts"]) == ("DEAD", 1)
        missing = daemon.ctl_json("logs", runs["missing-secret"]["id"])["error"]
        assert missing.startswith(f"secret ${{file:{secrets_dir}/absent}} cannot be read: No such file")
        assert runs["http-secrets"]["state"] == "SUCCEEDED", runs["http-secrets"]
        assert runs["http-echo"]["state"] == "DEAD"
        echoed = daemon.ctl_json("logs", runs["http-echo"]["id"])["output"]
        assert "Bearer ***" in echoed  # the server did echo it; clockd scrubbed it

        # Everything clockd shows, in every format.
        outputs: dict[str, str] = {}
        for fmt in ("table", "json"):
            outputs[f"list {fmt}"] = daemon.ctl("list", "-o", fmt).stdout
            outputs[f"runs {fmt}"] = daemon.ctl("runs", "-n", "100", "-o", fmt).stdout
            for name in names:
                outputs[f"show {name} {fmt}"] = daemon.ctl("show", name, "-o", fmt).stdout
                outputs[f"runs {name} {fmt}"] = daemon.ctl("runs", name, "-o", fmt).stdout
                for n in range(1, runs[name]["attempts"] + 1):
                    logs = daemon.ctl("logs", runs[name]["id"], "--attempt", str(n), "-o", fmt)
                    outputs[f"logs {name} {n} {fmt}"] = logs.stdout + logs.stderr
        outputs["check-config"] = subprocess.run(
            [str(BIN / "clockd"), "check-config"], env=daemon.env, capture_output=True, text=True, timeout=30
        ).stdout
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
            outputs["metrics"] = response.read().decode()
        daemon.stop(timeout=30)
        outputs["daemon log (debug)"] = daemon.log()
        for db in daemon.home.glob("clockd.db*"):
            outputs[f"database {db.name}"] = db.read_bytes().decode("latin-1")

        # Sanity: the outputs are real, and show the references.
        assert "clockd_attempts_total" in outputs["metrics"]
        assert '"level": "debug"' in outputs["daemon log (debug)"]
        assert file_ref in outputs["show uses-secrets json"] and env_ref in outputs["show http-secrets table"]
        leaks = [(where, secret) for where, text in outputs.items() for secret in planted if secret in text]
        assert leaks == [], f"secret values leaked into: {[w for w, _ in leaks]}"
    finally:
        daemon.stop(timeout=30)


def test_a_dsn_password_never_appears_in_errors_or_config_output(tmp_path: Path) -> None:
    password = f"pw-{uuid.uuid4().hex}"
    dsn = f"postgresql://clockd:{password}@127.0.0.1:{free_port()}/clockd"
    env = {**os.environ, "CLOCKD_HOME": str(tmp_path), "CLOCKD_STORE": dsn, "CLOCKD_LOG_FORMAT": "json"}
    env["CLOCKD_ETCD"] = f"http://127.0.0.1:{free_port()}"
    outputs = {
        "clockctl list": subprocess.run(
            [str(BIN / "clockctl"), "list"], env=env, capture_output=True, text=True, timeout=60
        ),
        "clockd check-config": subprocess.run(
            [str(BIN / "clockd"), "check-config"], env=env, capture_output=True, text=True, timeout=60
        ),
        "clockd run": subprocess.run(
            [str(BIN / "clockd"), "run", "--metrics-addr", "off"], env=env, capture_output=True, text=True, timeout=120
        ),
    }
    assert outputs["clockctl list"].returncode == 4
    assert outputs["clockd run"].returncode != 0
    assert "clockd:***@" in outputs["clockd check-config"].stdout
    leaked = [name for name, out in outputs.items() if password in out.stdout + out.stderr]
    assert leaked == []


# -- limits and hostile jobs ------------------------------------------------------------------


def test_memory_limit_output_flood_and_metacharacters(tmp_path: Path) -> None:
    daemon = Clockd(tmp_path / "home", {"CLOCKD_OUTPUT_LIMIT": "4096"})
    daemon.home.mkdir()
    try:
        daemon.start("--concurrency", "4")
        daemon.ctl("add", "--at", "now+1s", "--name", "hog", "--retries", "0", "--memory-limit", "256M",
                   "--", PY, "-c", "x = bytearray(2 << 30); print('got 2 GiB')")  # fmt: skip
        flood = (
            "import sys, time\n"
            "for i in range(300):\n"
            "    sys.stdout.write(str(i) * 65536)\n"
            "    time.sleep(0.01)\n"
            "print('END')"
        )
        daemon.ctl("add", "--at", "now+1s", "--name", "flood", "--", PY, "-c", flood)
        daemon.ctl("add", "--every", "1s", "--name", "ticker", "--", "true")
        weird = ["a;b", "$(id)", "`id`", "'single'", '"double"', "*", "x && echo injected", ""]
        daemon.ctl("add", "--at", "now+1s", "--name", "weird", "--", "printf", "[%s]\\n", *weird)

        hog = final(daemon, "hog")
        assert hog["state"] == "DEAD"
        attempt = daemon.ctl_json("logs", hog["id"])
        assert "MemoryError" in attempt["output"] and "got 2 GiB" not in attempt["output"]
        assert attempt["error"].startswith("exit code 1 (runs under memory_limit 256M)")

        flooded = final(daemon, "flood", timeout=60)
        assert flooded["state"] == "SUCCEEDED"
        out = daemon.ctl_json("logs", flooded["id"])
        assert out["output"].startswith("[clockd: ") and out["output"].endswith("END\n")
        assert len(out["output"].encode()) < 4096 + 100
        # The ticker kept running while the flood did.
        ticks = [r for r in daemon.runs("ticker") if r["state"] == "SUCCEEDED"]
        during = [
            r for r in ticks if parse(flooded["started_at"]) <= parse(r["started_at"]) <= parse(flooded["finished_at"])
        ]
        assert len(during) >= 2, (flooded, ticks)

        odd = final(daemon, "weird")
        assert daemon.ctl("logs", odd["id"]).stdout == "".join(f"[{w}]\n" for w in weird)
    finally:
        daemon.stop(timeout=30)


def test_fork_bomb_as_a_throwaway_user_is_contained(tmp_path: Path, two_users: list[pwd.struct_passwd]) -> None:
    assert SYSTEM_PY is not None
    t1, _ = two_users
    bomb = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)"
    daemon = Clockd(tmp_path / "home")
    daemon.home.mkdir()
    try:
        daemon.start("--kill-grace", "1s")
        # The ticker first, ticking before the bomb is added: a slow second clockctl could
        # otherwise start it after the bomb's few seconds were over.
        daemon.ctl("add", "--every", "1s", "--name", "ticker", "--", "true")
        wait_for("a tick", lambda: any(r["state"] == "SUCCEEDED" for r in daemon.runs("ticker")), 15)
        daemon.ctl("add", "--at", "now+1s", "--name", "bomb", "--user", t1.pw_name, "--nproc-limit", "30",
                   "--timeout", "3s", "--retries", "0", "--", SYSTEM_PY, "-c", bomb)  # fmt: skip
        run = final(daemon, "bomb")
        assert run["state"] == "DEAD"
        assert daemon.ctl_json("logs", run["id"])["outcome"] == "timed_out"
        wait_for("the bomb's processes to be gone", lambda: not processes_of(t1.pw_uid), 15)
        ticks = [r for r in daemon.runs("ticker") if r["state"] == "SUCCEEDED"]
        assert any(parse(run["started_at"]) <= parse(r["started_at"]) <= parse(run["finished_at"]) for r in ticks)
    finally:
        daemon.stop(timeout=30)


# -- the egress policy on reload (SIGHUP) ---------------------------------------------------


def test_schedules_dir_meets_the_egress_policy_and_sighup_changes_the_policy(
    clockd: Clockd, web: Web, tmp_path: Path
) -> None:
    web.routes["/hook"] = lambda n, headers, body: (200, {}, b"reached")
    clockd.env.pop("CLOCKD_HTTP_ALLOW")  # the policy comes from the config file here
    schedules, config = tmp_path / "schedules.d", tmp_path / "clockd.yaml"
    schedules.mkdir()

    def hook(url: str) -> None:
        entry = {"name": "hook", "schedule": "0 0 1 1 *", "http": {"method": "GET", "url": url}}
        (schedules / "jobs.yaml").write_text(json.dumps({"jobs": [entry]}))

    def reload(text: str) -> None:
        config.write_text(f"schedules_dir: {schedules}\nlog_level: info\n{text}")
        before = len(_actions(clockd, "config_reloaded"))
        clockd.signal(signal.SIGHUP)
        wait_for("the reload", lambda: len(_actions(clockd, "config_reloaded")) > before, 15)

    hook("http://hooks.example.com/hook")
    config.write_text(f"schedules_dir: {schedules}\nlog_level: info\n")
    clockd.env["CLOCKD_CONFIG"] = str(config)  # clockctl's write-time check reads it too
    clockd.start()
    wait_for("the directory applied at start", lambda: _actions(clockd, "schedules_applied"), 15)

    # A file now naming a loopback target: refused on reload, the stored version stays.
    hook(f"{web.url}/hook")
    reload("")
    [refused] = wait_for("the refusal", lambda: _actions(clockd, "schedules_apply_refused"), 15)
    assert "egress refused: 127.0.0.1 is a loopback address" in refused["msg"]
    assert "\n" not in refused["msg"] and "jobs.yaml" in refused["msg"]
    assert clockd.ctl_json("show", "hook")["target"]["url"] == "http://hooks.example.com/hook"

    # The operator allows loopback: SIGHUP alone applies the directory, and the workers'
    # connections follow the new policy too.
    reload("http_allow:\n  default: [127.0.0.1]\n")
    wait_for("the file applied", lambda: len(_actions(clockd, "schedules_applied")) == 2, 15)
    assert clockd.ctl_json("show", "hook")["target"]["url"] == f"{web.url}/hook"
    assert "http_allow" in _actions(clockd, "config_reloaded")[-1]["changed"]
    clockd.ctl("add", "--every", "1s", "--name", "ticker", "--retries", "0", "--http", "GET", f"{web.url}/hook")
    wait_for("a request through the policy", lambda: [r for r in clockd.runs("ticker") if r["state"] == "SUCCEEDED"])

    # And withdraws it: the next requests are refused after DNS, not sent over the
    # keep-alive connection the allowed ones left in the pool.
    reload("")

    def refused_run() -> list[str]:
        return [r["id"] for r in clockd.runs("ticker") if r["state"] == "DEAD"]

    [dead, *_] = wait_for("a run refused by the new policy", refused_run, 20)
    log = clockd.ctl_json("logs", dead)
    assert log["error"].startswith(
        "egress refused: 127.0.0.1 is a loopback address, not allowed for tenant 'default' (add it to http_allow)"
    )
    refused_write = clockd.ctl("add", "--at", "now", "--name", "more", "--http", "GET", f"{web.url}/hook", check=False)
    assert refused_write.returncode == 2 and "egress refused" in refused_write.stderr
