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
        """uvicorn's httptools protocol with a limit on the request head's size."""

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
