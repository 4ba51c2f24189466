"""Typed errors from problem+json answers: one class per problem ``type``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass(frozen=True, slots=True)
class FieldProblem:
    pointer: str  # RFC 6901 pointer into the request body, e.g. "/tz"
    detail: str


@dataclass(eq=False)
class ApiError(Exception):
    """An error answer of the API. ``detail`` is the one-line message clockctl prints."""

    status: int
    type: str
    detail: str
    errors: list[FieldProblem] = field(default_factory=list)
    retry_after: float | None = None

    def __str__(self) -> str:
        return self.detail


class Unauthorized(ApiError): ...


class Forbidden(ApiError): ...


class NotFound(ApiError): ...


class Conflict(ApiError): ...


class PreconditionFailed(Conflict):
    """If-Match named a version that is no longer the schedule's."""


class InvalidInput(ApiError): ...


class IdempotencyKeyReused(InvalidInput):
    """The Idempotency-Key was used with another body."""


class RateLimited(ApiError):
    """429: wait ``retry_after`` seconds."""


class QuotaExceeded(RateLimited):
    """429 for a tenant at its schedule quota: waiting does not lift it (``retry_after`` is
    None); remove a schedule or have the limit raised."""


class ServerError(ApiError): ...


_BY_SLUG: dict[str, type[ApiError]] = {
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not-found": NotFound,
    "conflict": Conflict,
    "precondition-failed": PreconditionFailed,
    "idempotency-key-reused": IdempotencyKeyReused,
    "invalid-input": InvalidInput,
    "too-deep": InvalidInput,
    "malformed-json": InvalidInput,
    "body-too-large": InvalidInput,
    "unsupported-media-type": InvalidInput,
    "quota-exceeded": QuotaExceeded,
    "rate-limited": RateLimited,
}


def raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    doc: dict[str, Any] = {}
    try:
        parsed = response.json()
        if isinstance(parsed, dict):
            doc = parsed
    except ValueError:
        pass
    slug = str(doc.get("type", "")).rsplit(":", 1)[-1]
    cls = _BY_SLUG.get(slug) or (ServerError if response.status_code >= 500 else ApiError)
    retry = response.headers.get("retry-after")
    raise cls(
        status=response.status_code,
        type=str(doc.get("type", "")),
        detail=str(doc.get("detail") or response.reason_phrase or f"HTTP {response.status_code}"),
        errors=[FieldProblem(str(e.get("pointer", "")), str(e.get("detail", ""))) for e in doc.get("errors", [])],
        retry_after=float(retry) if retry and retry.isdigit() else None,
    )
