"""HTTP runner: sends an ``HttpTarget``'s request (the ``Runner`` port's HTTP adapter).

What a request carries and what its answer means:

* The target's headers (secret references resolved at run time, see
  ``clockd.runner.secrets``; the tenant must be allowed the worker's own user to use
  them, ``clockd.runner.identity``), then ``Idempotency-Key: <occurrence id>`` (the
  same on every attempt, so a receiver can drop duplicates), ``X-Clockd-Scheduled-For``
  (ISO 8601 UTC) and ``X-Clockd-Attempt`` — these cannot be overridden.
  ``User-Agent: clockd/<version>`` unless the target sets one.
* **Success**: a status in ``expect_status``, or any 2xx when that is empty.
* **Retryable failure** (``FAILED``): 408, 425, 429 and 5xx, and network errors
  (refused, reset, DNS, TLS); ``Retry-After`` (seconds or an HTTP date, capped at a
  day) comes back as ``RunResult.retry_after`` and the worker waits at least that
  long before the next attempt. A timeout is ``TIMED_OUT``, retryable too.
* **Permanent failure** (straight to DEAD): any other status (other 4xx, and 3xx:
  redirects are not followed), a malformed request, an unreadable secret.
* The attempt's ``exit_code`` is the HTTP status; its output is the status line
  then the first ``output_limit`` bytes of the body.
* **Egress**: every connection is checked against the tenant's egress policy after DNS
  resolution (``clockd.runner.egress``); a refused one is a permanent ``ERROR``
  ("egress refused: …"), so the occurrence goes DEAD with the reason.
* The schedule's ``timeout`` bounds the whole exchange (default
  ``DEFAULT_TIMEOUT``); ``stop`` cancels it (``STOPPED``).

TLS is verified against the system trust store unless the target says ``insecure``. One ``httpx.AsyncClient`` per
verification mode is shared by all runs (connection pooling) and closed by
``aclose`` at shutdown. The clients keep no cookies (jobs of different tenants
share them) and ignore the environment (``trust_env=False``: no proxy variables,
no ``~/.netrc`` credentials added to a tenant's request). httpx's own log lines,
which carry URLs and response headers, are limited to warnings; this module logs
URLs with passwords and secret-looking query values masked, never headers.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import re
import ssl
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpcore
import httpx

from clockd import __version__
from clockd.core.model import RESERVED_HEADERS, AttemptOutcome, HttpTarget, redact_url
from clockd.runner import RunRequest, RunResult, secrets
from clockd.runner import identity as ids
from clockd.runner.egress import EgressDenied, EgressPolicy, GuardedBackend, LiveEgress

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 60.0
MAX_RETRY_AFTER = 86400.0
RETRYABLE_STATUSES = frozenset({408, 425, 429})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class HttpRunner:
    """Runs ``HttpTarget``\\ s. ``transport`` replaces the network (tests)."""

    def __init__(
        self,
        *,
        policy: ids.UserPolicy | None = None,
        environ: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        egress: EgressPolicy | LiveEgress | None = None,
    ) -> None:
        self._policy = policy or ids.UserPolicy()
        self._environ = environ
        self._transport = transport
        # None: no egress checks (tests, embedding); the daemon always passes one (wiring).
        self._egress = LiveEgress(egress) if isinstance(egress, EgressPolicy) else egress
        self._clients: dict[tuple[bool, str, int], httpx.AsyncClient] = {}
        # Clients of an older egress policy (SIGHUP): closed once their last request ends.
        self._retired: set[httpx.AsyncClient] = set()
        self._busy: dict[httpx.AsyncClient, int] = {}
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger(name).level))

    def _client(self, insecure: bool, tenant: str) -> httpx.AsyncClient:
        # One client (one connection pool) per tenant when an egress policy applies: a
        # connection is checked against the policy of the tenant that opened it.
        # A new policy generation gets new pools: a connection is never reused under a
        # policy other than the one that let it open.
        live = self._egress
        key = (insecure, tenant if live is not None else "", live.generation if live is not None else 0)
        client = self._clients.get(key)
        if client is None:
            if live is not None:
                self._retire(live.generation)
            # The system trust store (and SSL_CERT_FILE / SSL_CERT_DIR, read by
            # OpenSSL), where operators install their private CAs.
            context = _insecure_context() if insecure else ssl.create_default_context()
            transport = self._transport
            if transport is None and live is not None:
                transport = _guarded_transport(context, GuardedBackend(live(), tenant))
            client = httpx.AsyncClient(
                verify=context,
                follow_redirects=False,
                trust_env=False,
                cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
                transport=transport,
                headers={"User-Agent": f"clockd/{__version__}"},
            )
            self._clients[key] = client
        return client

    def _retire(self, generation: int) -> None:
        """Move the pools of older policy generations out of use (closed when idle)."""
        for key in [k for k in self._clients if k[2] != generation]:
            self._retired.add(self._clients.pop(key))

    async def _close_idle_retired(self) -> None:
        for client in [c for c in self._retired if not self._busy.get(c)]:
            self._retired.discard(client)
            await client.aclose()

    async def aclose(self) -> None:
        clients, self._clients = [*self._clients.values(), *self._retired], {}
        self._retired = set()
        for client in clients:
            await client.aclose()

    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        started = time.monotonic()
        target = request.target
        if not isinstance(target, HttpTarget):
            return _error(f"the HTTP runner cannot run a {target.kind} target", started)
        if stop.is_set():
            return RunResult(AttemptOutcome.STOPPED, error="stopped before start")
        resolver: secrets.Resolver | None = None
        try:
            if any(secrets.has_references(v) for _, v in target.headers):
                reader = self._policy.http_reader(request.tenant)
                resolver = secrets.Resolver(reader, self._environ if self._environ is not None else os.environ)
                headers = await asyncio.to_thread(_headers, request, target, resolver)
            else:
                headers = _headers(request, target, None)
        except (ids.Refused, secrets.SecretError) as exc:
            return _error(exc.message, started)
        values = resolver.values if resolver is not None else []
        url = redact_url(target.url)
        extra = {"occurrence_id": request.occurrence_id, "attempt": request.attempt}
        log.debug(
            "%s %s",
            target.method,
            url,
            extra={"action": "http_request", "method": target.method, "url": url, **extra},
        )
        limit = request.timeout if request.timeout is not None else DEFAULT_TIMEOUT
        exchange = asyncio.ensure_future(self._exchange(target, request.tenant, headers, request.output_limit, limit))
        stop_wait = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({exchange, stop_wait}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()
            if not exchange.done():
                exchange.cancel()
                await asyncio.wait({exchange})  # let httpx close the connection
        duration = time.monotonic() - started
        if exchange.cancelled():
            if stop.is_set():
                return RunResult(AttemptOutcome.STOPPED, error="stopped", duration=duration)
            return RunResult(AttemptOutcome.TIMED_OUT, error=f"timed out after {limit:g}s", duration=duration)
        failure = exchange.exception()
        if failure is not None:
            return _transport_failure(failure, target, values, duration, limit)
        status, reason, body, truncated, retry_after_header = exchange.result()
        output = f"HTTP {status} {reason}\n" + body.decode("utf-8", errors="replace")
        if truncated:
            output += f"\n[clockd: body truncated after {request.output_limit} bytes]"
        output = secrets.scrub(output, values)
        log.debug(
            "%s %s: %d",
            target.method,
            url,
            status,
            extra={"action": "http_response", "status": status, "duration": duration, **extra},
        )
        ok = status in target.expect_status if target.expect_status else 200 <= status < 300
        if ok:
            return RunResult(AttemptOutcome.SUCCEEDED, exit_code=status, output=output, duration=duration)
        retryable = status in RETRYABLE_STATUSES or 500 <= status < 600
        error = f"HTTP {status} {reason}".rstrip()
        if target.expect_status:
            error += f" (expected {', '.join(str(s) for s in target.expect_status)})"
        elif 300 <= status < 400:
            error += " (redirects are not followed)"
        retry_after = _retry_after(retry_after_header) if retryable else None
        if retry_after is not None:
            error += f"; Retry-After {retry_after:g}s"
        return RunResult(
            AttemptOutcome.FAILED,
            exit_code=status,
            output=output,
            error=secrets.scrub(error, values),
            duration=duration,
            permanent=not retryable,
            retry_after=retry_after,
        )

    async def _exchange(
        self, target: HttpTarget, tenant: str, headers: list[tuple[bytes, bytes]], limit: int, seconds: float
    ) -> tuple[int, str, bytes, bool, str | None]:
        client = self._client(target.insecure, tenant)
        content = target.body.encode() if target.body is not None else None
        req = client.build_request(
            target.method, target.url, headers=headers, content=content, timeout=httpx.Timeout(seconds)
        )
        self._busy[client] = self._busy.get(client, 0) + 1
        try:
            response = await client.send(req, stream=True)
            try:
                body = bytearray()
                truncated = False
                async for chunk in response.aiter_bytes():
                    room = max(0, limit) - len(body)
                    if len(chunk) > room:
                        body += chunk[:room]
                        truncated = True
                        break
                    body += chunk
            finally:
                await response.aclose()
        finally:
            self._busy[client] -= 1
            if not self._busy[client]:
                del self._busy[client]
            if self._retired:
                await self._close_idle_retired()
        return response.status_code, response.reason_phrase, bytes(body), truncated, response.headers.get("retry-after")


def _guarded_transport(context: ssl.SSLContext, backend: GuardedBackend) -> httpx.AsyncHTTPTransport:
    """httpx's own transport over a connection pool whose network backend is ``backend``.
    httpx has no argument for the backend; its documented way to customize the pool is
    to build the httpcore pool yourself (the "Custom transports" section of its docs),
    which its transport then wraps (mapping httpcore's errors to httpx's)."""
    transport = httpx.AsyncHTTPTransport(verify=context, trust_env=False)
    transport._pool = httpcore.AsyncConnectionPool(ssl_context=context, network_backend=backend)
    return transport


def _insecure_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _headers(request: RunRequest, target: HttpTarget, resolver: secrets.Resolver | None) -> list[tuple[bytes, bytes]]:
    """The request's headers; raises SecretError naming a header, never its value."""
    out: list[tuple[bytes, bytes]] = []
    for name, raw in target.headers:
        if name.lower() in RESERVED_HEADERS:
            continue
        if not _TOKEN.fullmatch(name):
            raise secrets.SecretError(f"header {name!r}: not a valid header name")
        value = resolver.resolve(raw) if resolver is not None else raw
        if any(c in value for c in "\r\n\x00"):
            raise secrets.SecretError(f"header {name!r}: the value contains a line break or NUL")
        out.append((name.encode("ascii"), value.encode("utf-8")))
    out.append((b"Idempotency-Key", request.occurrence_id.encode()))
    out.append((b"X-Clockd-Scheduled-For", _iso_utc(request.scheduled_for).encode()))
    out.append((b"X-Clockd-Attempt", str(request.attempt).encode()))
    return out


