"""``apply_plan`` hands the store its creates encoded (``NewSchedule.texts``), made as the
store reads them or ahead of it while it waits for the database: whichever way and in
whichever order they are read, each is the create of its plan item with the texts the
store would have made."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from clockd.core.ids import new_schedule_id
from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.services.ops import PlanAction, PlanItem, _EncodedCreates, _read_to
from clockd.store import NewSchedule
from clockd.store.codec import definition_texts

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _items(n: int) -> list[PlanItem]:
    items = []
    for i in range(n):
        expr = f"{i % 60} * * * *"
        d = ScheduleDef(name=f"job-{i}", kind=ScheduleKind.CRON, expr=expr, tz="UTC", target=NoopTarget())
        items.append(PlanItem(PlanAction.CREATE, d.name, i, d, None, T0, new_schedule_id(), i % 4))
    return items


def _expected(item: PlanItem) -> NewSchedule:
    assert item.desired is not None
    texts = definition_texts(item.desired)
    return NewSchedule(item.schedule_id, item.desired, item.shard, item.next_run_at, texts)


def test_read_in_any_order_each_is_its_items_create_with_its_texts() -> None:
    items = _items(7)
    creates = _EncodedCreates(items)
    assert len(creates) == 7
    assert creates[3] == _expected(items[3])
    assert list(creates[1:5]) == [_expected(i) for i in items[1:5]]
    assert creates[-1] == _expected(items[6])
    assert list(creates[:]) == [_expected(i) for i in items]


def test_encoded_ahead_the_store_reads_the_same() -> None:
    items = _items(400)
    creates = _EncodedCreates(items)

    async def ahead() -> None:
        await creates.encode_ahead()

    asyncio.run(ahead())
    assert list(creates[0:400]) == [_expected(i) for i in items]


def test_what_reading_an_index_needs_made() -> None:
    assert [_read_to(i, 10) for i in (0, 3, -1, -10)] == [1, 4, 10, 1]
    assert [_read_to(s, 10) for s in (slice(0, 3), slice(2, None), slice(None, -2), slice(0, 99))] == [3, 10, 8, 10]


def test_apply_s_copy_into_the_tenant_is_dataclasses_replace() -> None:
    """Ops.apply marks every create with its tenant and label by a copy written out for
    speed; it must be replace's copy, field for field, whatever fields ScheduleDef has."""
    import dataclasses
    from datetime import timedelta

    from clockd.core.model import (
        CommandTarget,
        MisfirePolicy,
        OverlapPolicy,
        RetryPolicy,
        ScheduleDef,
        ScheduleKind,
    )
    from clockd.core.notify import Notification, NotifyEvent
    from clockd.services.ops import _in_tenant

    assert not hasattr(ScheduleDef, "__post_init__")  # the copy skips __init__: nothing to skip
    raw = ScheduleDef(
        name="n", kind=ScheduleKind.EVERY, expr="5m", tz="Asia/Tokyo", target=CommandTarget(("/bin/true",)),
        queue="q", tenant="t0", timeout=timedelta(seconds=3), retry=RetryPolicy(retries=4),
        misfire=MisfirePolicy.SKIP, max_lateness=timedelta(minutes=1), overlap=OverlapPolicy.SKIP,
        window=timedelta(seconds=9), labels=(("a", "b"),), catch_up_limit=3,
        notify=(Notification(NotifyEvent.FAILURE, url="https://example.com/h"),),
    )  # fmt: skip
    defaults = ScheduleDef(name="x", kind=ScheduleKind.CRON, expr="* * * * *", tz="UTC", target=CommandTarget(("x",)))
    for f in dataclasses.fields(ScheduleDef):  # every field differs from its default here
        assert getattr(raw, f.name) != getattr(defaults, f.name), f.name
    labels = (("clockd.managed-by", "apply"), ("a", "b"))
    copied = _in_tenant(raw, "team", labels)
    assert copied == dataclasses.replace(raw, tenant="team", labels=labels)
    assert hash(copied) == hash(dataclasses.replace(raw, tenant="team", labels=labels))
