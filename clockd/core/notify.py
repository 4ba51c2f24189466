"""Notifications on outcome: what a schedule asks to be told, as frozen values.

A schedule may carry one notification per event (``on_failure``, ``on_dead``,
``on_missed``, ``on_success`` in a schedule file). Each is exactly one of:

* a **command** (``argv``; one string runs with ``/bin/sh -c``), run like a job of
  the schedule (its user, its env), with the occurrence's id, state, exit code and
  output tail in its environment (``clockd.runner.notify``);
* an **HTTP POST** of a JSON document to ``url``, with an ``Idempotency-Key``;
* a **mail** to ``mail`` (one or more addresses, comma separated) through the local
  ``sendmail``: what an imported crontab's ``MAILTO`` becomes.

Events: ``failure`` — an attempt ended without success (failed, timed out, could
not start, lost), retried or not; ``dead`` — the occurrence went DEAD; ``missed`` —
it went MISSED; ``success`` — it SUCCEEDED. Pure values: who sends them, and how
reliably, is ``clockd.runner.notify``'s business.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class NotifyEvent(StrEnum):
    FAILURE = "failure"
    DEAD = "dead"
    MISSED = "missed"
    SUCCESS = "success"

    @property
    def field(self) -> str:
        """The schedule-file field (``on_failure``)."""
        return f"on_{self.value}"


@dataclass(frozen=True, slots=True)
class Notification:
    """One notification: exactly one of ``argv``, ``url``, ``mail`` is set."""

    event: NotifyEvent
    argv: tuple[str, ...] = ()
    shell: bool = False
    url: str | None = None
    mail: str | None = None

    @property
    def kind(self) -> str:
        return "http" if self.url is not None else "mail" if self.mail is not None else "command"

    def describe(self) -> str:
        if self.url is not None:
            return f"POST {self.url}"
        if self.mail is not None:
            return f"mail {self.mail}"
        return f"sh -c {self.argv[0]!r}" if self.shell else " ".join(self.argv)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"event": self.event.value}
        if self.url is not None:
            data["url"] = self.url
        elif self.mail is not None:
            data["mail"] = self.mail
        else:
            data["argv"] = list(self.argv)
            data["shell"] = self.shell
        return data


def notification_from_json(data: dict[str, Any]) -> Notification:
    return Notification(
        event=NotifyEvent(data["event"]),
        argv=tuple(str(a) for a in data.get("argv") or ()),
        shell=bool(data.get("shell", False)),
        url=None if data.get("url") is None else str(data["url"]),
        mail=None if data.get("mail") is None else str(data["mail"]),
    )


def notifications_to_json(notify: tuple[Notification, ...]) -> list[dict[str, Any]]:
    return [n.to_json() for n in notify]


def notifications_from_json(data: list[dict[str, Any]] | None) -> tuple[Notification, ...]:
    return tuple(sorted((notification_from_json(d) for d in data or ()), key=_order))


def sorted_notifications(notify: tuple[Notification, ...] | list[Notification]) -> tuple[Notification, ...]:
    """Canonical order (the events' order), so equal definitions compare equal."""
    return tuple(sorted(notify, key=_order))


def for_event(notify: tuple[Notification, ...], event: NotifyEvent) -> Notification | None:
    return next((n for n in notify if n.event is event), None)


_EVENTS = tuple(NotifyEvent)


def _order(n: Notification) -> int:
    return _EVENTS.index(n.event)


def valid_addresses(text: str) -> bool:
    """Comma-separated mail addresses, none empty, none an option to sendmail (``-…``),
    no control characters (a header could be injected)."""
    parts = [p.strip() for p in text.split(",")]
    return all(p and not p.startswith("-") and not any(ord(c) < 32 for c in p) for p in parts)


def parse_notification(event: NotifyEvent, text: str) -> Notification:
    """``clockctl add --on-failure TEXT``: an ``http://``/``https://`` URL is a POST,
    ``mail:ADDRESSES`` a mail, anything else a command run with ``/bin/sh -c``.
    Raises ``ValueError`` (a one-line message) on an empty value."""
    value = text.strip()
    if not value:
        raise ValueError(f"--on-{event.value}: give a command, an http(s):// URL or mail:ADDRESS")
    if value.lower().startswith(("http://", "https://")):
        return Notification(event, url=value)
    if value.lower().startswith("mail:"):
        address = value[5:].strip()
        if not valid_addresses(address):
            raise ValueError(f"--on-{event.value}: mail: expected addresses, e.g. mail:ops@example.com")
        return Notification(event, mail=address)
    return Notification(event, argv=(text,), shell=True)
