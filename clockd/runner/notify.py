"""Notifications on outcome: sends what a schedule's ``on_failure`` / ``on_dead`` /
``on_missed`` / ``on_success`` ask for (``clockd.core.notify``).

Who sends, and when — always *after* the outcome is recorded in the store, by the
process that recorded it:

* the **worker**, once the store has accepted an attempt's completion: ``failure``
  (the attempt failed, timed out or could not start, retried or not), ``dead``,
  ``success``;
* the **leader**: for attempts its reaper recorded ``lost`` (``failure``, and ``dead``
  when that was the last attempt), and for occurrences its misfire sweep made MISSED;
* the **materializer**: for instants it planned as MISSED (misfire ``skip`` after a
  downtime).

Delivery guarantee: **at least once while the sending process lives, at most once
otherwise** — there is no notification table. Each notification is tried up to
``tries`` times (backoff 1 s, 4 s, 16 s, …); a try fails when the command exits
non-zero (or cannot start), the HTTP answer is not 2xx, or ``sendmail`` fails. One
that is still failing after its last try, or that was in flight when the process
stopped (shutdown waits up to ``drain`` seconds for them), is logged
(``notify_failed`` / ``notify_abandoned``) and not sent again. A notification may be
sent twice when a materializer's batch is written again after a failover or the
process restarts mid-delivery: every notification carries a stable
**idempotency key**, ``<occurrence id>:<event>`` (``…:failure:<attempt>`` for
``failure``), so a receiver can drop the second one. Within one process a key is sent
once (the last 10 000 keys are remembered), so two modes of one ``clockd run`` that
both see a MISSED do not send it twice.

How each kind is sent, through the worker's own runner (so the same user checks,
``allowed_users`` and process containment apply):

* **command**: run like the schedule's job — its user, group, working directory and
  env — with ``CLOCKD_OCCURRENCE_ID``, ``CLOCKD_SCHEDULE``, ``CLOCKD_SCHEDULED_FOR``,
  ``CLOCKD_ATTEMPT`` and ``CLOCKD_NOTIFY_EVENT`` (failure, dead, missed, success),
  ``CLOCKD_STATE`` (the occurrence's state: RETRY_WAIT, DEAD, MISSED, SUCCEEDED),
  ``CLOCKD_OUTCOME`` (the attempt's outcome, if there was one), ``CLOCKD_EXIT_CODE``
  (empty if none), ``CLOCKD_ERROR``, ``CLOCKD_OUTPUT`` (the last
  :data:`OUTPUT_TAIL` bytes of the output) and ``CLOCKD_IDEMPOTENCY_KEY``;
* **http**: ``POST`` of a JSON document (:func:`document`) with
  ``Content-Type: application/json`` and ``Idempotency-Key: <key>``;
* **mail**: ``sendmail -i ADDRESS…`` (:func:`find_sendmail`) fed a plain-text message
  (To, Subject ``clockd <schedule>: <state>``, the output tail as the body), run as
  the schedule's user. As cron mails only output, a ``success`` without output sends
  no mail.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

from clockd.core.model import (
    AttemptOutcome,
    CommandTarget,
    HttpTarget,
    OccurrenceState,
    Schedule,
    redact_url,
)
from clockd.core.notify import Notification, NotifyEvent
from clockd.errors import ClockdError
from clockd.runner import Runner, RunRequest

log = logging.getLogger(__name__)

OUTPUT_TAIL: Final = 8 * 1024  # bytes of the job's output a notification carries
SENDMAIL_PATHS: Final = ("/usr/sbin/sendmail", "/usr/lib/sendmail")
_FAILED = frozenset({AttemptOutcome.FAILED, AttemptOutcome.TIMED_OUT, AttemptOutcome.ERROR, AttemptOutcome.LOST})
_TIMEOUT = 60.0  # seconds one try may take


def find_sendmail(path: str | None = None) -> str | None:
    """The ``sendmail`` a mail notification runs: on ``path`` (default ``$PATH``), else
    :data:`SENDMAIL_PATHS`; None when this host has none."""
    found = shutil.which("sendmail", path=path)
    if found is not None:
        return found
    return next((p for p in SENDMAIL_PATHS if os.access(p, os.X_OK)), None)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one occurrence (and its attempt, if one ran), once recorded."""

    schedule_id: str
    version: int
    schedule_name: str
    occurrence_id: str
    scheduled_for: datetime
    state: OccurrenceState  # the occurrence's state after the write
    attempt: int = 0  # 0: no attempt (MISSED)
    outcome: AttemptOutcome | None = None  # the attempt's
    exit_code: int | None = None
    error: str | None = None
    output: str = ""

    def events(self) -> list[NotifyEvent]:
        events = []
        if self.outcome in _FAILED:
            events.append(NotifyEvent.FAILURE)
        if self.state is OccurrenceState.DEAD:
            events.append(NotifyEvent.DEAD)
        elif self.state is OccurrenceState.MISSED:
            events.append(NotifyEvent.MISSED)
        elif self.state is OccurrenceState.SUCCEEDED:
            events.append(NotifyEvent.SUCCESS)
        return events


