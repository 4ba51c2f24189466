"""A lean HTTP/1.1 load client for the API benchmark: keep-alive connections, one request
in flight on each, answers read by ``Content-Length``.

httpx costs ~3–4 ms of client CPU per request on this machine, more than the server's
create, so a benchmark client built on it measures itself (one core of it issues at most
~250–300 requests/s). This one costs ~0.1 ms per request (5–9 % of a core at 650–950
creates/s; it parses only the status line and the headers it needs), so the figure is
the server's.
It speaks just what clockd's answers use (no chunked bodies, no redirects, no TLS).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Connection:
    """One keep-alive connection to ``host:port``; ``request`` sends one and reads its answer."""

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port = host, port
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in {"Host": f"{host}:{port}", **headers}.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, target: str, doc: Any = None) -> Answer:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        body = b"" if doc is None else json.dumps(doc, separators=(",", ":")).encode()
        head = f"{method} {target} HTTP/1.1\r\n{self._fixed}"
        if doc is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self._writer.write(head.encode() + b"\r\n" + body)
        status_line = await self._reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split(b" ", 2)[1])
        length, close = 0, False
        while True:
            line = await self._reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
            elif name == b"transfer-encoding":
                raise ValueError("a chunked answer: this client reads Content-Length bodies only")
        data = await self._reader.readexactly(length) if length else b""
        if close:
            await self.close()
        return Answer(status, data)

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except ConnectionError:
                pass
