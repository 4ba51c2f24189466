"""HTTP egress policy (issue "Trust boundaries" 2): a real server on loopback stands for
the inside (etcd's JSON API, /metrics, a metadata service); the real HTTP runner and the
real clockctl. Nothing leaves 127.0.0.1."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from clockd.config import load_settings
from clockd.core.model import AttemptOutcome, HttpTarget
from clockd.errors import InvalidInput
from clockd.runner.egress import EgressPolicy, LiveEgress
from clockd.runner.http import HttpRunner
from clockd.wiring import egress_policy
from tests.harness.home import existing_store
from tests.unit.test_runner_http import request

BIN = Path(sys.executable).parent


@pytest.fixture
def inside() -> Iterator[tuple[int, list[str]]]:
    """A loopback HTTP server; returns its port and the paths it was asked for."""
    hits: list[str] = []

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the runner pools the connection

        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "6")
            self.end_headers()
            self.wfile.write(b"inside")

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield int(httpd.server_address[1]), hits
    httpd.shutdown()
    httpd.server_close()


def policy(**values: str) -> EgressPolicy:
    env = {f"CLOCKD_{k.upper()}": v for k, v in values.items()}
    return egress_policy(load_settings(env=env, config_path=os.devnull))


async def get(runner: HttpRunner, url: str, tenant: str = "default") -> tuple[AttemptOutcome, bool, str | None, str]:
    try:
        result = await runner.run(request(HttpTarget(method="GET", url=url), tenant=tenant), asyncio.Event())
    finally:
        await runner.aclose()
    return result.outcome, result.permanent, result.error, result.output


async def test_loopback_is_refused_at_connect_time_by_default(inside: tuple[int, list[str]]) -> None:
    port, hits = inside
    outcome, permanent, error, _ = await get(HttpRunner(egress=policy()), f"http://127.0.0.1:{port}/v3/kv/put")
    assert (outcome, permanent) == (AttemptOutcome.ERROR, True)
    assert error == (
        "egress refused: 127.0.0.1 is a loopback address, not allowed for tenant 'default' (add it to http_allow)"
    )
    assert hits == []


async def test_a_name_is_judged_by_the_address_it_resolves_to(inside: tuple[int, list[str]]) -> None:
    port, hits = inside
    name = socket.gethostname()
    try:
        resolved = {ipaddress.ip_address(i[4][0]) for i in socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)}
    except OSError:
        pytest.skip(f"this host's name {name!r} does not resolve")
    if not all(a.is_loopback for a in resolved):
        pytest.skip(f"this host's name {name!r} does not resolve to loopback only ({resolved})")
    outcome, _, error, _ = await get(HttpRunner(egress=policy()), f"http://{name}:{port}/")
    assert outcome is AttemptOutcome.ERROR
    assert error is not None and error.startswith(f"egress refused: {name} (127.") and "loopback" in error
    assert hits == []


async def test_http_allow_opens_an_address_to_one_tenant_only(inside: tuple[int, list[str]]) -> None:
    port, hits = inside
    allowed = policy(http_allow="team-a=127.0.0.0/8")
    outcome, _, _, output = await get(HttpRunner(egress=allowed), f"http://127.0.0.1:{port}/ok", tenant="team-a")
    assert (outcome, output) == (AttemptOutcome.SUCCEEDED, "HTTP 200 OK\ninside")
    outcome, _, error, _ = await get(HttpRunner(egress=allowed), f"http://127.0.0.1:{port}/no", tenant="team-b")
    assert outcome is AttemptOutcome.ERROR and error is not None and "team-b" in error
    assert hits == ["/ok"]


async def test_clockds_own_servers_stay_refused_even_when_allowed(inside: tuple[int, list[str]]) -> None:
    port, hits = inside
    own = policy(http_allow="*=127.0.0.0/8", etcd=f"http://127.0.0.1:{port}")
    outcome, _, error, _ = await get(HttpRunner(egress=own), f"http://127.0.0.1:{port}/v3/kv/put")
    assert outcome is AttemptOutcome.ERROR
    assert error == f"egress refused: 127.0.0.1:{port} is one of clockd's own servers"
    assert hits == []


def test_the_defaults_and_the_deny_list() -> None:
    default = policy()
    for url in ("http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://10.1.2.3/",
                "http://localhost:9464/metrics", "http://[::1]/", "http://[::ffff:127.0.0.1]/",
                "http://metadata.google.internal/"):  # fmt: skip
        assert default.check_url("default", url) is not None, url
    assert default.check_url("default", "https://example.com/") is None
    private = policy(http_allow="*=10.0.0.0/8,169.254.0.0/16")
    assert private.check_url("default", "http://10.1.2.3/") is None
    assert private.check_url("default", "http://169.254.169.254/") is not None  # metadata: only by exact address
    denied = policy(http_deny="team=*.example.com")
    assert denied.check_url("team", "https://api.example.com/") is not None
    assert denied.check_url("other", "https://api.example.com/") is None


def test_bad_entries_are_config_errors() -> None:
    with pytest.raises(InvalidInput, match="http_allow: team: 'not a host' is not a CIDR"):
        load_settings(env={"CLOCKD_HTTP_ALLOW": "team=not a host"}, config_path=os.devnull)


def test_clockctl_refuses_a_denied_target_when_it_is_written(tmp_path: Path) -> None:
    env = {**os.environ, "CLOCKD_HOME": str(tmp_path / "home"), "CLOCKD_CONFIG": os.devnull}
    env.pop("CLOCKD_STORE", None)
    existing_store(tmp_path / "home")
    argv = [
        str(BIN / "clockctl"),
        "add",
        "--every",
        "1h",
        "--name",
        "meta",
        "--http",
        "GET",
        "http://169.254.169.254/x",
    ]
    add = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert add.returncode == 2, add.stderr
    assert "egress refused: 169.254.169.254 is a cloud metadata address" in add.stderr
    assert "Traceback" not in add.stderr
    listed = subprocess.run([str(BIN / "clockctl"), "list"], env=env, capture_output=True, text=True)
    assert "meta" not in listed.stdout
    env["CLOCKD_HTTP_ALLOW"] = "default=169.254.169.254"
    argv = [
        str(BIN / "clockctl"),
        "add",
        "--every",
        "1h",
        "--name",
        "meta",
        "--http",
        "GET",
        "http://169.254.169.254/x",
    ]
    add = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert add.returncode == 0, add.stderr


async def test_a_policy_replaced_on_sighup_is_not_bypassed_by_a_pooled_connection(
    inside: tuple[int, list[str]],
) -> None:
    """SIGHUP replaces the daemon's LiveEgress: the next request is judged by the new
    policy, not sent over the keep-alive connection the old policy let open."""
    port, hits = inside
    live = LiveEgress(policy(http_allow="*=127.0.0.1"))
    runner = HttpRunner(egress=live)
    try:
        target = HttpTarget(method="GET", url=f"http://127.0.0.1:{port}/allowed")
        first = await runner.run(request(target), asyncio.Event())
        assert first.outcome is AttemptOutcome.SUCCEEDED, first.error
        live.replace(policy())  # the default again: loopback denied
        after = HttpTarget(method="GET", url=f"http://127.0.0.1:{port}/after")
        again = await runner.run(request(after), asyncio.Event())
        assert again.outcome is AttemptOutcome.ERROR
        assert again.error is not None and again.error.startswith("egress refused: 127.0.0.1 is a loopback address")
        assert hits == ["/allowed"]
    finally:
        await runner.aclose()
