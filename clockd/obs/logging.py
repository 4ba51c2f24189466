"""Structured log lines with a stable ``action`` name.

Every call site passes ``extra={"action": "snake_name", ...}``. The edge picks
the format: ``text`` (humans, TTY), ``json`` (one object per line), or
``journald`` (text with a ``<N>`` syslog priority prefix, which journald parses
from a service's stderr).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}

_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(_fields(record))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self, journald: bool = False) -> None:
        super().__init__()
        self.journald = journald

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(record)
        action = fields.pop("action", None)
        parts = [record.getMessage()]
        if action:
            parts.insert(0, f"[{action}]")
        parts.extend(f"{k}={v}" for k, v in fields.items())
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if self.journald:
            return f"<{_PRIORITY.get(record.levelno, 6)}>{line}"
        ts = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return f"{ts[:-4]}Z {record.levelname.lower():<7} {line}"


def setup_logging(fmt: str = "auto", level: str = "info") -> None:
    """Configure the root logger once, at the edge. ``auto``: text on a TTY, journald
    when started by systemd (``JOURNAL_STREAM`` set), JSON otherwise."""
    import os

    if fmt == "auto":
        if sys.stderr.isatty():
            fmt = "text"
        elif os.environ.get("JOURNAL_STREAM"):
            fmt = "journald"
        else:
            fmt = "json"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(fmt == "journald"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
