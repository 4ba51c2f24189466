"""Small helpers the route modules share: query parameters, JSON answers, If-Match."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from clockd.api.problems import Problem
from clockd.core.instants import format_instant, parse_instant
from clockd.errors import InvalidInput


def answer(doc: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=_default).encode()
    return Response(body, status, headers=headers, media_type="application/json")


def _default(value: Any) -> Any:
    if isinstance(value, datetime):  # naive: a wall-clock time (explain's local "at"), as written
        return format_instant(value) if value.tzinfo is not None else value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise Problem("invalid-input", f"{name}: give a whole number from {low} to {high}, not {text!r}")
    return value


def query_instant(request: Request, name: str, now: datetime) -> datetime | None:
    text = request.query_params.get(name)
    if not text:
        return None
    try:
        return parse_instant(text, "UTC", now)
    except InvalidInput as exc:
        raise Problem("invalid-input", f"{name}: {exc.message}") from None


def query_bool(request: Request, name: str) -> bool:
    text = (request.query_params.get(name) or "false").lower()
    if text not in ("true", "false", "1", "0"):
        raise Problem("invalid-input", f"{name}: give true or false, not {text!r}")
    return text in ("true", "1")


def if_match(request: Request) -> int | None:
    """The version an ``If-Match`` header names (``"3"`` or ``W/"3"``), if any."""
    text = request.headers.get("if-match")
    if text is None:
        return None
    tag = text.strip().removeprefix("W/").strip('"')
    try:
        return int(tag)
    except ValueError:
        raise Problem("invalid-input", f'If-Match: {text!r} is not an ETag this API gave out (e.g. "3")') from None
