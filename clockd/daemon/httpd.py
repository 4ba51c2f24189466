"""A tiny HTTP endpoint for ``/metrics`` (Prometheus text format) and ``/healthz``."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from clockd.errors import InvalidInput
from clockd.obs.metrics import REGISTRY

log = logging.getLogger(__name__)

Health = Callable[[], Awaitable[tuple[bool, dict[str, Any]]]]


async def serve(addr: str, health: Health) -> asyncio.Server:
    """Serve on ``host:port``, or raise :class:`InvalidInput` naming the address when it
    cannot be bound (a port in use, say): ``clockd run`` then stops at start, because a
    daemon running without the metrics and health checks it was configured with is found
    out only when they are needed (``metrics_addr: off`` runs without them on purpose)."""
    host, _, port = addr.rpartition(":")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=5)
            while (await asyncio.wait_for(reader.readline(), timeout=5)) not in (
                b"\r\n",
                b"\n",
                b"",
            ):
                pass
            parts = request.decode("latin-1").split()
            path = parts[1] if len(parts) > 1 else "/"
            if path.startswith("/metrics"):
                status, ctype, body = 200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY)
            elif path.startswith("/healthz"):
                ok, doc = await health()
                status, ctype = (200 if ok else 503), "application/json"
                body = json.dumps(doc, default=str).encode()
            else:
                status, ctype, body = 404, "text/plain", b"not found: try /metrics or /healthz\n"
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            head = (
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    try:
        server = await asyncio.start_server(handle, host or "127.0.0.1", int(port))
    except ValueError:
        raise InvalidInput(f"metrics_addr: {addr!r} is not HOST:PORT (or off)") from None
    except OSError as exc:
        why = f"port {port} is in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
        raise InvalidInput(
            f"metrics_addr: cannot listen on {addr}: {why} (another clockd? choose another with "
            "--metrics-addr / metrics_addr, or off)"
        ) from None
    bound = server.sockets[0].getsockname() if server.sockets else addr
    log.info("metrics on http://%s:%s/metrics", bound[0], bound[1], extra={"action": "metrics_listening"})
    return server
