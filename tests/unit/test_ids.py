"""Occurrence ids are a contract: jobs use them as idempotency keys, and every node and
every release must compute the same id for the same planned instant."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from clockd.core.ids import OCCURRENCE_NAMESPACE, new_schedule_id, occurrence_id
from clockd.store.engine import new_tokens


def test_an_occurrence_id_is_pinned() -> None:
    # Computed by the first release (uuid.uuid5 over "schedule|version|instant"): a change
    # here would give every stored occurrence a second id and break jobs' idempotency.
    instant = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    expected = str(uuid.uuid5(OCCURRENCE_NAMESPACE, "s-1|3|2026-03-29T01:00:00.000000+00:00"))
    assert occurrence_id("s-1", 3, instant) == expected


@given(
    schedule_id=st.text(min_size=1, max_size=60),
    version=st.integers(min_value=1, max_value=10**6),
    instant=st.datetimes(timezones=st.just(UTC)).filter(lambda t: 1 < t.year < 9999),
    offset_minutes=st.integers(min_value=-14 * 60, max_value=14 * 60),
)
def test_the_id_is_uuid5_of_the_utc_instant_whatever_zone_it_is_given_in(
    schedule_id: str, version: int, instant: datetime, offset_minutes: int
) -> None:
    key = f"{schedule_id}|{version}|{instant.isoformat(timespec='microseconds')}"
    expected = str(uuid.uuid5(OCCURRENCE_NAMESPACE, key))
    assert occurrence_id(schedule_id, version, instant) == expected
    shifted = instant.astimezone(timezone(timedelta(minutes=offset_minutes)))
    assert occurrence_id(schedule_id, version, shifted) == expected


def test_a_new_schedule_id_is_a_canonical_random_uuid() -> None:
    ids = {new_schedule_id() for _ in range(2000)}
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
