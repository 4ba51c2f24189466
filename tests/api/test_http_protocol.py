"""The HTTP/1.1 protocol the API is served with (``clockd.api.http``): httptools when
installed, h11 otherwise, each with the same limit on a request head, over a real socket."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from clockd.api.http import HEAD_LIMIT, http_protocol


async def _echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers with the size of the body it received."""
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = str(size).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(params=["httptools", "h11"])
async def server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[int]:
    if request.param == "h11":  # as on a build without httptools: the import fails
        monkeypatch.setitem(sys.modules, "uvicorn.protocols.http.httptools_impl", None)
    protocol = http_protocol()
    assert (protocol == "h11") == (request.param == "h11")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    config = uvicorn.Config(
        _echo, http=protocol, h11_max_incomplete_event_size=HEAD_LIMIT, lifespan="off", log_config=None, loop="none"
    )
    served = uvicorn.Server(config)
    task = asyncio.create_task(served.serve(sockets=[sock]))
    try:
        yield sock.getsockname()[1]
    finally:
        served.should_exit = True
        await task
        sock.close()


async def _exchange(port: int, pieces: list[bytes]) -> bytes:
    """Send ``pieces`` one write each, then read until the server closes or answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for piece in pieces:
            if writer.is_closing():
                break
            writer.write(piece)
            try:
                await writer.drain()
            except ConnectionError:
                break
        return await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()


async def test_requests_with_heads_and_large_bodies_are_served(server: int) -> None:
    body = b"x" * (4 * HEAD_LIMIT)  # one write: the body arrives with the head
    head = b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    answer = await _exchange(server, [head + body])
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"%d" % len(body))


async def test_a_request_head_over_the_limit_is_refused_and_the_connection_closed(server: int) -> None:
    filler = b"X-Filler: " + b"a" * 4000 + b"\r\n"
    pieces = [b"GET /echo HTTP/1.1\r\nHost: t\r\n"] + [filler] * (2 * HEAD_LIMIT // len(filler))
    answer = await _exchange(server, [*pieces, b"\r\n"])
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
