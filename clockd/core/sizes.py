"""Byte sizes as users write them (``512M``, ``1GiB``, ``4096``), parsed and formatted.

Pure, like ``durations``: the CLI (``--memory-limit``), schedule files
(``memory_limit:``), target validation and the runner's messages all read and
print sizes through here, so every front end accepts the same spellings.
"""

from __future__ import annotations

import re
from typing import Final

from clockd.errors import InvalidInput

_UNITS: Final = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE: Final = re.compile(r"([0-9]{1,19})\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
MIN_MEMORY: Final = 1 << 20  # the smallest memory_limit a job may have


def parse_size(text: str) -> int:
    """``"512M"`` → 536870912. Binary units K, M, G, T (``Ki``/``KiB``/``KB`` read the
    same); a bare number is bytes. :class:`InvalidInput` otherwise."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise InvalidInput(f"size {text!r}: expected a number with an optional unit K, M, G or T, e.g. 512M")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def format_size(value: int) -> str:
    """The shortest exact spelling: ``536870912`` → ``"512M"``, ``1536`` → ``"1536"``."""
    for unit in ("T", "G", "M", "K"):
        size = _UNITS[unit.lower()]
        if value >= size and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)
