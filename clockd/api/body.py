"""Request bodies: JSON only, size- and depth-limited, received within a deadline.

Refused before any parsing work that could be expensive: a declared ``Content-Length``
over the limit (413), a body that grows past it while streaming (413), one not received
within ``body_timeout`` (408: slow clients hold no worker for long), a content type that
is not JSON (415), nesting deeper than ``max_depth`` (422,
measured iteratively after parsing; the parser's own recursion limit is far beyond),
a key given twice in one object (422: ``json`` keeps the last silently, so
``{"schedule": "0 9 * * *", …, "schedule": "0 21 * * *"}`` ran at 21:00; schedule files
refuse duplicate keys as well) and anything ``json`` refuses (400).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import ClientDisconnect, Request

from clockd.api.context import Limits
from clockd.api.problems import Problem

JSON_TYPES = ("application/json", "application/merge-patch+json")


async def read_json(request: Request, limits: Limits, *, optional: bool = False) -> Any:
    """The parsed body; ``optional``: an empty body is ``None``."""
    raw = await _read(request, limits)
    if not raw.strip():
        if optional:
            return None
        raise Problem("malformed-json", "the body is empty: send a JSON document")
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media not in JSON_TYPES:
        raise Problem(
            "unsupported-media-type", f"content type {media or 'none'!r}: send Content-Type: application/json"
        )
    text = _decode(raw)
    deep = Problem("too-deep", f"the JSON is nested more than {limits.max_depth} levels deep; flatten it")
    try:
        data = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except RecursionError:  # the C scanner's own limit: far deeper than ours anyway
        raise deep from None
    except _DuplicateKey as exc:
        raise Problem("invalid-input", f"{exc.key}: given twice in one JSON object; send each key once") from None
    except ValueError as exc:
        raise Problem("malformed-json", f"the body is not valid JSON: {exc}") from None
    if _too_deep(data, limits.max_depth):
        raise deep
    return data


# A refused body is still read (and dropped) up to this many times the limit, as nginx's
# lingering close does: a client still sending when the server closes gets a connection
# reset instead of the 413 that says what is wrong. Larger bodies are cut off at once.
LINGER_FACTOR = 4


async def _linger(request: Request, limits: Limits, declared: int | None) -> None:
    cap = LINGER_FACTOR * limits.max_body
    if declared is not None and declared > cap:
        return

    async def drain() -> None:
        seen = 0
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > cap:
                return

    try:
        await asyncio.wait_for(drain(), limits.body_timeout)
    except (TimeoutError, ClientDisconnect):
        pass


async def _read(request: Request, limits: Limits) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise Problem("malformed-json", "Content-Length is not a number") from None
        if size > limits.max_body:
            await _linger(request, limits, size)
            raise _too_large(limits)
    chunks: list[bytes] = []
    total = 0

    async def receive() -> None:
        nonlocal total
        async for chunk in request.stream():
            total += len(chunk)
            if total > LINGER_FACTOR * limits.max_body:
                break
            if total <= limits.max_body:
                chunks.append(chunk)
        if total > limits.max_body:  # read (and dropped) to its end or the cap: see LINGER_FACTOR
            raise _too_large(limits)

    try:
        # A timeout scope, not wait_for: no task per request (a create's body is usually in
        # already, and wait_for's task cost more than the read).
        async with asyncio.timeout(limits.body_timeout):
            await receive()
    except TimeoutError:
        raise Problem(
            "request-timeout",
            f"the body was not received within {limits.body_timeout:g} s",
            headers={"Connection": "close"},
        ) from None
    except ClientDisconnect:
        raise Problem("request-timeout", "the client went away before sending the whole body") from None
    return b"".join(chunks)


def _too_large(limits: Limits) -> Problem:
    return Problem(
        "body-too-large",
        f"the body is larger than {limits.max_body // 1024} KiB; split a large apply into several files",
        headers={"Connection": "close"},
    )


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Problem("malformed-json", f"the body is not UTF-8 ({exc.reason} at byte {exc.start})") from None


def _too_deep(data: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` levels (iteratively: no
    recursion on hostile input)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(f"{key}: duplicate key")
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return found
