"""Opaque page cursors: URL-safe base64 of a small JSON document. A cursor names the
last item of the page it ends (keyset), never an offset, so a page boundary does not
move when rows are written or removed meanwhile."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from clockd.api.problems import Problem


def encode(**fields: Any) -> str:
    raw = json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(text: str | None, *keys: str) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError):
        data = None
    if not isinstance(data, dict) or any(not isinstance(data.get(k), (str, int)) for k in keys):
        raise Problem("invalid-input", "cursor: not a cursor this API gave out; start again without it")
    return data


def at_and_id(at: datetime, id: str) -> str:
    """A cursor on ``(instant, id)``: the last item of a page ordered by both, newest first."""
    return encode(t=at.isoformat(), i=id)


def decode_at_and_id(text: str | None) -> tuple[datetime, str] | None:
    """The ``(instant, id)`` an ``at_and_id`` cursor names (None: no cursor, the first page)."""
    data = decode(text, "t", "i")
    if data is None:
        return None
    try:
        return datetime.fromisoformat(str(data["t"])), str(data["i"])
    except ValueError:
        raise Problem("invalid-input", "cursor: not a cursor this API gave out; start again without it") from None
