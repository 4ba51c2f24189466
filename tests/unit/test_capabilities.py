"""What a schedule needs of a worker, and what a set of live workers offers
(clockd.core.capabilities; the rolling-upgrade drill shows it end to end)."""

from __future__ import annotations

from clockd.core.capabilities import NOTIFY, STDIN, WORKER_CAPABILITIES, advertised, offered, required
from clockd.core.model import CommandTarget, HttpTarget, ScheduleDef, ScheduleKind
from clockd.core.notify import Notification, NotifyEvent


def definition(target: CommandTarget | HttpTarget, *notify: Notification) -> ScheduleDef:
    return ScheduleDef(name="s", kind=ScheduleKind.EVERY, expr="1s", tz="UTC", target=target, notify=notify)


def test_required_names_each_feature_an_older_worker_would_ignore() -> None:
    assert required(definition(CommandTarget(("true",)))) == frozenset()
    assert required(definition(CommandTarget(("cat",), stdin=""))) == {STDIN}  # empty input is input
    assert required(definition(HttpTarget("POST", "http://127.0.0.1:1/"))) == frozenset()
    mail = Notification(NotifyEvent.FAILURE, mail="ops@example.com")
    both = definition(CommandTarget(("cat",), stdin="x"), mail)
    assert required(both) == {STDIN, NOTIFY} and required(both) <= WORKER_CAPABILITIES


def test_offered_is_what_every_live_worker_honours() -> None:
    assert advertised(("worker",)) == tuple(sorted(WORKER_CAPABILITIES)) and advertised(("leader",)) == ()
    assert offered([]) is None  # no worker: nothing to hold back for
    assert offered([advertised(("worker",))]) == WORKER_CAPABILITIES
    assert offered([advertised(("worker",)), ()]) == frozenset()  # one old worker
    assert offered([("stdin", "notify"), ("stdin",)]) == frozenset({STDIN})
