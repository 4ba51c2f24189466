"""``clockctl --server URL --token T``: the verbs through the HTTP API instead of the store.

Where the server and token come from, first found wins: ``--server``/``--token``,
``CLOCKD_SERVER``/``CLOCKD_TOKEN``, then the current context of
``~/.config/clockd/client.yaml`` (``$XDG_CONFIG_HOME``), kept the way kubectl keeps
its contexts (read by ``clockctl.contexts``)::

    current-context: prod
    contexts:
      prod: {server: "https://clockd.example.com:8470", token: "clockd_…"}
      local: {server: "http://127.0.0.1:8470", token: "clockd_…"}

:class:`RemoteOps` offers the :class:`clockd.services.ops.Ops` methods the commands call, answered
by the API and decoded into the same models, so the commands print the same output,
``-o json`` and exit codes either way. Problem answers become the clockd error the
store path would raise (404 → NotFound, 409/412 → Conflict, 4xx → InvalidInput, 401/403
and 5xx → a store error, exit 4).
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, NoReturn, TypeVar

import httpx

from clockctl.contexts import config_path, resolve
from clockd import errors, tokens
from clockd.client import AsyncClient
from clockd.client import errors as api_errors
from clockd.client import models as client_models
from clockd.core.clock import SystemClock
from clockd.core.model import (
    Attempt,
    AttemptOutcome,
    Occurrence,
    OccurrenceState,
    Schedule,
    ScheduleDef,
    ScheduleState,
    TenantLimits,
    TenantUsage,
)
from clockd.formats.schedfile import Location, job_document, job_from_mapping
from clockd.formats.validate import MANAGED_BY
from clockd.services.explain import Explanation
from clockd.services.ops import (
    Added,
    ApplyPlan,
    ApplyResult,
    Change,
    Ops,
    PlanAction,
    ResumeFrom,
    VersionRow,
    token_not_found,
)
from clockd.services.reconcile import Entry, Report, Status
from clockd.store import ApiToken, AuditEntry, Replanned, RunSummary, Store

T = TypeVar("T")


def _raise(exc: api_errors.ApiError) -> NoReturn:
    if isinstance(exc, api_errors.NotFound):
        raise errors.NotFound(exc.detail) from None
    if isinstance(exc, api_errors.IdempotencyKeyReused):
        raise errors.IdempotencyMismatch(exc.detail) from None
    if isinstance(exc, api_errors.PreconditionFailed):
        raise errors.VersionMismatch(exc.detail) from None
    if isinstance(exc, api_errors.RateLimited) and "limit" in exc.detail and exc.type.endswith("quota-exceeded"):
        raise errors.QuotaExceeded(exc.detail) from None
    if isinstance(exc, api_errors.Conflict):
        raise errors.Conflict(exc.detail) from None
    if isinstance(exc, (api_errors.Unauthorized, api_errors.Forbidden)):
        raise errors.StorePermissionDenied(f"the API refused: {exc.detail}") from None
    if isinstance(exc, api_errors.InvalidInput):
        raise errors.InvalidInput(exc.detail) from None
    raise errors.StoreUnavailable(f"the API answered {exc.status}: {exc.detail}") from None


def _when(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))


def schedule_from_view(doc: Mapping[str, Any]) -> Schedule:
    job, problems = job_from_mapping(doc["job"], Location("server", 1))
    if job is None:  # the server wrote it: its own loader must read it back
        raise errors.StoreUnavailable(f"the API answered a job this clockctl cannot read: {problems[0]}")
    definition = job.definition
    if definition.tenant != doc["tenant"]:
        definition = dataclasses.replace(definition, tenant=doc["tenant"])
    if doc.get("managed_by"):  # the reserved label the job document leaves out
        labels = {pair for pair in definition.labels if pair[0] != MANAGED_BY} | {(MANAGED_BY, doc["managed_by"])}
        definition = dataclasses.replace(definition, labels=tuple(sorted(labels)))
    created = _when(doc["created_at"])
    updated = _when(doc["updated_at"])
    assert created is not None and updated is not None
    return Schedule(
        id=doc["id"],
        version=int(doc["version"]),
        state=ScheduleState(doc["state"]),
        definition=definition,
        next_run_at=_when(doc.get("next_run_at")),
        shard=0,  # not exposed by the API
        created_at=created,
        updated_at=updated,
        paused_at=_when(doc.get("paused_at")),
    )


def occurrence_from_view(doc: Mapping[str, Any]) -> Occurrence:
    scheduled = _when(doc["scheduled_for"])
    available = _when(doc["available_at"])
    assert scheduled is not None and available is not None
    return Occurrence(
        id=doc["id"],
        schedule_id=doc["schedule_id"],
        schedule_name=doc["schedule"],
        version=int(doc["version"]),
        scheduled_for=scheduled,
        available_at=available,
        state=OccurrenceState(doc["state"]),
        attempts=int(doc["attempts"]),
        queue=doc["queue"],
        manual=bool(doc["manual"]),
        enqueued_at=_when(doc.get("enqueued_at")),
        started_at=_when(doc.get("started_at")),
        finished_at=_when(doc.get("finished_at")),
        exit_code=doc.get("exit_code"),
        reason=doc.get("reason"),
        last_error=doc.get("last_error"),
    )


def decode(kind: Any, value: Any) -> Any:
    """A JSON value as ``kind`` (a dataclass, enum, datetime, timedelta, optional, tuple,
    list or dict of those): how the API's answers of the services' own dataclasses
    (``clockd.api.routes.common.answer`` dumps them field by field) become them again."""
    if value is None:
        return None
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return decode(next(a for a in args if a is not type(None)), value)
    if kind is datetime:
        return _when(value)
    if kind is timedelta:
        return timedelta(seconds=float(value))
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind(value)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        fields = {f.name: decode(hints[f.name], value[f.name]) for f in dataclasses.fields(kind) if f.name in value}
        return kind(**fields)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], v) for v in value)
        return tuple(decode(a, v) for a, v in zip(args, value, strict=True))
    if origin is list:
        return [decode(args[0], v) for v in value]
    if origin is dict:
        return {decode(args[0], k): decode(args[1], v) for k, v in value.items()}
    return value


def decoded(kind: type[T], value: Any) -> T:
    result: T = decode(kind, value)
    return result


def summary_from_view(doc: Mapping[str, Any] | None) -> RunSummary | None:
    if doc is None:
        return None
    state = doc.get("last_state")
    return RunSummary(
        next_start=_when(doc.get("next_start")),
        last_scheduled_for=_when(doc.get("last_scheduled_for")),
        last_started_at=_when(doc.get("last_started_at")),
        last_state=None if state is None else OccurrenceState(state),
        last_exit_code=doc.get("last_exit_code"),
    )


class _Unsupported:
    def __getattr__(self, name: str) -> NoReturn:
        raise errors.InvalidInput(
            "this command reads the store directly and does not run over --server yet; "
            "run it without --server/CLOCKD_SERVER (with --store)"
        )


class RemoteOps:
    """The ``Ops`` methods clockctl's commands call, through the API."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.store = _Unsupported()
        self._summaries: dict[str, RunSummary | None] = {}  # by schedule id, from the answers

    async def _typed(self, answer: Awaitable[T]) -> T:
        """``answer`` (a client call), its problem raised as the store path's clockd error."""
        try:
            return await answer
        except api_errors.ApiError as exc:
            _raise(exc)
        except httpx.HTTPError as exc:
            raise errors.StoreUnavailable(f"cannot reach the API at {self.client.http.base_url}: {exc}") from None

    async def _call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, json: Any = None) -> Any:
        return await self._typed(self.client.request(method, path, params=params, json=json))

    @staticmethod
    def _tenant(tenant: str | None) -> dict[str, str]:
        # The token's tenant is the default; another one is for cluster-admin tokens.
        return {} if tenant in (None, "default") else {"tenant": str(tenant)}

    @staticmethod
    def _path(name: str) -> str:
        from urllib.parse import quote

        return f"/v1/schedules/{quote(name, safe='')}"

    async def create(self, definition: ScheduleDef, idempotency_key: str | None = None) -> Added:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        try:
            response = await self.client.http.post(
                "/v1/schedules", json=job_document(definition), headers=headers, params=self._tenant(definition.tenant)
            )
            api_errors.raise_for(response)
        except api_errors.ApiError as exc:
            _raise(exc)
        except httpx.HTTPError as exc:
            raise errors.StoreUnavailable(f"cannot reach the API at {self.client.http.base_url}: {exc}") from None
        return Added(schedule_from_view(response.json()), response.headers.get("idempotent-replayed") == "true")

    def _keep_summary(self, doc: Mapping[str, Any]) -> Schedule:
        schedule = schedule_from_view(doc)
        if "summary" in doc:
            self._summaries[schedule.id] = summary_from_view(doc["summary"])
        return schedule

    async def summaries(self, schedules: Sequence[Schedule]) -> dict[str, RunSummary]:
        """The summaries the list or get answers carried (``?summary=true``); one GET per
        schedule not seen yet."""
        out: dict[str, RunSummary] = {}
        for schedule in schedules:
            if schedule.id not in self._summaries:
                await self.get(schedule.name, schedule.definition.tenant)
            found = self._summaries.get(schedule.id)
            if found is not None:
                out[schedule.id] = found
        return out

    async def get(self, name: str, tenant: str = "default") -> Schedule:
        return self._keep_summary(await self._call("GET", self._path(name), params=self._tenant(tenant)))

    async def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        out: list[Schedule] = []
        cursor = None
        while True:
            params = {**self._tenant(tenant), "limit": 1000, "summary": "true"}
            if cursor:
                params["cursor"] = cursor
            doc = await self._call("GET", "/v1/schedules", params=params)
            out.extend(self._keep_summary(item) for item in doc["items"])
            cursor = doc.get("next_cursor")
            if not cursor:
                return out

    async def _change(self, path: str, tenant: str, body: Any = None) -> Change:
        doc = await self._call("POST", path, params=self._tenant(tenant), json=body if body is not None else {})
        return Change(schedule_from_view(doc), int(doc.get("canceled", 0)), unchanged=bool(doc.get("unchanged")))

    async def pause(self, name: str, tenant: str = "default", reason: str | None = None) -> Change:
        return await self._change(self._path(name) + "/pause", tenant, {"reason": reason} if reason else {})

    async def resume(self, name: str, tenant: str = "default", from_: ResumeFrom = ResumeFrom.NOW) -> Change:
        return await self._change(self._path(name) + "/resume", tenant, {"from": from_.value})

    async def update(self, name: str, definition: ScheduleDef, tenant: str = "default") -> Change:
        doc = await self._call("PUT", self._path(name), params=self._tenant(tenant), json=job_document(definition))
        schedule = schedule_from_view(doc)
        replanned = tuple(_replanned(schedule.id, r) for r in doc.get("replanned") or ())
        return Change(schedule, int(doc.get("canceled", 0)), replanned=replanned)

    async def remove(self, name: str, tenant: str = "default") -> Change:
        schedule = await self.get(name, tenant)
        await self._call("DELETE", self._path(name), params=self._tenant(tenant))
        return Change(dataclasses.replace(schedule, state=ScheduleState.DELETED, version=schedule.version + 1), 0)

    async def run_now(self, name: str, tenant: str = "default") -> Occurrence:
        doc = await self._call("POST", self._path(name) + "/run-now", params=self._tenant(tenant))
        return occurrence_from_view(doc)

    async def versions(self, name: str, tenant: str = "default") -> list[VersionRow]:
        doc = await self._call("GET", self._path(name) + "/versions", params=self._tenant(tenant))
        rows: list[VersionRow] = []
        for item in doc["items"]:
            job, problems = job_from_mapping(item["job"], Location("server", 1))
            if job is None:
                raise errors.StoreUnavailable(f"the API answered a job this clockctl cannot read: {problems[0]}")
            start = _when(item["valid_from"])
            assert start is not None
            state = ScheduleState(item["state"])
            rows.append((int(item["version"]), start, _when(item["valid_to"]), job.definition, state))
        return rows

    async def runs(
        self, name: str | None, limit: int = 50, tenant: str = "default", upcoming: bool = False
    ) -> list[Occurrence]:
        params: dict[str, Any] = {**self._tenant(tenant), "limit": min(limit, 1000)}
        if name:
            params["schedule"] = name
        if not upcoming:
            params["until"] = (datetime.now(UTC)).isoformat()
        doc = await self._call("GET", "/v1/occurrences", params=params)
        return [occurrence_from_view(item) for item in doc["items"]]

    async def occurrence(self, id_or_prefix: str) -> Occurrence:
        return occurrence_from_view(await self._call("GET", f"/v1/occurrences/{id_or_prefix}"))

    async def attempt(self, id_or_prefix: str, number: int | None = None) -> tuple[Occurrence, Attempt]:
        occ = await self.occurrence(id_or_prefix)
        doc = await self._call("GET", f"/v1/occurrences/{occ.id}/logs", params={"attempt": number})
        started = _when(doc["started_at"])
        assert started is not None
        return occ, Attempt(
            occurrence_id=occ.id,
            number=int(doc["attempt"]),
            lease_token="",
            worker_id=doc.get("worker_id") or "",
            started_at=started,
            outcome=AttemptOutcome(doc["outcome"]),
            finished_at=_when(doc.get("finished_at")),
            exit_code=doc.get("exit_code"),
            signal=doc.get("signal"),
            output=doc.get("output") or "",
            error=doc.get("error"),
        )

    async def dead_letters(self, name: str | None = None, tenant: str = "default", limit: int = 50) -> list[Occurrence]:
        params = {**self._tenant(tenant), "limit": limit, **({"schedule": name} if name else {})}
        return [occurrence_from_view(d) for d in (await self._call("GET", "/v1/dlq", params=params))["items"]]

    async def replay(self, id_or_prefix: str) -> Occurrence:
        return occurrence_from_view(await self._call("POST", f"/v1/dlq/{id_or_prefix}/replay"))

    async def drop(self, id_or_prefix: str) -> Occurrence:
        return occurrence_from_view(await self._call("DELETE", f"/v1/dlq/{id_or_prefix}"))

    async def explain(self, name: str, at: str, tenant: str = "default") -> Explanation:
        doc = await self._call("GET", self._path(name) + "/explain", params={**self._tenant(tenant), "at": at})
        return decoded(Explanation, doc)

    async def reconcile(
        self,
        start: datetime,
        end: datetime,
        name: str | None = None,
        tenant: str | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        on_loaded: Callable[[int], None] | None = None,
    ) -> Report:
        """The server reconciles (``GET /v1/reconcile?all=true``); no progress to report.
        Without ``name``: the token's tenant's schedules (a cluster-admin's: every tenant's,
        or ``tenant``'s)."""
        params = {**self._tenant(tenant), "from": start.isoformat(), "to": end.isoformat(), "all": "true"}
        if name:
            params["schedule"] = name
        doc = await self._call("GET", "/v1/reconcile", params=params)
        return Report(
            start=start,
            end=end,
            schedules=int(doc["schedules"]),
            expected=int(doc["expected"]),
            counts={Status(k): int(v) for k, v in doc["counts"].items()},
            entries=decoded(list[Entry], doc["entries"]),
        )

    async def tenants(self) -> list[TenantUsage]:
        return decoded(list[TenantUsage], (await self._call("GET", "/v1/tenants"))["items"])

    async def set_tenant(self, tenant: str, **changes: int | None) -> TenantLimits:
        from urllib.parse import quote

        return decoded(TenantLimits, await self._call("PATCH", f"/v1/tenants/{quote(tenant, safe='')}", json=changes))

    async def plan_apply(
        self,
        desired: Sequence[ScheduleDef],
        tenant: str = "default",
        *,
        prune: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> ApplyPlan:
        """The plan ``Ops.plan_apply`` makes, over the tenant's schedules as the API lists
        them (its one store read), so the diff printed is the store path's. ``apply_plan``
        sends the document; the server plans again and writes all or nothing."""
        # Planned under the tenant as the user named it ("default": the token's), so the
        # messages read as on the store; the server applies in the token's tenant.
        listed = [
            dataclasses.replace(s, definition=dataclasses.replace(s.definition, tenant=tenant))
            for s in await self.list_schedules(tenant)
        ]
        ops = Ops(typing.cast(Store, _Listing(listed)), SystemClock())
        return await ops.plan_apply(desired, tenant, prune=prune, progress=progress)

    async def apply(
        self,
        desired: Sequence[ScheduleDef],
        tenant: str = "default",
        *,
        prune: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[ApplyPlan, ApplyResult | None]:
        """``Ops.apply`` over the API: the plan (as ``plan_apply``), then the document sent
        when it has changes and no problem (the server plans again, all or nothing)."""
        plan = await self.plan_apply(desired, tenant, prune=prune, progress=progress)
        if plan.problems or not plan.changes:
            return plan, None
        return plan, await self.apply_plan(plan)

    async def apply_plan(self, plan: ApplyPlan) -> ApplyResult:
        jobs = [job_document(i.desired) for i in sorted(plan.items, key=_index) if i.desired is not None]
        params = {**self._tenant(plan.tenant), "prune": "true" if plan.count(PlanAction.DELETE) else "false"}
        doc = await self._call("POST", "/v1/apply", params=params, json={"jobs": jobs})
        after = {s.name: s for s in await self.list_schedules(plan.tenant)}
        before = {i.name: i.current for i in plan.items if i.current is not None}
        return ApplyResult(
            created=[after[n] for n in doc["create"] if n in after],
            updated=[after[n] for n in doc["update"] if n in after],
            deleted=[s for n in doc["delete"] if (s := before.get(n)) is not None],
            canceled=int(doc.get("canceled", 0)),
            replanned=[
                _replanned(after[r["schedule"]].id, r) for r in doc.get("replanned") or () if r.get("schedule") in after
            ],
        )

    async def cluster_status(self) -> dict[str, Any]:
        """``clockctl status``'s document as the api process sees the cluster (cluster-admin)."""
        doc = await self._call("GET", "/v1/status", params={"cluster": "true"})
        if "cluster" not in doc:
            raise errors.StoreUnavailable("this api process does not serve the cluster's status")
        return dict(doc["cluster"])

    # -- tokens and the audit log: the API records the calling token as the actor ------------

    async def create_token(
        self, tenant: str, role: str, name: str, expires_in: timedelta | None, actor: str
    ) -> tokens.Issued:
        """``POST /v1/tokens`` ("default": the calling token's tenant). An admin token makes
        tokens up to admin in its own tenant, a cluster-admin any, anywhere (the API decides)."""
        expires = None if expires_in is None else f"{int(expires_in.total_seconds())}s"
        issued = await self._typed(
            self.client.create_token(role, name=name, expires=expires, tenant=self._tenant(tenant).get("tenant"))
        )
        return tokens.Issued(issued.secret, _token(issued.token))

    async def list_tokens(self, tenant: str | None = None) -> list[ApiToken]:
        """``GET /v1/tokens``: without ``tenant``, the calling token's tenant's."""
        return [_token(t) for t in await self._typed(self.client.tokens(tenant=self._tenant(tenant).get("tenant")))]

    async def revoke_token(self, ref: str, tenant: str, actor: str) -> ApiToken:
        """``DELETE /v1/tokens/REF`` in ``tenant``: a 404 (no such live token, or another
        tenant's) reads as on the store."""
        named = self._tenant(tenant).get("tenant")  # None: the token's own tenant
        try:
            revoked = await self._typed(self.client.revoke_token(ref, tenant=named))
        except errors.NotFound:
            # It named tenant 'default' (the option's default) for a token of tenant teama.
            raise errors.NotFound(token_not_found(ref, named)) from None
        return _token(revoked)

    async def audit(self, tenant: str | None = None, limit: int = 50) -> list[AuditEntry]:
        """``GET /v1/audit`` page by page up to ``limit`` entries, newest first (an admin
        token; without ``tenant``, its own tenant's)."""

        async def collect() -> list[AuditEntry]:
            out: list[AuditEntry] = []
            entries = self.client.audit(min(limit, 1000), tenant=self._tenant(tenant).get("tenant"))
            async with contextlib.aclosing(entries):
                async for e in entries:
                    out.append(_audit_entry(e))
                    if len(out) >= limit:
                        break
            return out

        return await self._typed(collect())

    def __getattr__(self, name: str) -> NoReturn:
        _Unsupported().__getattr__(name)


def _audit_entry(e: client_models.AuditEntry) -> AuditEntry:
    at = _when(e.at)
    assert at is not None
    return AuditEntry(at, e.tenant, e.actor, e.action, e.target, e.before_version, e.after_version, e.detail, e.id)


def _token(t: client_models.Token) -> ApiToken:
    created = _when(t.created_at)
    assert created is not None
    # The hash never leaves the server; the commands print everything else.
    return ApiToken(t.id, t.tenant, t.name, t.role, "", created, _when(t.expires_at), _when(t.revoked_at))


def _replanned(schedule_id: str, doc: Mapping[str, Any]) -> Replanned:
    state = doc.get("state")
    return Replanned(
        schedule_id,
        int(doc["version"]),
        datetime.fromisoformat(doc["scheduled_for"]),
        str(doc["replaces"]),
        doc.get("occurrence_id"),
        None if state is None else OccurrenceState(state),
    )


def _index(item: Any) -> int:
    return -1 if item.index is None else int(item.index)


@dataclasses.dataclass(frozen=True, slots=True)
class _Listing:
    """The one store read ``Ops.plan_apply`` makes, answered from the API's list."""

    schedules: list[Schedule]

    async def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        return self.schedules


__all__ = ["RemoteOps", "config_path", "resolve"]
