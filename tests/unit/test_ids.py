"""Occurrence ids are a contract: jobs use them as idempotency keys, and every node and
every release must compute the same id for the same planned instant."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clockd.core.ids import (
    OCCURRENCE_NAMESPACE,
    legacy_occurrence_id,
    manual_occurrence_id,
    new_schedule_id,
    new_schedule_ids,
    occurrence_id,
)
from clockd.store.engine import new_tokens


def test_an_occurrence_id_is_pinned() -> None:
    # A change here would give an instant planned again (a replay, a stale owner) a second
    # id, so the key would no longer skip it, and jobs' idempotency keys would change.
    instant = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert occurrence_id("s-1", 3, instant) == "019d371a-da80-871c-b825-6a96fab85c8b"
    # Releases before schema 0016: the uuid5 of the same key, which stored rows keep.
    expected = str(uuid.uuid5(OCCURRENCE_NAMESPACE, "s-1|3|2026-03-29T01:00:00.000000+00:00"))
    assert legacy_occurrence_id("s-1", 3, instant) == expected


@given(
    schedule_id=st.text(min_size=1, max_size=60),
    version=st.integers(min_value=1, max_value=10**6),
    instant=st.datetimes(timezones=st.just(UTC)).filter(lambda t: 1970 < t.year < 9999),
    offset_minutes=st.integers(min_value=-14 * 60, max_value=14 * 60),
)
def test_the_id_leads_with_the_utc_instants_milliseconds_whatever_zone_it_is_given_in(
    schedule_id: str, version: int, instant: datetime, offset_minutes: int
) -> None:
    key = f"{schedule_id}|{version}|{instant.isoformat(timespec='microseconds')}"
    ident = occurrence_id(schedule_id, version, instant)
    parsed = uuid.UUID(ident)
    assert (str(parsed), parsed.version, parsed.variant) == (ident, 8, uuid.RFC_4122)
    unix_ms = (instant - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    assert parsed.int >> 80 == unix_ms
    # The other 74 bits are the uuid5's: the ids of one millisecond differ as uuid5s do.
    hashed = (1 << 12) - 1 << 64 | (1 << 62) - 1
    assert parsed.int & hashed == uuid.uuid5(OCCURRENCE_NAMESPACE, key).int & hashed
    shifted = instant.astimezone(timezone(timedelta(minutes=offset_minutes)))
    assert occurrence_id(schedule_id, version, shifted) == ident


@given(
    instants=st.lists(st.datetimes(timezones=st.just(UTC)).filter(lambda t: 1970 < t.year < 9999), min_size=2),
)
def test_a_later_instants_id_sorts_after_an_earlier_ones(instants: list[datetime]) -> None:
    """What the time-ordered key is for (issue 18): inserts land at the right edge of the
    primary key. Compared as text, bytewise, as the id column (COLLATE "C") compares."""
    by_id = sorted(instants, key=lambda t: occurrence_id("s", 1, t).encode())
    assert [_floor_ms(t) for t in by_id] == sorted(_floor_ms(t) for t in instants)


def _floor_ms(t: datetime) -> datetime:
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def test_a_manual_runs_id_is_time_ordered_and_never_a_planned_one() -> None:
    at = datetime(2026, 12, 5, 9, 30, 0, 250_000, tzinfo=UTC)
    manual = manual_occurrence_id("s-1", at, "n1")
    assert manual[:13] == occurrence_id("s-1", 1, at)[:13]  # the same millisecond
    assert manual != occurrence_id("s-1", 1, at)
    assert manual != manual_occurrence_id("s-1", at, "n2")
    assert uuid.UUID(manual).version == 8


@pytest.mark.parametrize("draw", ["one by one", "at once"])
def test_a_new_schedule_id_is_a_canonical_random_uuid(draw: str) -> None:
    # "at once" is how an apply's planner draws its creates' ids (new_schedule_ids).
    ids = {new_schedule_id() for _ in range(2000)} if draw == "one by one" else set(new_schedule_ids(2000))
    assert len(ids) == 2000
    for text in ids:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, text)
    # Every variant digit (8, 9, a, b) turns up: the two random bits are kept.
    assert {text[19] for text in ids} == set("89ab")


def test_lease_tokens_are_unique_and_a_later_claims_sort_after_an_earlier_ones() -> None:
    """Lease tokens lead with the clock's milliseconds, so each claim's tokens land at the
    right edge of the lease-token index (issue 18); the 80 random bits keep them unique."""
    first = new_tokens(500)
    deadline = time.monotonic() + 5
    later = new_tokens(1)
    while later[0][:12] == first[0][:12] and time.monotonic() < deadline:  # the next millisecond
        later = new_tokens(1)
    assert len(set(first)) == 500
    assert all(len(t) == 32 and int(t, 16) >= 0 for t in first)
    assert later[0] > max(first)
