"""HttpRunner: what a request carries, how answers map to outcomes, secrets, and the worker's Retry-After.

Most tests answer through ``httpx.MockTransport`` (every header and byte visible,
no sockets); a few use a real server on 127.0.0.1 for what only a socket shows.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from clockd.core.clock import ManualClock
from clockd.core.model import AttemptOutcome, HttpTarget, NoopTarget, OccurrenceState, ScheduleDef, ScheduleKind, Target
from clockd.modes.worker import Worker, WorkerSettings
from clockd.runner import RunRequest, RunResult
from clockd.runner.dispatch import DispatchRunner
from clockd.runner.http import DEFAULT_TIMEOUT, HttpRunner
from clockd.runner.identity import UserPolicy
from clockd.runner.process import ProcessRunner
from clockd.store import Claim

SCHEDULED_FOR = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
Handler = Callable[[httpx.Request], Any]


def request(target: Target, *, tenant: str = "default", **kw: Any) -> RunRequest:
    return RunRequest(
        occurrence_id="occ-42",
        schedule_name="hook",
        scheduled_for=SCHEDULED_FOR,
        attempt=2,
        target=target,
        tenant=tenant,
        **kw,
    )


async def run(
    target: HttpTarget,
    handler: Handler,
    *,
    runner: HttpRunner | None = None,
    stop: asyncio.Event | None = None,
    **kw: Any,
) -> RunResult:
    runner = runner or HttpRunner(transport=httpx.MockTransport(handler))
    try:
        return await runner.run(request(target, **kw), stop or asyncio.Event())
    finally:
        await runner.aclose()


def answer(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Handler:
    return lambda req: httpx.Response(status, content=body, headers=headers)


# -- what the request carries ---------------------------------------------------------


async def test_request_carries_the_idempotency_key_schedule_time_headers_and_body() -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, content=b"done")

    target = HttpTarget(
        method="POST",
        url="https://example.test/hook?x=1",
        headers=(
            ("X-Team", "infra"),
            ("X-Team", "dup"),
            ("Idempotency-Key", "spoofed"),
            ("Content-Type", "text/plain"),
        ),
        body="héllo",
    )
    result = await run(target, handler)
    assert result.outcome is AttemptOutcome.SUCCEEDED
    assert (result.exit_code, result.output) == (200, "HTTP 200 OK\ndone")
    (req,) = seen
    assert (req.method, str(req.url)) == ("POST", "https://example.test/hook?x=1")
    assert req.headers.get_list("X-Team") == ["infra", "dup"]
    assert req.headers.get_list("Idempotency-Key") == ["occ-42"]
    assert req.headers["X-Clockd-Scheduled-For"] == "2026-03-29T01:30:00Z"
    assert req.headers["X-Clockd-Attempt"] == "2"
    assert req.headers["User-Agent"].startswith("clockd/")
    assert req.content == "héllo".encode()


async def test_no_cookies_are_kept_between_requests() -> None:
    cookies: list[str | None] = []

    def handler(req: httpx.Request) -> httpx.Response:
        cookies.append(req.headers.get("cookie"))
        return httpx.Response(200, headers={"Set-Cookie": "session=abc; Path=/"})

    runner = HttpRunner(transport=httpx.MockTransport(handler))
    target = HttpTarget(method="GET", url="http://example.test/")
    for _ in range(2):
        assert (await runner.run(request(target), asyncio.Event())).outcome is AttemptOutcome.SUCCEEDED
    await runner.aclose()
    assert cookies == [None, None]


# -- what the answer means ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expect", "outcome", "permanent"),
    [
        (200, (), AttemptOutcome.SUCCEEDED, False),
        (204, (), AttemptOutcome.SUCCEEDED, False),
        (202, (200, 204), AttemptOutcome.FAILED, True),
        (204, (200, 204), AttemptOutcome.SUCCEEDED, False),
        (409, (409,), AttemptOutcome.SUCCEEDED, False),
        (400, (), AttemptOutcome.FAILED, True),
        (401, (), AttemptOutcome.FAILED, True),
        (404, (), AttemptOutcome.FAILED, True),
        (301, (), AttemptOutcome.FAILED, True),
        (408, (), AttemptOutcome.FAILED, False),
        (429, (), AttemptOutcome.FAILED, False),
        (500, (), AttemptOutcome.FAILED, False),
        (503, (200,), AttemptOutcome.FAILED, False),
    ],
)
async def test_status_classification(
    status: int, expect: tuple[int, ...], outcome: AttemptOutcome, permanent: bool
) -> None:
    result = await run(HttpTarget(method="GET", url="http://example.test/", expect_status=expect), answer(status))
    assert (result.outcome, result.permanent, result.exit_code) == (outcome, permanent, status)
    if outcome is AttemptOutcome.FAILED:
        assert result.error is not None and result.error.startswith(f"HTTP {status}")
    if status == 301:
        assert result.error == "HTTP 301 Moved Permanently (redirects are not followed)"


async def test_retry_after_seconds_and_dates() -> None:
    target = HttpTarget(method="GET", url="http://example.test/")
    result = await run(target, answer(503, b"busy", {"Retry-After": "7"}))
    assert (result.outcome, result.permanent, result.retry_after) == (AttemptOutcome.FAILED, False, 7.0)
    assert result.error == "HTTP 503 Service Unavailable; Retry-After 7s"
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    result = await run(target, answer(429, headers={"Retry-After": later}))
    assert result.retry_after is not None and 100 < result.retry_after <= 120
    result = await run(target, answer(503, headers={"Retry-After": "99999999999"}))
    assert result.retry_after == 86400.0
    result = await run(target, answer(503, headers={"Retry-After": "soon"}))
    assert result.retry_after is None
    # A permanent failure's Retry-After means nothing.
    assert (await run(target, answer(400, headers={"Retry-After": "5"}))).retry_after is None


async def test_body_output_is_the_head_capped_at_output_limit() -> None:
    result = await run(HttpTarget(method="GET", url="http://example.test/"), answer(200, b"a" * 5000), output_limit=100)
    assert result.output == "HTTP 200 OK\n" + "a" * 100 + "\n[clockd: body truncated after 100 bytes]"


async def test_timeout_and_stop() -> None:
    async def slow(req: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return httpx.Response(200)  # pragma: no cover

    target = HttpTarget(method="GET", url="http://example.test/")
    result = await run(target, slow, timeout=0.2)
    assert (result.outcome, result.error) == (AttemptOutcome.TIMED_OUT, "timed out after 0.2s")
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.1, stop.set)
    result = await run(target, slow, stop=stop)
    assert result.outcome is AttemptOutcome.STOPPED
    assert DEFAULT_TIMEOUT == 60.0


async def test_network_errors_are_retryable_and_bad_requests_permanent() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runner = HttpRunner()
    refused = await runner.run(request(HttpTarget(method="GET", url=f"http://127.0.0.1:{port}/")), asyncio.Event())
    assert (refused.outcome, refused.permanent) == (AttemptOutcome.FAILED, False)
    assert refused.error is not None and refused.error.startswith("request failed: ConnectError")
    bad = await runner.run(request(HttpTarget(method="GET", url="ftp://example.test/")), asyncio.Event())
    assert (bad.outcome, bad.permanent) == (AttemptOutcome.ERROR, True)
    await runner.aclose()


# -- secrets ------------------------------------------------------------------------------


async def test_secret_headers_are_resolved_at_run_time_and_scrubbed_from_output(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok-very-secret\n")
    seen: list[str] = []

    def echo(req: httpx.Request) -> httpx.Response:
        seen.append(req.headers["Authorization"])
        return httpx.Response(500, content=json.dumps(dict(req.headers)).encode())

    target = HttpTarget(
        method="GET",
        url="https://example.test/",
        headers=(("Authorization", f"Bearer ${{file:{token}}}"), ("X-Env", "${env:HOOK_KEY}")),
    )
    runner = HttpRunner(transport=httpx.MockTransport(echo), environ={"HOOK_KEY": "env-very-secret"})
    result = await run(target, echo, runner=runner)
    assert seen == ["Bearer tok-very-secret"]
    assert result.outcome is AttemptOutcome.FAILED
    # The server echoed the headers; the recorded output does not repeat the secrets.
    assert "tok-very-secret" not in result.output and "env-very-secret" not in result.output
    assert "***" in result.output


async def test_unreadable_or_forbidden_secret_is_a_permanent_error_naming_the_reference(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    target = HttpTarget(method="GET", url="http://example.test/", headers=(("X-Key", f"${{file:{missing}}}"),))
    result = await run(target, answer(200))
    assert (result.outcome, result.permanent) == (AttemptOutcome.ERROR, True)
    assert result.error == f"secret ${{file:{missing}}} cannot be read: No such file or directory"
    runner = HttpRunner(transport=httpx.MockTransport(answer(200)), policy=UserPolicy({"team": ["*"]}))
    result = await run(target, answer(200), runner=runner, tenant="team")
    assert result.error is not None and result.error.startswith("tenant 'team' may not use secret references")
    # A resolved value that would split the header is refused without showing it.
    bad = tmp_path / "bad"
    bad.write_text("line1\nline2\n")
    target = HttpTarget(method="GET", url="http://example.test/", headers=(("X-Key", f"${{file:{bad}}}"),))
    result = await run(target, answer(200))
    assert result.error == "header 'X-Key': the value contains a line break or NUL"


# -- a real socket ---------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(length)
            seen.append(dict(self.headers))
            self.send_response(201)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()
    httpd.server_close()


async def test_dispatch_routes_http_commands_and_noop(server: tuple[str, list[dict[str, str]]]) -> None:
    url, seen = server
    runner = DispatchRunner(ProcessRunner(), HttpRunner())
    try:
        http = await runner.run(request(HttpTarget(method="POST", url=url, body="{}")), asyncio.Event())
        noop = await runner.run(request(NoopTarget()), asyncio.Event())
    finally:
        await runner.aclose()
    assert (http.outcome, http.exit_code, http.output) == (AttemptOutcome.SUCCEEDED, 201, "HTTP 201 Created\nok")
    assert seen[0]["Idempotency-Key"] == "occ-42"
    assert noop.outcome is AttemptOutcome.SUCCEEDED


# -- the worker: Retry-After and the tenant --------------------------------------------------


class _Store:
    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.lookups = 0

    async def get_schedule_by_id(self, schedule_id: str) -> Any:
        from clockd.core.model import Schedule, ScheduleState

        self.lookups += 1
        definition = ScheduleDef(
            name="hook", kind=ScheduleKind.EVERY, expr="1h", tz="UTC", target=NoopTarget(), tenant=self.tenant
        )
        return Schedule(schedule_id, 1, ScheduleState.ACTIVE, definition, None, 0, SCHEDULED_FOR, SCHEDULED_FOR)


class _Recorder:
    def __init__(self, result: RunResult) -> None:
        self.result = result
        self.requests: list[RunRequest] = []

    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        self.requests.append(request)
        return self.result


def claim(target: Any, attempt: int = 1) -> Claim:
    return Claim(
        occurrence_id="occ-1",
        lease_token=f"tok-{attempt}-{random.random()}",
        attempt=attempt,
        schedule_id="sched-1",
        schedule_name="hook",
        version=1,
        scheduled_for=SCHEDULED_FOR,
        target=target,
        timeout=None,
        max_attempts=3,
        retry_backoff=timedelta(seconds=1),
        retry_backoff_max=timedelta(minutes=10),
        permanent_exit_codes=(),
        lease_until=SCHEDULED_FOR + timedelta(seconds=30),
    )


async def test_worker_waits_at_least_retry_after_and_passes_the_tenant() -> None:
    clock = ManualClock(SCHEDULED_FOR)
    store = _Store("team-a")
    runner = _Recorder(RunResult(AttemptOutcome.FAILED, exit_code=503, retry_after=120.0))
    worker = Worker(
        store,  # type: ignore[arg-type]  # a fake store: only get_schedule_by_id is called
        runner,
        clock,
        WorkerSettings(concurrency=4),
        rng=random.Random(1),
    )
    target = HttpTarget(method="GET", url="http://example.test/")
    for attempt in (1, 2):
        worker._start(claim(target, attempt))
        await asyncio.gather(*[e.task for e in worker.running.values() if e.task])
    assert [r.tenant for r in runner.requests] == ["team-a", "team-a"]
    assert store.lookups == 1  # cached per schedule version
    for completion in worker.pending:
        assert completion.next_state is OccurrenceState.RETRY_WAIT
        assert completion.retry_at == SCHEDULED_FOR + timedelta(seconds=120)
    # Without Retry-After the backoff (≤ 1s here, full jitter) decides.
    runner.result = RunResult(AttemptOutcome.FAILED, exit_code=503)
    worker._start(claim(target, 1))
    await asyncio.gather(*[e.task for e in worker.running.values() if e.task])
    retry_at = worker.pending[-1].retry_at
    assert retry_at is not None and retry_at <= SCHEDULED_FOR + timedelta(seconds=1)
    # No-op targets need no tenant: no lookup.
    worker._start(claim(NoopTarget(), 1))
    await asyncio.gather(*[e.task for e in worker.running.values() if e.task])
    assert store.lookups == 1


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed (needed to make a self-signed certificate)")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return key, cert


async def test_tls_is_verified_unless_insecure(self_signed: tuple[Path, Path]) -> None:
    import ssl

    key, cert = self_signed

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{httpd.server_address[1]}/"
    runner = HttpRunner()
    try:
        verified = await runner.run(request(HttpTarget(method="GET", url=url)), asyncio.Event())
        assert verified.outcome is AttemptOutcome.FAILED
        assert verified.error is not None and "CERTIFICATE_VERIFY_FAILED" in verified.error
        insecure = await runner.run(request(HttpTarget(method="GET", url=url, insecure=True)), asyncio.Event())
        assert insecure.outcome is AttemptOutcome.SUCCEEDED
    finally:
        await runner.aclose()
        httpd.shutdown()
        httpd.server_close()
