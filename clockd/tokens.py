"""Bearer tokens of the HTTP API: made, hashed and checked here, nowhere else.

A token reads ``clockd_<id>_<secret>``: ``id`` (12 hex digits) names the stored row,
``secret`` (32 random bytes, URL-safe base64) is what proves possession. The store
keeps ``sha256(token)`` only, so a leaked database gives no usable token; a check looks
the row up by id and compares the hashes with :func:`hmac.compare_digest` (constant
time). Tokens are never logged: :func:`token_id` is what log lines may name.

Roles, each including the ones before it: ``readonly`` (reads), ``operator`` (changes
schedules, run-now, dead letters, apply), ``admin`` (the tenant's audit log and tokens),
``cluster-admin`` (every tenant: tenants, quotas, tokens).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from clockd.errors import InvalidInput
from clockd.store import ApiToken

PREFIX = "clockd_"
_SHAPE = re.compile(r"^clockd_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")


class Role(StrEnum):
    READONLY = "readonly"
    OPERATOR = "operator"
    ADMIN = "admin"
    CLUSTER_ADMIN = "cluster-admin"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def allows(self, needed: Role) -> bool:
        return self.rank >= needed.rank


_RANKS = {Role.READONLY: 0, Role.OPERATOR: 1, Role.ADMIN: 2, Role.CLUSTER_ADMIN: 3}


@dataclass(frozen=True, slots=True)
class Issued:
    """A new token: ``secret`` is shown once, ``record`` is what the store keeps."""

    secret: str
    record: ApiToken


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_id(token: str) -> str | None:
    """The id part of a well-formed token (safe to log), else None."""
    match = _SHAPE.match(token)
    return match.group(1) if match else None


def issue(tenant: str, role: str, name: str, now: datetime, expires_in: timedelta | None) -> Issued:
    """A fresh token for ``tenant``. ``InvalidInput`` for an unknown role or a bad name."""
    try:
        Role(role)
    except ValueError:
        raise InvalidInput(f"role: {role!r} is not one of {', '.join(r.value for r in Role)}") from None
    check_name("name", name)
    check_name("tenant", tenant)
    if expires_in is not None and expires_in <= timedelta(0):
        raise InvalidInput("expires: must be a positive duration such as 90d")
    tid = secrets.token_hex(6)
    secret = f"{PREFIX}{tid}_{secrets.token_urlsafe(32)}"
    expires = None if expires_in is None else now + expires_in
    return Issued(secret, ApiToken(tid, tenant, name, role, digest(secret), now, expires))


def check_name(what: str, value: str) -> None:
    if not _NAME.match(value):
        raise InvalidInput(f"{what}: {value!r}: use 1-100 letters, digits, '.', '_', '@' or '-', starting alphanumeric")


def verify(stored: ApiToken | None, token: str, now: datetime) -> bool:
    """Whether ``token`` is the live token ``stored`` (not revoked, not expired). The hash
    comparison is constant-time; a missing row still costs one comparison."""
    expected = stored.hash if stored is not None else "0" * 64
    same = hmac.compare_digest(expected, digest(token))
    if stored is None or not same or stored.revoked_at is not None:
        return False
    return stored.expires_at is None or now < stored.expires_at
