"""Where a schedule's stride ends (clockd.core.planning.stride_end): after the reach,
within one stride, one stride after the last, the same on every node, and spread over the
stride across schedules. The materializer that uses it: tests/contract/store/test_strides.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from clockd.core.planning import stride_end

SEC = timedelta(seconds=1)


@given(
    st.text(min_size=1, max_size=40),
    st.integers(min_value=0, max_value=10**12),
    st.integers(min_value=1, max_value=3600),
)
def test_a_stride_ends_after_the_reach_within_one_stride_and_the_next_one_stride_later(
    schedule_id: str, offset_ms: int, stride_s: int
) -> None:
    reach = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(milliseconds=offset_ms)
    stride = timedelta(seconds=stride_s)
    end = stride_end(schedule_id, reach, stride)
    assert reach < end <= reach + stride
    assert stride_end(schedule_id, reach, stride) == end  # the same on every node, every call
    # Any later reach up to that end (the cursor passed it) gives the very next stride.
    assert stride_end(schedule_id, end, stride) == end + stride
    assert stride_end(schedule_id, end - timedelta(microseconds=1), stride) == end


def test_the_strides_of_many_schedules_end_spread_over_the_stride() -> None:
    """Schedules planned together (all of them, at a start) must not come due together
    again: their stride ends fall evenly over the stride, not in a burst."""
    reach = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    stride = timedelta(seconds=10)
    ends = [stride_end(f"schedule-{i}", reach, stride) for i in range(10_000)]
    per_second = [0] * 10
    for end in ends:
        per_second[min(9, int((end - reach) / SEC))] += 1
    assert max(per_second) < 1_200 and min(per_second) > 800, per_second
