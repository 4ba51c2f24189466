"""IANA time zones, from the pinned ``tzdata`` package only.

Invariants:
* every zone clockd evaluates comes from :func:`get_zone`, which reads the
  pinned ``tzdata`` package: importing ``clockd`` (done below, explicitly)
  empties ``zoneinfo``'s search path before any zone is built, so the host's
  ``/usr/share/zoneinfo`` is never consulted (DESIGN.md §2);
* one ``ZoneInfo`` object per name (``zoneinfo``'s own cache, plus ours), so
  datetimes in the same zone share their ``tzinfo``;
* an unknown name raises :class:`~clockd.errors.UnknownZone` naming the
  closest valid names; nothing else escapes.
"""

from __future__ import annotations

import difflib
import importlib.resources
import zoneinfo
from functools import cache, lru_cache
from zoneinfo import ZoneInfo

import clockd  # noqa: F401  (runs zoneinfo.reset_tzpath(to=[]) before any zone is built)
from clockd.core.limits import MAX_ZONE_NAME
from clockd.errors import UnknownZone

__all__ = ["available_zones", "get_zone", "tzdata_version"]


@lru_cache(maxsize=1024)
def get_zone(name: str) -> ZoneInfo:
    """The zone called ``name`` (exact IANA spelling), or :class:`UnknownZone`.

    The message names the closest valid names, e.g.
    ``unknown time zone 'Europe/Pari'; did you mean Europe/Paris?``.
    """
    if name and name in available_zones():
        try:
            return ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # pragma: no cover
            pass  # listed but unreadable: report it as unknown below
    raise UnknownZone(_unknown_message(name))


@cache
def available_zones() -> frozenset[str]:
    """Every zone name the pinned ``tzdata`` package provides."""
    return frozenset(zoneinfo.available_timezones())


@cache
def tzdata_version() -> str:
    """The IANA release of the pinned zone data, e.g. ``"2026a"``."""
    try:
        text = importlib.resources.files("tzdata.zoneinfo").joinpath("tzdata.zi").read_text()
        first = text.split("\n", 1)[0].strip()
        if first.startswith("# version "):
            return first.removeprefix("# version ").strip()
    except (ModuleNotFoundError, FileNotFoundError, OSError):  # pragma: no cover
        pass
    try:  # pragma: no cover - fallback when tzdata.zi is not shipped
        import tzdata

        return str(tzdata.IANA_VERSION)
    except (ImportError, AttributeError):  # pragma: no cover
        return "unknown"


def suggest_zones(name: str, limit: int = 3) -> list[str]:
    """Valid names close to ``name``: a case-insensitive match first, then difflib's best."""
    folded = name.casefold()
    exact = _by_fold().get(folded)
    if exact:
        return list(exact[:limit])
    # Every rejected zone name pays this walk (the API's and the schedule file's validator
    # too), so a name that cannot reach the cut-off by difflib's cheap upper bounds is
    # skipped before its ratio is computed, as difflib.get_close_matches does (the bounds
    # are symmetric, so they are taken with ``name`` as the side difflib indexes once; the
    # ratio keeps the order it always had): the same suggestions, several times faster.
    bound = difflib.SequenceMatcher(None, "", folded)
    whole = "/" not in folded

    def close(key: str) -> float:
        bound.set_seq1(key)
        if bound.real_quick_ratio() < _CLOSE or bound.quick_ratio() < _CLOSE:
            return 0.0
        return difflib.SequenceMatcher(None, folded, key).ratio()

    scored: list[tuple[float, str]] = []
    for key, city, real in _folded_zones():
        ratio = close(key)
        # "Paris" should find "Europe/Paris": also compare with the last component.
        if whole and city != key:
            ratio = max(ratio, close(city))
        if ratio >= _CLOSE:
            scored.append((ratio, real))
    if not scored:
        return []
    scored.sort(key=lambda item: (-item[0], item[1]))
    best = scored[0][0]
    return [real for ratio, real in scored if ratio >= best - 0.05][:limit]


_CLOSE = 0.75  # the least difflib ratio of a suggestion


@cache
def _by_fold() -> dict[str, tuple[str, ...]]:
    """Zone names by their case-folded spelling, each list sorted."""
    grouped: dict[str, list[str]] = {}
    for zone in sorted(available_zones()):
        grouped.setdefault(zone.casefold(), []).append(zone)
    return {key: tuple(names) for key, names in grouped.items()}


@cache
def _folded_zones() -> tuple[tuple[str, str, str], ...]:
    """(folded name, its last component, the name) per folded spelling, in name order (the
    last of names alike in case wins, as before)."""
    return tuple((key, key.rsplit("/", 1)[-1], names[-1]) for key, names in _by_fold().items())


def _unknown_message(name: str) -> str:
    if len(name) > MAX_ZONE_NAME:
        # difflib is quadratic in the input: a 16 KB "zone" took 10 s to refuse.
        return f"time zone name longer than {MAX_ZONE_NAME} characters; use an IANA name such as Europe/Paris, or UTC"
    message = f"unknown time zone {name!r}"
    close = suggest_zones(name) if name else []
    if len(close) == 1:
        return f"{message}; did you mean {close[0]}?"
    if close:
        return f"{message}; did you mean {', '.join(close[:-1])} or {close[-1]}?"
    if not name:
        return "time zone is empty (use an IANA name such as Europe/Paris, or UTC)"
    return f"{message} (use an IANA name such as Europe/Paris, or UTC)"
