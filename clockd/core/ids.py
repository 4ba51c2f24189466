"""Deterministic identifiers: every node computes the same id for the same occurrence."""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Final

# A fixed namespace so occurrence ids are the same on every node and every release.
OCCURRENCE_NAMESPACE = uuid.UUID("8b6c3c1e-4d0a-5d6e-9f1a-0c10c4d00001")


def occurrence_id(schedule_id: str, version: int, scheduled_for: datetime) -> str:
    """The id of a planned occurrence: a time-ordered UUID of (schedule id, version,
    scheduled instant in UTC, microsecond precision) — :func:`_time_ordered`.

    Unique per planned instant; a retry or a redelivery keeps it, so jobs can use
    it (``CLOCKD_OCCURRENCE_ID``) as an idempotency key. Since 2026-12-05 (schema 0016)
    the id leads with the instant's Unix milliseconds; occurrences planned before keep the
    uuid5 they were stored with (:func:`legacy_occurrence_id`).
    """
    if scheduled_for.tzinfo is None:
        raise ValueError("occurrence_id needs an aware datetime")
    stamp = scheduled_for if scheduled_for.tzinfo is UTC else scheduled_for.astimezone(UTC)
    text, unix_ms_hex = _instant_key(stamp)
    return _time_ordered(unix_ms_hex, f"{schedule_id}|{version}|{text}")


def legacy_occurrence_id(schedule_id: str, version: int, scheduled_for: datetime) -> str:
    """The uuid5 of the same triple, which releases before schema 0016 gave a planned
    occurrence (kept for the tests that pin what those rows hold)."""
    if scheduled_for.tzinfo is None:
        raise ValueError("legacy_occurrence_id needs an aware datetime")
    stamp = scheduled_for.astimezone(UTC)
    return str(uuid.uuid5(OCCURRENCE_NAMESPACE, f"{schedule_id}|{version}|{_instant_key(stamp)[0]}"))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_MS_MAX = (1 << 48) - 1


@lru_cache(maxsize=8192)
def _instant_key(instant: datetime) -> tuple[str, str]:
    """What an id takes of ``instant`` (UTC): its text to the microsecond, as the id's
    name spells it, and its Unix milliseconds (floored, exact: integer arithmetic on the
    timedelta) as the 12 hex digits the id leads with, clamped to 48 bits, which reach the
    year 10889 (an instant before 1970 leads with zeros). Cached: formatting was half of an
    id's cost (~2 µs on this VM), and the schedules a materializer pass plans share their
    instants (a minute's cron fires, a burst at the top of the hour); a hit costs a dict
    lookup. Keys are UTC only, so equal keys format alike."""
    ms = min(max((instant - _EPOCH) // _MS, 0), _MS_MAX)
    return instant.isoformat(timespec="microseconds"), f"{ms:012x}"


_NAMESPACE_BYTES = OCCURRENCE_NAMESPACE.bytes
# SHA-1 with the namespace already fed: each id copies it and adds its name (~0.4 µs of
# an id's ~1.5 fewer than hashing namespace + name from scratch, timeit on this VM).
_NAMESPACE_SHA1 = hashlib.sha1(_NAMESPACE_BYTES)


def _time_ordered(unix_ms_hex: str, name: str) -> str:
    """A deterministic, time-ordered UUID (RFC 9562 version 8, the layout of a version 7):
    the instant's Unix milliseconds in the first 48 bits, then the version digit 8, and the
    rest — 74 bits — from SHA-1 of namespace + name, the bits uuid5 would take, so the ids
    of one millisecond differ as uuid5s do.

    Why the time leads (issue 18, "What the order of the occurrence keys costs" in the
    README): each materializer insert lands at the right edge of ``occurrences_pkey`` and
    of the queue's occurrence key instead of a random leaf, and the claim's and finish's
    lookups by id touch the recent leaves the inserts left in memory. The id stays a pure
    function of (schedule, version, instant), which is what keeps an instant from being
    materialized twice (``ON CONFLICT DO NOTHING`` on the key, schema 0011)."""
    digest = _NAMESPACE_SHA1.copy()
    digest.update(name.encode())
    h = digest.hexdigest()
    return f"{unix_ms_hex[:8]}-{unix_ms_hex[8:]}-8{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


def manual_occurrence_id(schedule_id: str, requested_at: datetime, nonce: str) -> str:
    """Id of a ``run-now`` occurrence: its own id, never one of the planned instants (the
    name differs), time-ordered by the instant it was asked for."""
    stamp = requested_at.astimezone(UTC)
    key = f"manual|{schedule_id}|{requested_at.isoformat(timespec='microseconds')}|{nonce}"
    return _time_ordered(_instant_key(stamp)[1], key)


# The variant digit (RFC 9562 variant bits 10xx) for each hex digit: version 4 ids (random)
# and the time-ordered ones (hashed).
_VARIANT: Final = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def new_schedule_id() -> str:
    """A random (version 4) UUID in its canonical text, as ``str(uuid.uuid4())`` gives
    it, written from the hex digits directly: half the cost, without the UUID object."""
    return _version_4(os.urandom(16).hex())


def new_schedule_ids(count: int) -> list[str]:
    """``count`` ids as :func:`new_schedule_id` writes them, from one read of the OS
    generator: an apply's planner draws its creates' ids at once (2.0 µs an id one by
    one, 0.8 so; a create costs the client ~45)."""
    blob = os.urandom(16 * count).hex()
    return [_version_4(blob[i : i + 32]) for i in range(0, 32 * count, 32)]


def _version_4(h: str) -> str:
    """The canonical text of the version 4 UUID made of the 32 random hex digits ``h``."""
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


def shard_of(schedule_id: str, shard_count: int) -> int:
    """Logical shard of a schedule: a stable hash (not Python's salted ``hash``) mod N."""
    digest = hashlib.blake2b(schedule_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shard_count


def stable_fraction(key: str) -> float:
    """A number in [0, 1) that every node computes the same for ``key``."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
