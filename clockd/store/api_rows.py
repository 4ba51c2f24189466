"""Row decoding and parameters for the API's store statements (schema 0007), shared by
both adapters so that each adapter's API section only runs its named blocks.

``instant`` / ``opt_instant`` turn a stored instant into an aware UTC datetime (SQLite:
microseconds; PostgreSQL: timestamptz), as in :mod:`clockd.store.codec`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final

from clockd.core.limits import MAX_NAME
from clockd.store import ApiToken, AuditEntry, OccurrencePage, SchedulePage
from clockd.store.codec import dumps

_TOP: Final = 0x10FFFF
# Above every valid name (at most MAX_NAME characters, clockd.core.limits) in both stores'
# order, which is by code point (SQLite's BINARY over UTF-8, PostgreSQL's COLLATE "C").
ABOVE_EVERY_NAME: Final = chr(_TOP) * (MAX_NAME + 1)


def token_from_row(
    row: Sequence[Any], instant: Callable[[Any], datetime], opt_instant: Callable[[Any], datetime | None]
) -> ApiToken:
    tid, tenant, name, role, digest, created_at, expires_at, revoked_at = row
    return ApiToken(
        tid, tenant, name, role, digest, instant(created_at), opt_instant(expires_at), opt_instant(revoked_at)
    )


def token_params(token: ApiToken, instant: Callable[[datetime], Any]) -> dict[str, Any]:
    return {
        "id": token.id,
        "tenant": token.tenant,
        "name": token.name,
        "role": token.role,
        "hash": token.hash,
        "created_at": instant(token.created_at),
        "expires_at": None if token.expires_at is None else instant(token.expires_at),
    }


def audit_from_row(row: Sequence[Any], instant: Callable[[Any], datetime]) -> AuditEntry:
    aid, at, tenant, actor, action, target, before, after, detail = row
    return AuditEntry(instant(at), tenant, actor, action, target, before, after, json.loads(detail or "{}"), int(aid))


def audit_params(entry: AuditEntry, instant: Callable[[datetime], Any]) -> dict[str, Any]:
    return {
        "at": instant(entry.at),
        "tenant": entry.tenant,
        "actor": entry.actor,
        "action": entry.action,
        "target": entry.target,
        "before_version": entry.before_version,
        "after_version": entry.after_version,
        "detail": dumps(dict(entry.detail)),
    }


def prefix_range(prefix: str) -> tuple[str, str]:
    """``(below, above)``: every string that starts with ``prefix`` is strictly between
    them, and (but for strings that start with ``below`` itself) no string that does not.
    The schedule pages seek to this range, so a prefix with few names stops at once; their
    prefix test keeps the result exact."""
    head, last = prefix[:-1], ord(prefix[-1])
    down = last - 1
    if 0xD800 <= down <= 0xDFFF:  # surrogates are no characters: the one below them
        down = 0xD7FF
    below = head if last == 0 else head + chr(down) + chr(_TOP)
    kept = prefix.rstrip(chr(_TOP))
    if not kept:
        return below, ABOVE_EVERY_NAME
    up = ord(kept[-1]) + 1
    if 0xD800 <= up <= 0xDFFF:
        up = 0xE000
    return below, kept[:-1] + chr(up)


def schedule_page_params(tenant: str, query: SchedulePage) -> dict[str, Any]:
    """The parameters of ``schedules_page`` and its ``_state`` and ``_label`` forms: the
    keyset range ``after < name < upto`` (narrowed to the name prefix) and the filters."""
    key, value = query.label if query.label is not None else (None, None)
    after, upto = query.after, ABOVE_EVERY_NAME
    if query.name_prefix:
        below, upto = prefix_range(query.name_prefix)
        after = max(after, below)
    return {
        "tenant": tenant,
        "after": after,
        "upto": upto,
        "limit": query.limit,
        "state": None if query.state is None else query.state.value,
        "prefix": query.name_prefix or None,
        "label_key": key,
        "label_value": value,
    }


def schedule_page_query(query: SchedulePage) -> str:
    """Which named block answers ``query`` (schema 0009): a label walks its label's rows, a
    state its state's index, else the names; the other filters test what the walk finds."""
    if query.label is not None:
        return "schedules_page_label"
    if query.state is not None:
        return "schedules_page_state"
    return "schedules_page"


def occurrence_page_params(tenant: str, query: OccurrencePage, instant: Callable[[datetime], Any]) -> dict[str, Any]:
    def opt(at: datetime | None) -> Any:
        return None if at is None else instant(at)

    before_at, before_id = query.before if query.before is not None else (None, None)
    return {
        "tenant": tenant,
        "schedule_id": query.schedule_id,
        "state": None if query.state is None else query.state.value,
        "since": opt(query.since),
        "until": opt(query.until),
        "before_at": opt(before_at),
        "before_id": before_id,
        "limit": query.limit,
    }


def token_conflict_message(token: ApiToken) -> str:
    return (
        f"tenant {token.tenant!r} already has a token named {token.name!r}; "
        f"revoke it first (clockctl token revoke {token.name} --tenant {token.tenant}) or choose another --name"
    )