def idempotency_key(outcome: Outcome, event: NotifyEvent) -> str:
    key = f"{outcome.occurrence_id}:{event.value}"
    return f"{key}:{outcome.attempt}" if event is NotifyEvent.FAILURE else key


def _tail(output: str) -> str:
    data = output.encode()
    if len(data) <= OUTPUT_TAIL:
        return output
    return data[-OUTPUT_TAIL:].decode("utf-8", errors="ignore")


def document(outcome: Outcome, event: NotifyEvent) -> dict[str, Any]:
    """The JSON body of an HTTP notification."""
    return {
        "event": event.value,
        "schedule": outcome.schedule_name,
        "schedule_id": outcome.schedule_id,
        "occurrence_id": outcome.occurrence_id,
        "scheduled_for": _iso(outcome.scheduled_for),
        "state": outcome.state.value,
        "attempt": outcome.attempt or None,
        "outcome": outcome.outcome.value if outcome.outcome else None,
        "exit_code": outcome.exit_code,
        "error": outcome.error,
        "output_tail": _tail(outcome.output),
        "idempotency_key": idempotency_key(outcome, event),
    }


class Notifier:
    """Sends the notifications of recorded outcomes in the background (module docstring).

    ``lookup`` finds a schedule by id (the store's ``get_schedule_by_id``); what a
    schedule version asks for is cached. :meth:`notify` never blocks nor raises;
    :meth:`drain` waits for what is in flight (shutdown)."""

    def __init__(
        self,
        runner: Runner,
        lookup: Callable[[str], Awaitable[Schedule | None]],
        *,
        tries: int = 4,
        backoff: float = 1.0,
        sendmail: Callable[[], str | None] = find_sendmail,
    ) -> None:
        self.runner, self.lookup = runner, lookup
        self.tries, self.backoff = max(1, tries), backoff
        self.sendmail = sendmail
        self._cache: dict[tuple[str, int], Schedule | None] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sent_keys: dict[str, None] = {}  # recent idempotency keys: one notification per key (bounded)
        self._stop = asyncio.Event()
        self.sent = 0  # notifications delivered (tests, metrics)

    def notify(self, outcome: Outcome, schedule: Schedule | None = None) -> None:
        """Send what ``outcome``'s schedule asks for (looked up unless given), once per
        idempotency key in this process (two modes may report the same MISSED)."""
        key = (outcome.schedule_id, outcome.version)
        if schedule is None and key in self._cache:
            schedule = self._cache[key]
            if schedule is None or not schedule.definition.notify:
                return  # the common case, answered without a task
        wanted = {n.event for n in schedule.definition.notify} if schedule is not None else set(NotifyEvent)
        events = [e for e in outcome.events() if e in wanted]
        fresh = [e for e in events if idempotency_key(outcome, e) not in self._sent_keys]
        if not fresh:
            return
        for event in fresh:
            self._sent_keys[idempotency_key(outcome, event)] = None
        while len(self._sent_keys) > 10_000:
            del self._sent_keys[next(iter(self._sent_keys))]
        task = asyncio.get_running_loop().create_task(self._notify(outcome, fresh, schedule))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def missed(
        self, schedule: Schedule, occurrence_id: str, version: int, scheduled_for: datetime, reason: str | None
    ) -> None:
        """An occurrence of ``schedule`` went MISSED (materializer or leader)."""
        outcome = Outcome(
            schedule.id, version, schedule.name, occurrence_id, scheduled_for, OccurrenceState.MISSED, error=reason
        )
        self.notify(outcome, schedule)

    async def drain(self, grace: float) -> None:
        """Wait up to ``grace`` seconds for deliveries in flight, then abandon them."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=grace)
        if pending:
            log.warning(
                "%d notification(s) still being delivered at shutdown: abandoned",
                len(pending),
                extra={"action": "notify_abandoned", "count": len(pending)},
            )
            self._stop.set()
            await asyncio.wait(pending, timeout=5.0)

    async def _schedule(self, outcome: Outcome) -> Schedule | None:
        key = (outcome.schedule_id, outcome.version)
        if key not in self._cache:
            if len(self._cache) >= 10_000:
                self._cache.clear()
            self._cache[key] = await self.lookup(outcome.schedule_id)
        return self._cache[key]

    async def _notify(self, outcome: Outcome, events: list[NotifyEvent], schedule: Schedule | None) -> None:
        try:
            if schedule is None:
                schedule = await self._schedule(outcome)
        except ClockdError as exc:  # the store is down: this notification is lost (module docstring)
            log.warning(
                "cannot look up %s to notify its %s: %s",
                outcome.schedule_name,
                outcome.state.value,
                exc.message,
                extra={"action": "notify_failed", "schedule": outcome.schedule_name},
            )
            return
        try:
            if schedule is None or not schedule.definition.notify:
                return
            wanted = {n.event: n for n in schedule.definition.notify}
            for event in events:
                notification = wanted.get(event)
                if notification is not None:
                    await self._deliver(schedule, outcome, notification)
        except Exception:  # a notification bug must not take a mode down
            log.exception("notification failed", extra={"action": "notify_crashed"})

    async def _deliver(self, schedule: Schedule, outcome: Outcome, n: Notification) -> None:
        request = self._request(schedule, outcome, n)
        if request is None:
            return
        key = idempotency_key(outcome, n.event)
        what = redact_url(n.describe()) if n.url else n.describe()
        error = ""
        for number in range(1, self.tries + 1):  # the tries of one notification
            result = await self.runner.run(request, self._stop)
            if result.outcome is AttemptOutcome.SUCCEEDED:
                self.sent += 1
                log.info(
                    "notified %s of %s %s: %s",
                    n.event.field,
                    outcome.schedule_name,
                    outcome.state.value,
                    what,
                    extra={"action": "notified", "schedule": outcome.schedule_name, "key": key},
                )
                return
            error = result.error or result.outcome.value
            if number < self.tries and not self._stop.is_set():
                try:
                    await asyncio.wait_for(self._stop.wait(), self.backoff * 4 ** (number - 1))
                except TimeoutError:
                    continue
            break
        log.warning(
            "%s notification of %s %s failed (%s): %s",
            n.event.field,
            outcome.schedule_name,
            outcome.state.value,
            what,
            error,
            extra={"action": "notify_failed", "schedule": outcome.schedule_name, "key": key},
        )

    def _request(self, schedule: Schedule, outcome: Outcome, n: Notification) -> RunRequest | None:
        key = idempotency_key(outcome, n.event)
        base = RunRequest(
            occurrence_id=outcome.occurrence_id,
            schedule_name=outcome.schedule_name,
            scheduled_for=outcome.scheduled_for,
            attempt=1,
            target=CommandTarget(argv=("true",)),
            timeout=_TIMEOUT,
            tenant=schedule.definition.tenant,
        )
        if n.url is not None:
            body = json.dumps(document(outcome, n.event), ensure_ascii=False)
            post = HttpTarget("POST", n.url, headers=(("Content-Type", "application/json"),), body=body)
            return replace(base, occurrence_id=key, target=post)  # the runner's Idempotency-Key
        job = schedule.definition.target
        like = job if isinstance(job, CommandTarget) else CommandTarget(argv=("true",))
        if n.mail is not None:
            if n.event is NotifyEvent.SUCCESS and not outcome.output.strip():
                return None  # cron mails output only
            sendmail = self.sendmail()
            if sendmail is None:
                log.warning(
                    "no sendmail on this host (PATH, /usr/sbin/sendmail): cannot mail %s about %s",
                    n.mail,
                    outcome.schedule_name,
                    extra={"action": "notify_failed", "schedule": outcome.schedule_name, "key": key},
                )
                return None
            addresses = [a.strip() for a in n.mail.split(",") if a.strip()]
            argv: tuple[str, ...] = (sendmail, "-i", *addresses)
            stdin: str | None = _message(outcome, n.event, addresses)
            shell = False
        else:
            argv, shell, stdin = n.argv, n.shell, None
        env = dict(like.env)
        env.update(
            {
                "CLOCKD_NOTIFY_EVENT": n.event.value,
                "CLOCKD_STATE": outcome.state.value,
                "CLOCKD_OUTCOME": outcome.outcome.value if outcome.outcome else "",
                "CLOCKD_EXIT_CODE": "" if outcome.exit_code is None else str(outcome.exit_code),
                "CLOCKD_ERROR": outcome.error or "",
                "CLOCKD_OUTPUT": _tail(outcome.output).replace("\0", ""),
                "CLOCKD_IDEMPOTENCY_KEY": key,
            }
        )
        command = replace(like, argv=argv, shell=shell, env=tuple(env.items()), stdin=stdin)
        return replace(base, attempt=max(1, outcome.attempt), target=command)


def _message(outcome: Outcome, event: NotifyEvent, addresses: list[str]) -> str:
    host = socket.gethostname()
    status = outcome.state.value
    if outcome.exit_code is not None:
        status += f", exit code {outcome.exit_code}"
    lines = [
        f"To: {', '.join(addresses)}",
        f"Subject: clockd {outcome.schedule_name}: {status} ({host})",
        "Content-Type: text/plain; charset=utf-8",
        f"X-Clockd-Occurrence-Id: {outcome.occurrence_id}",
        f"X-Clockd-Idempotency-Key: {idempotency_key(outcome, event)}",
        "",
        f"schedule {outcome.schedule_name}, run for {_iso(outcome.scheduled_for)}: {status}",
    ]
    if outcome.error:
        lines.append(outcome.error)
    if outcome.output:
        lines += ["", _tail(outcome.output)]
    return "\n".join(lines) + "\n"


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")