def _iso_utc(instant: datetime) -> str:
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _retry_after(value: str | None) -> float | None:
    """Seconds from ``Retry-After`` (delta-seconds or an HTTP date), capped; None if absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value[:12])
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return min(max(0.0, seconds), MAX_RETRY_AFTER)


def _transport_failure(
    exc: BaseException, target: HttpTarget, values: list[str], duration: float, limit: float
) -> RunResult:
    detail = secrets.scrub(str(exc).replace(target.url, redact_url(target.url)), values)
    kind = type(exc).__name__
    if isinstance(exc, EgressDenied):
        return RunResult(AttemptOutcome.ERROR, error=f"egress refused: {exc}", duration=duration, permanent=True)
    if isinstance(exc, httpx.TimeoutException):
        return RunResult(
            AttemptOutcome.TIMED_OUT, error=f"{kind}: {detail or f'no answer within {limit:g}s'}", duration=duration
        )
    if isinstance(exc, (httpx.InvalidURL, httpx.UnsupportedProtocol, httpx.LocalProtocolError)):
        return RunResult(
            AttemptOutcome.ERROR, error=f"invalid request: {kind}: {detail}", duration=duration, permanent=True
        )
    if isinstance(exc, (httpx.TransportError, OSError)):
        return RunResult(AttemptOutcome.FAILED, error=f"request failed: {kind}: {detail}", duration=duration)
    log.error("HTTP runner failed: %s", kind, extra={"action": "http_runner_crashed"})
    return RunResult(AttemptOutcome.ERROR, error=f"request failed: {kind}: {detail}", duration=duration)


def _error(message: str, started: float) -> RunResult:
    log.warning("%s", message, extra={"action": "runner_cannot_start", "permanent": True})
    return RunResult(AttemptOutcome.ERROR, error=message, duration=time.monotonic() - started, permanent=True)
