"""Durations as people write them: ``90m``, ``1h30m``, ``30s``, ``2d``, ``500ms``.

Invariants:
* :func:`parse_duration` accepts one or more ``<whole number><unit>`` terms,
  units ``d h m s ms us`` from largest to smallest, each at most once (spaces
  between terms are allowed, case is ignored); anything else raises
  :class:`~clockd.errors.InvalidInput` with a message saying what is wrong;
* :func:`format_duration` is its inverse and canonical:
  ``parse_duration(format_duration(td)) == td`` for every non-negative
  ``td``, and ``format_duration(parse_duration(s))`` is the shortest spelling
  (``90m`` → ``1h30m``, ``0s`` for zero).
"""

from __future__ import annotations

import re
from datetime import timedelta

from clockd.errors import InvalidInput

__all__ = ["format_duration", "parse_duration"]

_UNITS: tuple[tuple[str, timedelta], ...] = (
    ("d", timedelta(days=1)),
    ("h", timedelta(hours=1)),
    ("m", timedelta(minutes=1)),
    ("s", timedelta(seconds=1)),
    ("ms", timedelta(milliseconds=1)),
    ("us", timedelta(microseconds=1)),
)
_RANK = {unit: i for i, (unit, _) in enumerate(_UNITS)}
_SIZE = dict(_UNITS)
_TERM = re.compile(r"\s*([0-9]+)(ms|us|d|h|m|s)\s*")
_EXAMPLES = "e.g. 90m, 1h30m, 30s, 2d, 500ms"


def parse_duration(text: str) -> timedelta:
    """``"1h30m"`` → ``timedelta(hours=1, minutes=30)``; :class:`InvalidInput` if malformed."""
    source = text
    cleaned = text.strip().lower()
    if not cleaned:
        raise InvalidInput(f"empty duration ({_EXAMPLES})")
    if cleaned.startswith("-"):
        raise InvalidInput(f"duration {source!r} is negative")
    if re.fullmatch(r"[0-9]+", cleaned):
        raise InvalidInput(f"duration {source!r} has no unit ({_EXAMPLES})")
    if re.search(r"[0-9]\.[0-9]", cleaned):
        raise InvalidInput(f"duration {source!r}: use whole numbers, e.g. 1h30m rather than 1.5h")
    total = timedelta(0)
    position = 0
    last_rank = -1
    while position < len(cleaned):
        match = _TERM.match(cleaned, position)
        if match is None:
            rest = cleaned[position:].strip()
            raise InvalidInput(f"duration {source!r}: cannot read {rest!r} ({_EXAMPLES})")
        digits, unit = match.group(1).lstrip("0") or "0", match.group(2)
        if len(digits) > 24:  # longer than any timedelta; int() refuses over 4300 digits
            raise InvalidInput(f"duration {source[:40]!r}… is too long")
        number = int(digits)
        rank = _RANK[unit]
        if rank <= last_rank:
            raise InvalidInput(
                f"duration {source!r}: units must go from largest to smallest, each at most once (d h m s ms us)"
            )
        last_rank = rank
        try:
            total += number * _SIZE[unit]
        except OverflowError:
            raise InvalidInput(f"duration {source!r} is too long") from None
        position = match.end()
    return total


def format_duration(value: timedelta) -> str:
    """The canonical spelling: ``timedelta(minutes=90)`` → ``"1h30m"``; zero is ``"0s"``."""
    if value < timedelta(0):
        return "-" + format_duration(-value)
    if not value:
        return "0s"
    remaining = value
    parts: list[str] = []
    for unit, size in _UNITS:
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
