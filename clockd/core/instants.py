"""Instants as people write them, always returned as aware UTC datetimes.

Accepted forms:

* ISO 8601 with ``Z`` or an offset: ``2026-03-28T09:00:00Z``,
  ``2026-03-28T10:00+01:00`` (a space instead of ``T`` is fine);
* a local ISO time without offset (``2026-03-28T09:00``, or a date meaning
  midnight), read as wall time in the zone ``tz`` — which is then required. A
  wall time that does not exist there (a DST gap) is refused; one that occurs
  twice (fall back) means the first;
* ``now``, ``now+90m``, ``now-2s`` (any duration :func:`parse_duration`
  reads), relative to the ``now`` parameter — nothing here reads the clock.

Invariants: the result is aware and in UTC; every refusal is an
:class:`~clockd.errors.InvalidInput` whose message quotes the input.
"""

from __future__ import annotations

from datetime import UTC, datetime

from clockd.core.durations import parse_duration
from clockd.core.zones import get_zone
from clockd.errors import InvalidInput

__all__ = ["format_instant", "parse_instant"]

_EXAMPLE = "e.g. 2026-03-28T09:00:00Z, 2026-03-28T10:00+01:00 or now+90m"


def parse_instant(text: str, tz: str | None = None, now: datetime | None = None) -> datetime:
    """Read ``text`` as an instant (aware UTC). See the module docstring for the forms."""
    cleaned = text.strip()
    if not cleaned:
        raise InvalidInput(f"empty instant ({_EXAMPLE})")
    if cleaned.lower().startswith("now"):
        return _relative(text, cleaned[3:].strip(), now)
    try:
        parsed = datetime.fromisoformat(cleaned)
    except ValueError:
        raise InvalidInput(f"not an ISO 8601 instant: {text!r} ({_EXAMPLE})") from None
    if parsed.tzinfo is not None:
        try:
            return parsed.astimezone(UTC)
        except OverflowError:
            raise InvalidInput(f"instant {text!r} is out of range") from None
    if tz is None:
        raise InvalidInput(
            f"instant {text!r} has no UTC offset: add Z or an offset such as +01:00, or give a time zone"
        )
    return _from_wall(text, parsed, tz)


def format_instant(instant: datetime) -> str:
    """Canonical UTC ISO 8601 ending in ``Z``, e.g. ``2026-03-28T01:30:00Z``."""
    if instant.tzinfo is None:
        raise ValueError("format_instant needs an aware datetime")
    utc = instant.astimezone(UTC)
    return utc.replace(tzinfo=None).isoformat(timespec="auto") + "Z"


def _relative(text: str, rest: str, now: datetime | None) -> datetime:
    if now is None:
        raise InvalidInput(f"relative instant {text!r} needs the current time")
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    base = now.astimezone(UTC)
    if not rest:
        return base
    sign, amount = rest[0], rest[1:].strip()
    if sign not in "+-" or not amount:
        raise InvalidInput(f"not an instant: {text!r} (relative forms: now, now+90m, now-2s)")
    delta = parse_duration(amount)
    try:
        return base + delta if sign == "+" else base - delta
    except OverflowError:
        raise InvalidInput(f"instant {text!r} is out of range") from None


def _from_wall(text: str, wall: datetime, tz: str) -> datetime:
    zone = get_zone(tz)
    found = []
    for fold in (0, 1):
        local = wall.replace(tzinfo=zone, fold=fold)
        try:
            utc = local.astimezone(UTC)
        except OverflowError:
            raise InvalidInput(f"instant {text!r} is out of range") from None
        if utc.astimezone(zone).replace(tzinfo=None) == wall:
            found.append(utc)
    if not found:
        raise InvalidInput(
            f"{wall.isoformat(timespec='auto')} does not exist in {tz} "
            "(the clocks skip it at a DST change); give an offset or another time"
        )
    return min(found)


def iso_utc(dt: datetime | None) -> str | None:
    """UTC ISO 8601 ending in Z, microseconds only when there are any (trailing zeros cut):
    the form every JSON document of clockctl and the API uses."""
    if dt is None:
        return None
    return (
        dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        + (f".{dt.microsecond:06d}".rstrip("0") if dt.microsecond else "")
        + "Z"
    )
