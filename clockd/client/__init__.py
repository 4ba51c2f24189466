"""``clockd.client``: a typed Python client of the clockd HTTP API (httpx; sync and async).

::

    from clockd.client import Client

    api = Client("http://127.0.0.1:8470", token="clockd_…")
    s = api.create({"name": "mail", "schedule": "0 10 * * 5", "tz": "Europe/Paris",
                    "command": ["/usr/local/bin/send-mail"]}, idempotency_key="mail-v1")
    for run in s.next_runs:
        print(run.local, run.note or "")

Every error answer (RFC 9457 problem+json) raises a subclass of :class:`ApiError`
chosen by its stable ``type``; lists are iterators that follow ``next_cursor`` page by
page. The client imports nothing of the daemon: it only speaks HTTP.
"""

from __future__ import annotations

from clockd.client.errors import (
    ApiError,
    Conflict,
    Forbidden,
    IdempotencyKeyReused,
    InvalidInput,
    NotFound,
    PreconditionFailed,
    QuotaExceeded,
    RateLimited,
    ServerError,
    Unauthorized,
)
from clockd.client.http import AsyncClient, Client
from clockd.client.models import AuditEntry, IssuedToken, Occurrence, Run, Schedule, Token

__all__ = [
    "ApiError",
    "AsyncClient",
    "AuditEntry",
    "Client",
    "Conflict",
    "Forbidden",
    "IdempotencyKeyReused",
    "InvalidInput",
    "IssuedToken",
    "NotFound",
    "Occurrence",
    "PreconditionFailed",
    "QuotaExceeded",
    "RateLimited",
    "Run",
    "Schedule",
    "ServerError",
    "Token",
    "Unauthorized",
]
