"""What every route shares: the store port, the use cases, the clock, the limits.

Nothing here outlives a request except caches that may be lost at any time (verified
tokens, the admission buckets): api processes are stateless, any number may run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from clockd.api.auth import Principal
from clockd.api.problems import Problem
from clockd.core.clock import Clock
from clockd.services.ops import Ops
from clockd.store import AuditEntry, Store


@dataclass(frozen=True, slots=True)
class Limits:
    max_body: int = 1024 * 1024  # bytes
    max_depth: int = 32  # nested JSON arrays / objects
    body_timeout: float = 10.0  # seconds to receive a whole body (slow clients)
    writes_per_second: int = 2000  # per tenant and api process (admission)
    max_page: int = 1000


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


@dataclass(slots=True)
class ApiContext:
    store: Store
    ops: Ops
    clock: Clock
    limits: Limits = field(default_factory=Limits)
    token_cache: dict[str, tuple[Principal, float]] = field(default_factory=dict)
    buckets: dict[str, _Bucket] = field(default_factory=dict)
    # The cluster's status document as ``clockctl status -o json`` prints it, from this
    # process's view (set by the api server; GET /v1/status?cluster=true, cluster-admin).
    cluster_status: Callable[[], Awaitable[dict[str, Any]]] | None = None

    def admit_write(self, tenant: str) -> None:
        """Per-tenant admission of writes (a token bucket, ``writes_per_second`` with a
        burst of one second's worth): 429 with ``Retry-After`` beyond it. Refilled on the
        context's monotonic clock (a wall-clock step neither empties nor fills it)."""
        rate = float(self.limits.writes_per_second)
        now = self.clock.monotonic()
        bucket = self.buckets.get(tenant)
        if bucket is None:
            bucket = self.buckets[tenant] = _Bucket(rate, now)
        bucket.tokens = min(rate, bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens < 1:
            wait = max(1, int((1 - bucket.tokens) / rate + 0.999))
            raise Problem(
                "rate-limited",
                f"tenant {tenant!r} is over {self.limits.writes_per_second} writes per second; retry in {wait} s",
                headers={"Retry-After": str(wait)},
            )
        bucket.tokens -= 1

    def entry(
        self,
        who: Principal,
        tenant: str,
        action: str,
        target: str,
        before: int | None = None,
        after: int | None = None,
        **detail: Any,
    ) -> AuditEntry:
        """An audit entry for a write (who, what, when, versions). Routes record it with
        ``store.audited`` around the write, so it commits in the write's transaction."""
        return AuditEntry(self.clock.now(), tenant, who.name, action, target, before, after, detail)

    def audited(
        self, who: Principal, tenant: str, action: str, target: str, before: int | None = None, **detail: Any
    ) -> AbstractContextManager[None]:
        """The common case of ``store.audited``: a schedule write whose result (a ``Schedule``,
        or a ``ScheduleChanged``) gives the after-version (and ``canceled``, ``replanned``)."""

        def describe(result: Any) -> AuditEntry:
            return AuditEntry.of_write(result, self.clock.now(), tenant, who.name, action, target, before, **detail)

        return self.store.audited(describe)
