"""Who sends which notification, on a real store (SQLite and PostgreSQL) with a manual
clock: the materializer for instants planned MISSED, the leader for those its misfire
sweep made MISSED, the worker for recorded outcomes — each occurrence exactly once."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

from clockd.core.model import (
    AttemptOutcome,
    CommandTarget,
    MisfirePolicy,
    OccurrenceState,
    RetryPolicy,
    ScheduleDef,
    ScheduleKind,
)
from clockd.core.notify import Notification, NotifyEvent
from clockd.runner import RunRequest, RunResult
from clockd.runner.notify import Notifier
from tests.integration.test_policies import MIN, T0, MakeNode, Node, make_node, minutes

__all__ = ["make_node"]  # the fixture, shared with the policy tests


@dataclass
class Delivered:
    """The notification runner: records what it is asked to send, and delivers it."""

    requests: list[RunRequest] = field(default_factory=list)

    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        self.requests.append(request)
        return RunResult(AttemptOutcome.SUCCEEDED, exit_code=0)

    def events(self, event: str) -> list[str]:
        return sorted(
            r.occurrence_id
            for r in self.requests
            if isinstance(r.target, CommandTarget) and ("CLOCKD_NOTIFY_EVENT", event) in r.target.env
        )


def job(name: str, kind: ScheduleKind, expr: str, *notify: Notification, **kw: Any) -> ScheduleDef:
    return ScheduleDef(
        name=name, kind=kind, expr=expr, tz="UTC", target=CommandTarget(argv=("true",)), notify=notify, **kw
    )


def notified(node: Node, delivered: Delivered) -> Notifier:
    notifier = Notifier(delivered, node.store.get_schedule_by_id)
    node.leader.notifier = notifier
    node.materializer.notifier = notifier
    for worker in node.workers:
        worker.notifier = notifier
    return notifier


async def test_missed_by_the_sweep_and_at_planning_and_succeeded_are_each_notified_once(make_node: MakeNode) -> None:
    node: Node = await make_node()
    delivered = Delivered()
    notifier = notified(node, delivered)
    await node.ops.add(
        job(
            "five",
            ScheduleKind.CRON,
            "*/5 * * * *",
            Notification(NotifyEvent.MISSED, argv=("on-missed",)),
            Notification(NotifyEvent.SUCCESS, argv=("on-success",)),
            misfire=MisfirePolicy.SKIP,
            max_lateness=2 * MIN,
        )
    )
    await node.advance(3 * MIN)  # 23:05 is in the outbox when the node goes down
    node.clock.advance(40 * MIN)
    await node.cycle()  # the sweep judges 23:05, the materializer plans 23:10-23:40 MISSED
    await node.advance(7 * MIN)
    await notifier.drain(5.0)
    occ = await node.occurrences("five")
    assert minutes(occ, OccurrenceState.MISSED) == [5, 10, 15, 20, 25, 30, 35, 40]
    assert delivered.events("missed") == sorted(o.id for o in occ if o.state is OccurrenceState.MISSED)
    assert delivered.events("success") == sorted(o.id for o in occ if o.state is OccurrenceState.SUCCEEDED)
    assert len(delivered.requests) == 10  # nothing twice


async def test_a_failing_attempt_then_dead_notify_failure_per_attempt_and_dead_once(make_node: MakeNode) -> None:
    node: Node = await make_node()
    node.runner.exit_codes = {("flaky", 1): 3, ("flaky", 2): 3}
    delivered = Delivered()
    notifier = notified(node, delivered)
    await node.ops.add(
        job(
            "flaky",
            ScheduleKind.ONCE,
            (T0 + MIN).isoformat().replace("+00:00", "Z"),
            Notification(NotifyEvent.FAILURE, argv=("on-failure",)),
            Notification(NotifyEvent.DEAD, argv=("on-dead",)),
            retry=RetryPolicy(retries=1, backoff=timedelta(seconds=1)),
        )
    )
    await node.advance(5 * MIN, step=timedelta(seconds=5))
    await notifier.drain(5.0)
    [dead] = await node.occurrences("flaky")
    assert dead.state is OccurrenceState.DEAD
    assert delivered.events("failure") == [dead.id, dead.id]  # attempts 1 and 2
    assert [
        r.attempt
        for r in delivered.requests
        if ("CLOCKD_NOTIFY_EVENT", "failure") in cast(CommandTarget, r.target).env  # notifications: commands here
    ] == [1, 2]
    assert delivered.events("dead") == [dead.id]
