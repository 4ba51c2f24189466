"""Deterministic identifiers: every node computes the same id for the same occurrence."""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import UTC, datetime
from functools import lru_cache

# A fixed namespace so occurrence ids are the same on every node and every release.
OCCURRENCE_NAMESPACE = uuid.UUID("8b6c3c1e-4d0a-5d6e-9f1a-0c10c4d00001")


def occurrence_id(schedule_id: str, version: int, scheduled_for: datetime) -> str:
    """uuid5 of (schedule id, version, scheduled instant in UTC, microsecond precision).

    Unique per planned instant; a retry or a redelivery keeps it, so jobs can use
    it (``CLOCKD_OCCURRENCE_ID``) as an idempotency key.
    """
    if scheduled_for.tzinfo is None:
        raise ValueError("occurrence_id needs an aware datetime")
    stamp = scheduled_for if scheduled_for.tzinfo is UTC else scheduled_for.astimezone(UTC)
    return _uuid5(f"{schedule_id}|{version}|{_utc_text(stamp)}")


@lru_cache(maxsize=8192)
def _utc_text(instant: datetime) -> str:
    """``instant`` (UTC) to the microsecond, as the id's key spells it. Cached: formatting
    was half of an id's cost (~2 µs on this VM), and the schedules a materializer pass
    plans share their instants (a minute's cron fires, a burst at the top of the hour);
    a hit costs a dict lookup. Keys are UTC only, so equal keys format alike."""
    return instant.isoformat(timespec="microseconds")


_NAMESPACE_BYTES = OCCURRENCE_NAMESPACE.bytes


def _uuid5(name: str) -> str:
    """``str(uuid.uuid5(OCCURRENCE_NAMESPACE, name))`` without the UUID object: the
    materializer computes one per occurrence, and building and formatting the object was
    a fifth of its CPU. Same bits: SHA-1 of namespace + name, version 5, RFC 4122 variant
    (tests/unit/test_ids.py compares the two)."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def manual_occurrence_id(schedule_id: str, requested_at: datetime, nonce: str) -> str:
    """Id of a ``run-now`` occurrence: its own id, never one of the planned instants."""
    key = f"manual|{schedule_id}|{requested_at.isoformat(timespec='microseconds')}|{nonce}"
    return str(uuid.uuid5(OCCURRENCE_NAMESPACE, key))


def new_schedule_id() -> str:
    """A random (version 4) UUID in its canonical text, as ``str(uuid.uuid4())`` gives
    it, written from the hex digits directly: half the cost, without the UUID object."""
    h = os.urandom(16).hex()
    variant = "89ab"[int(h[16], 16) & 3]  # RFC 9562 variant bits 10xx
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{variant}{h[17:20]}-{h[20:]}"


def shard_of(schedule_id: str, shard_count: int) -> int:
    """Logical shard of a schedule: a stable hash (not Python's salted ``hash``) mod N."""
    digest = hashlib.blake2b(schedule_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shard_count


def stable_fraction(key: str) -> float:
    """A number in [0, 1) that every node computes the same for ``key``."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
