"""The ``api`` mode: uvicorn serving :func:`clockd.api.app.build_app` inside the daemon's
own asyncio loop (no thread, no second loop, no signal handlers of its own: the daemon's
SIGTERM handling stops it like every other mode).

Safe by default: the socket is bound before the daemon reports ready (a taken port is
a one-line error, exit 2); a non-loopback address needs TLS (``api_tls_cert`` and
``api_tls_key``) or an explicit ``api_insecure``, which is logged as a warning at every
start. Slow clients: idle keep-alive connections close after 5 s, bodies must arrive
within ``Limits.body_timeout``, and at most ``LIMIT_CONCURRENCY`` connections are served
at once (more get 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Generator
from typing import Any

import uvicorn
from starlette.routing import BaseRoute

from clockd.api.app import build_app
from clockd.api.auth import principal_for
from clockd.api.context import ApiContext, Limits
from clockd.api.http import HEAD_LIMIT, http_protocol
from clockd.config import Settings, api_listen, is_loopback, resolve_store
from clockd.coord import Coordinator
from clockd.core.clock import Clock
from clockd.errors import InvalidInput
from clockd.runner.egress import EgressPolicy, LiveEgress
from clockd.services import status as status_doc
from clockd.services.ops import Ops
from clockd.services.reconcile import RECONCILE_MAX_SCHEDULES
from clockd.services.status import ReconcileCache
from clockd.store import Store
from clockd.ui.pages import Dashboard, Viewer

log = logging.getLogger(__name__)

LIMIT_CONCURRENCY = 1000
KEEP_ALIVE_SECONDS = 5


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # The daemon owns SIGTERM/SIGINT (clockd.daemon.main); uvicorn must not take them.
        yield


class ApiServer:
    """A service of the supervisor: ``run(stopping)`` serves until ``stopping`` is set."""

    def __init__(self, sock: socket.socket, config: uvicorn.Config, scheme: str = "http") -> None:
        self.sock, self.config, self.scheme = sock, config, scheme

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.sock.getsockname()[:2]
        return str(host), int(port)

    async def run(self, stopping: asyncio.Event) -> None:
        # Said when serving starts, not when the socket is bound while the daemon is composed
        # (before its store lock: a clockd that cannot start says only why).
        host, port = self.address
        http = self.config.http if isinstance(self.config.http, str) else "httptools"  # clockd.api.http
        log.info(
            "api listening on %s://%s:%d (%s)", self.scheme, host, port, http,
            extra={"action": "api_listening", "http": http},
        )  # fmt: skip
        server = _EmbeddedServer(self.config)
        serving = asyncio.create_task(server.serve(sockets=[self.sock]), name="clockd-api-uvicorn")
        waiting = asyncio.create_task(stopping.wait())
        try:
            await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            server.should_exit = True
            waiting.cancel()
            await serving
            self.sock.close()


def dashboard_routes(
    api: ApiContext, settings: Settings, coordinator: Coordinator | None, tls: bool
) -> list[BaseRoute]:
    """The dashboard (``clockd.ui``) over the same store, use cases and tokens as /v1."""

    async def viewer(token: str) -> Viewer | None:
        principal = await principal_for(api, token)
        if principal is None:
            return None
        return Viewer(principal.tenant, principal.role.value, principal.name)

    # The health page never waits for the reconciler: it shows the last report and its age
    # while a refresh runs in the background, the first one started by any page; above the
    # leader's limit of live schedules it says it did not check (services.reconcile).
    cache = ReconcileCache(background=True, max_schedules=RECONCILE_MAX_SCHEDULES)

    async def health() -> dict[str, Any]:
        coordination = await _coordination(settings, coordinator)
        return await status_doc.gather(api.store, settings.horizon, resolve_store(settings.store), coordination, cache)

    def warm() -> None:
        cache.refresh_soon(api.store, settings.horizon)

    return Dashboard(api.store, api.ops, api.clock, viewer, health, secure_cookies=tls, warm=warm).routes()


def cluster_status(
    api: ApiContext, settings: Settings, coordinator: Coordinator | None
) -> Callable[[], Awaitable[dict[str, Any]]]:
    """``clockctl status``'s document, seen from this api process: what ``clockctl status
    --server`` prints (the same keys, so the same rendering)."""
    cache = ReconcileCache()
    location = resolve_store(settings.store)

    async def gather() -> dict[str, Any]:
        coordination = await _coordination(settings, coordinator)
        if coordination["kind"] == "embedded":  # this process is the clockd holding the store's lock
            held = coordinator is not None
            lock = {"path": f"{location.target}.lock", "held": held, "pid": os.getpid() if held else None}
            coordination = {**coordination, "lock": lock}
        elif coordination["kind"] == "etcd":
            coordination = {**coordination, "endpoints": list(settings.etcd)}
        doc = await status_doc.gather(api.store, settings.horizon, location, coordination, cache)
        doc["job_containment"] = _containment()
        return doc

    return gather


@functools.cache
def _containment() -> str:
    from clockd.runner.cgroups import detect

    return detect().describe()


async def _coordination(settings: Settings, coordinator: Coordinator | None) -> dict[str, Any]:
    """This process's view of the cluster, in the shape ``clockctl status`` prints."""
    if coordinator is None:
        return {"kind": "unknown", "leader": None, "members": []}
    found = await coordinator.status()
    return {
        "kind": "etcd" if settings.etcd else "embedded",
        "cluster": settings.cluster,
        "reachable": found.reachable,
        "leader": {"node": found.leader_node, "token": found.leader_token} if found.leader_node else None,
        "members": [status_doc.member_doc(m) for m in found.members],
    }


def build_api_server(
    settings: Settings,
    store: Store,
    clock: Clock,
    coordinator: Coordinator | None = None,
    egress: Callable[[], EgressPolicy] | None = None,
) -> ApiServer:
    """The api mode from the settings: bind the socket now (errors are bad config)."""
    host, port, tls = api_listen(settings)
    if not is_loopback(host) and not tls:
        log.warning(
            "api: serving plain HTTP on %s: bearer tokens cross the network unencrypted",
            settings.api_addr,
            extra={"action": "api_insecure"},
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it every answer (headers, then body) waited ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = f"port {port} is in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
        raise InvalidInput(
            f"api_addr: cannot listen on {settings.api_addr}: {why} (another clockd? choose another with "
            "--api-addr / api_addr, or run without the api mode: --mode leader,materializer,relay,worker)"
        ) from None
    sock.listen(2048)
    sock.setblocking(False)
    if egress is None:  # the daemon passes its live policy (SIGHUP replaces it)
        egress = LiveEgress(
            EgressPolicy.from_settings(settings.http_allow, settings.http_deny, settings.store, settings.etcd)
        )
    api = ApiContext(
        store,
        # Schedules written through the API meet the same egress policy as clockctl's.
        Ops(store, clock, settings.shard_count, egress=egress),
        clock,
        Limits(writes_per_second=settings.api_writes_per_second),
    )
    api.cluster_status = cluster_status(api, settings, coordinator)
    config = uvicorn.Config(
        build_app(api, dashboard_routes(api, settings, coordinator, tls)),
        log_config=None,
        access_log=False,
        server_header=False,
        lifespan="off",
        limit_concurrency=LIMIT_CONCURRENCY,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=5,
        h11_max_incomplete_event_size=HEAD_LIMIT,
        ssl_certfile=settings.api_tls_cert or None,
        ssl_keyfile=settings.api_tls_key or None,
        http=http_protocol(),  # httptools when installed (clockd.api.http), else h11
        loop="none",
    )
    return ApiServer(sock, config, "https" if tls else "http")
