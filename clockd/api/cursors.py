"""Opaque page cursors: URL-safe base64 of a small JSON document. A cursor names the
last item of the page it ends (keyset), never an offset, so a page boundary does not
move when rows are written or removed meanwhile."""

from __future__ import annotations

import base64
import binascii
import json
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
