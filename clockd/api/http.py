"""The HTTP/1.1 protocol uvicorn serves the API with.

``httptools`` (a C parser, a dependency) when it imports, else uvicorn's pure-Python
``h11`` protocol: a build without it still serves, only slower. Measured on the create
benchmark (``bench/api.py``, py-spy of the api process): h11's parsing and response
writing took ~25 % of the api process's samples per create, httptools' ~12 %; the server's
CPU per create went from ~0.83 to ~0.70 ms.

Invariant: a request head (request line and headers) larger than ``HEAD_LIMIT`` bytes is
refused with 400 and the connection closed, whichever protocol serves: h11 has the limit
built in (``h11_max_incomplete_event_size``), uvicorn's httptools protocol has none, so
the subclass here counts the bytes that arrive while a head is still incomplete.

Invariant: what uvicorn writes in one turn of the loop leaves in one ``send``, in order
(:class:`_Coalescing`). uvicorn writes an answer's head and its body apart, and with
``TCP_NODELAY`` each write is its own system call and segment; together they cost ~2 % of
a create's CPU less (``bench/api.py``). A streamed body is held for one turn at most.
"""

from __future__ import annotations

import asyncio
from typing import Any

HEAD_LIMIT = 64 * 1024


def http_protocol() -> type[asyncio.Protocol] | str:
    """uvicorn's ``Config(http=…)``: the bounded httptools protocol, or ``"h11"``."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is not installed: h11 serves
        return "h11"

    class BoundedHttpTools(HttpToolsProtocol):
        """uvicorn's httptools protocol with a limit on the request head's size, writing
        through :class:`_Coalescing`."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn's own signature
            super().connection_made(_Coalescing(transport))

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_head = True  # between requests a new head may begin: count it
            self._heads = 0  # heads completed on this connection
            self._head_bytes = 0

        def data_received(self, data: bytes) -> None:
            in_head, heads = self._in_head, self._heads
            super().data_received(data)
            # Only chunks that began and ended inside one incomplete head are counted: a
            # chunk that also carries a body (or a whole request) is bounded by the read size.
            if in_head and self._in_head and self._heads == heads and not self.transport.is_closing():
                self._head_bytes += len(data)
                if self._head_bytes > HEAD_LIMIT:
                    self.send_400_response(f"Request head larger than {HEAD_LIMIT} bytes.")

        def on_headers_complete(self) -> None:
            self._in_head, self._heads = False, self._heads + 1
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._in_head, self._head_bytes = True, 0
            super().on_message_complete()

    return BoundedHttpTools


class _Coalescing(asyncio.Transport):
    """A transport whose writes of one turn of the loop go out joined, at the end of the
    turn (or before a close, in order); everything else is the wrapped transport's."""

    def __init__(self, inner: asyncio.Transport) -> None:
        super().__init__()
        self._inner = inner
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(bytes(data))

    def _flush(self) -> None:
        if self._pending:
            data, self._pending = b"".join(self._pending), []
            if not self._inner.is_closing():
                self._inner.write(data)

    def close(self) -> None:
        self._flush()
        self._inner.close()

    def abort(self) -> None:
        self._pending = []
        self._inner.abort()

    def is_closing(self) -> bool:
        return self._inner.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._inner.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._inner.pause_reading()

    def resume_reading(self) -> None:
        self._inner.resume_reading()

    def is_reading(self) -> bool:
        return self._inner.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._inner.get_protocol()

    def get_write_buffer_size(self) -> int:
        return self._inner.get_write_buffer_size() + sum(len(b) for b in self._pending)

    def can_write_eof(self) -> bool:
        return self._inner.can_write_eof()

    def write_eof(self) -> None:
        self._flush()
        self._inner.write_eof()
