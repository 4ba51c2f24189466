"""RFC 9457 problem details: every error the API answers, in one table.

Each error class has a stable ``type`` (``urn:clockd:problem:<slug>``), a status and a
title; ``detail`` is the same one-line message ``clockctl`` prints for that error, and
``errors`` lists one ``{pointer, detail}`` per invalid field (RFC 6901 JSON pointers
into the request body). A clockd error maps to its problem in :func:`from_error`, the
one place the API turns exceptions into statuses; a 4xx is always answered before
anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from starlette.responses import Response

from clockd.errors import (
    ClockdError,
    Conflict,
    IdempotencyMismatch,
    InvalidInput,
    NeverFires,
    NotFound,
    QuotaExceeded,
    StoreError,
    StoreLocked,
    StoreUnavailable,
    VersionMismatch,
)

MEDIA_TYPE: Final = "application/problem+json"
TYPE_PREFIX: Final = "urn:clockd:problem:"

# slug -> (status, title). The slugs are part of the API: never rename one.
TYPES: Final[Mapping[str, tuple[int, str]]] = {
    "malformed-json": (400, "The body is not valid JSON"),
    "unauthorized": (401, "A valid bearer token is required"),
    "forbidden": (403, "The token's role does not allow this"),
    "not-found": (404, "Not found"),
    "method-not-allowed": (405, "Method not allowed"),
    "request-timeout": (408, "The request was not received in time"),
    "conflict": (409, "That conflicts with what is stored"),
    "precondition-failed": (412, "The schedule's version is not the one If-Match names"),
    "body-too-large": (413, "The body is too large"),
    "unsupported-media-type": (415, "Send application/json"),
    "invalid-input": (422, "The input is not valid"),
    "idempotency-key-reused": (422, "The Idempotency-Key was used with another body"),
    "too-deep": (422, "The JSON is nested too deeply"),
    "quota-exceeded": (429, "The tenant is at one of its limits"),
    "rate-limited": (429, "Too many requests"),
    "internal": (500, "Internal error"),
    "store-unavailable": (503, "The store is unavailable"),
}


@dataclass(frozen=True, slots=True)
class FieldError:
    pointer: str  # RFC 6901, e.g. "/schedule" or "/http/url"
    detail: str


@dataclass(slots=True)
class Problem(Exception):
    """An error answer. Raise it anywhere below a route; the app renders it."""

    slug: str
    detail: str
    errors: Sequence[FieldError] = ()
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.slug not in TYPES:
            raise ValueError(f"unknown problem type {self.slug!r}")

    @property
    def status(self) -> int:
        return TYPES[self.slug][0]

    def document(self, instance: str | None = None) -> dict[str, object]:
        doc: dict[str, object] = {
            "type": TYPE_PREFIX + self.slug,
            "title": TYPES[self.slug][1],
            "status": self.status,
            "detail": self.detail,
        }
        if instance:
            doc["instance"] = instance
        if self.errors:
            doc["errors"] = [{"pointer": e.pointer, "detail": e.detail} for e in self.errors]
        return doc

    def response(self, instance: str | None = None) -> Response:
        body = json.dumps(self.document(instance), ensure_ascii=False).encode()
        return Response(body, self.status, headers=self.headers, media_type=MEDIA_TYPE)


def pointer(*parts: str | int) -> str:
    """An RFC 6901 pointer from path parts (``~`` and ``/`` escaped)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def from_error(exc: ClockdError) -> Problem:
    """The problem for a clockd error (the CLI's exit-code table, as HTTP statuses)."""
    if isinstance(exc, IdempotencyMismatch):
        return Problem("idempotency-key-reused", exc.message)
    if isinstance(exc, VersionMismatch):
        return Problem("precondition-failed", exc.message)
    if isinstance(exc, QuotaExceeded):
        # No Retry-After: a count limit does not lift with time, and a client that
        # honours the header would retry every minute for ever.
        return Problem("quota-exceeded", exc.message)
    if isinstance(exc, NeverFires) and exc.field is not None:
        # An instant in the past, an expression with no next fire: the field it is about
        # (it came with no pointer at all).
        return Problem("invalid-input", f"{exc.field}: {exc.message}", [FieldError(pointer(exc.field), exc.message)])
    if isinstance(exc, InvalidInput):
        return Problem("invalid-input", exc.message)
    if isinstance(exc, NotFound):
        return Problem("not-found", exc.message)
    if isinstance(exc, Conflict):
        return Problem("conflict", exc.message)
    if isinstance(exc, (StoreUnavailable, StoreLocked)):
        return Problem("store-unavailable", exc.message, headers={"Retry-After": "1"})
    if isinstance(exc, StoreError):
        return Problem("store-unavailable", exc.message)
    return Problem("internal", exc.message)
