"""The sync and async clients. Both build the same requests (:class:`_Calls`) and decode
the same answers; only the transport differs."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from clockd.client.errors import raise_for
from clockd.client.models import AuditEntry, IssuedToken, Occurrence, Run, Schedule, Token

DEFAULT_URL = "http://127.0.0.1:8470"


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def _name(name: str) -> str:
    return quote(name, safe="")


def _clean(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _match(if_match: int | str | None) -> dict[str, str]:
    if if_match is None:
        return {}
    return {"If-Match": if_match if isinstance(if_match, str) else f'"{if_match}"'}


def _runs(doc: Mapping[str, Any]) -> list[Run]:
    return [Run(r["at"], r["local"], r.get("note")) for r in doc["runs"]]


class _Calls:
    """Every endpoint as a :class:`Call` (the two clients share these)."""

    @staticmethod
    def create(job: Mapping[str, Any], idempotency_key: str | None) -> Call:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return Call("POST", "/v1/schedules", json=dict(job), headers=headers)

    @staticmethod
    def get(name: str) -> Call:
        return Call("GET", f"/v1/schedules/{_name(name)}")

    @staticmethod
    def replace(name: str, job: Mapping[str, Any], if_match: int | str | None) -> Call:
        return Call("PUT", f"/v1/schedules/{_name(name)}", json=dict(job), headers=_match(if_match))

    @staticmethod
    def patch(name: str, changes: Mapping[str, Any], if_match: int | str | None) -> Call:
        headers = {"Content-Type": "application/merge-patch+json", **_match(if_match)}
        return Call("PATCH", f"/v1/schedules/{_name(name)}", json=dict(changes), headers=headers)

    @staticmethod
    def delete(name: str, if_match: int | str | None) -> Call:
        return Call("DELETE", f"/v1/schedules/{_name(name)}", headers=_match(if_match))

    @staticmethod
    def pause(name: str, reason: str | None) -> Call:
        return Call("POST", f"/v1/schedules/{_name(name)}/pause", json=_clean({"reason": reason}))

    @staticmethod
    def resume(name: str, from_: str) -> Call:
        return Call("POST", f"/v1/schedules/{_name(name)}/resume", json={"from": from_})

    @staticmethod
    def run_now(name: str) -> Call:
        return Call("POST", f"/v1/schedules/{_name(name)}/run-now")

    @staticmethod
    def preview(when: Mapping[str, Any], count: int) -> Call:
        return Call("POST", "/v1/preview", json={**when, "count": count})

    @staticmethod
    def create_token(role: str, name: str | None, expires: str | None, tenant: str | None) -> Call:
        body = _clean({"role": role, "name": name or role, "expires": expires, "tenant": tenant})
        return Call("POST", "/v1/tokens", json=body)

    @staticmethod
    def tokens(tenant: str | None) -> Call:
        return Call("GET", "/v1/tokens", params=_clean({"tenant": tenant}))

    @staticmethod
    def revoke_token(ref: str, tenant: str | None) -> Call:
        return Call("DELETE", f"/v1/tokens/{_name(ref)}", params=_clean({"tenant": tenant}))


class Client:
    """Synchronous client. ``token``: a bearer token from ``clockctl token create``."""

    def __init__(
        self, url: str = DEFAULT_URL, token: str | None = None, *, timeout: float = 30.0, **httpx_options: Any
    ):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=timeout, **httpx_options)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def call(self, call: Call) -> Any:
        """Send one call; the decoded JSON answer (None for 204), or a typed ApiError."""
        response = self.http.request(call.method, call.path, params=call.params, json=call.json, headers=call.headers)
        raise_for(response)
        return response.json() if response.content else None

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, json: Any = None) -> Any:
        return self.call(Call(method, path, _clean(params or {}), json))

    def create(self, job: Mapping[str, Any], *, idempotency_key: str | None = None) -> Schedule:
        return Schedule.from_json(self.call(_Calls.create(job, idempotency_key)))

    def get(self, name: str) -> Schedule:
        return Schedule.from_json(self.call(_Calls.get(name)))

    def replace(self, name: str, job: Mapping[str, Any], *, if_match: int | str | None = None) -> Schedule:
        return Schedule.from_json(self.call(_Calls.replace(name, job, if_match)))

    def patch(self, name: str, changes: Mapping[str, Any], *, if_match: int | str | None = None) -> Schedule:
        return Schedule.from_json(self.call(_Calls.patch(name, changes, if_match)))

    def delete(self, name: str, *, if_match: int | str | None = None) -> None:
        self.call(_Calls.delete(name, if_match))

    def pause(self, name: str, reason: str | None = None) -> Schedule:
        return Schedule.from_json(self.call(_Calls.pause(name, reason)))

    def resume(self, name: str, from_: str = "now") -> Schedule:
        return Schedule.from_json(self.call(_Calls.resume(name, from_)))

    def run_now(self, name: str) -> Occurrence:
        return Occurrence.from_json(self.call(_Calls.run_now(name)))

    def preview(self, when: Mapping[str, Any], count: int = 10) -> list[Run]:
        """The next ``count`` runs of ``when`` (a job's ``schedule``, ``at`` or ``every``,
        ``tz`` and ``window`` fields; ``after``: from that instant rather than now), computed
        by the server; nothing is stored."""
        return _runs(self.call(_Calls.preview(when, count)))

    def pages(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of a paged list, following ``next_cursor`` one page at a time."""
        cursor = None
        while True:
            doc = self.request("GET", path, params={**params, "cursor": cursor})
            yield from doc["items"]
            cursor = doc.get("next_cursor")
            if not cursor:
                return

    def schedules(self, *, state: str | None = None, label: str | None = None, name_prefix: str | None = None,
                  page_size: int = 100) -> Iterator[Schedule]:  # fmt: skip
        for doc in self.pages("/v1/schedules", state=state, label=label, name_prefix=name_prefix, limit=page_size):
            yield Schedule.from_json(doc)

    def occurrences(self, *, schedule: str | None = None, state: str | None = None, since: str | None = None,
                    until: str | None = None, page_size: int = 100) -> Iterator[Occurrence]:  # fmt: skip
        params = {"schedule": schedule, "state": state, "since": since, "until": until, "limit": page_size}
        for doc in self.pages("/v1/occurrences", **params):
            yield Occurrence.from_json(doc)

    def dead_letters(self, *, schedule: str | None = None, page_size: int = 100) -> Iterator[Occurrence]:
        """The dead-letter queue (DEAD occurrences), most recently dead first."""
        for doc in self.pages("/v1/dlq", schedule=schedule, limit=page_size):
            yield Occurrence.from_json(doc)

    def audit(self, page_size: int = 100, *, tenant: str | None = None) -> Iterator[AuditEntry]:
        """The audit log newest first (an admin token; ``tenant``: another one, for a cluster-admin)."""
        for doc in self.pages("/v1/audit", limit=page_size, tenant=tenant):
            yield AuditEntry.from_json(doc)

    def create_token(self, role: str = "readonly", *, name: str | None = None, expires: str | None = None,
                     tenant: str | None = None) -> IssuedToken:  # fmt: skip
        """A new token of the caller's tenant (``tenant``: another one, for a cluster-admin);
        ``name`` defaults to the role, ``expires`` is a duration such as ``90d``."""
        return IssuedToken.from_json(self.call(_Calls.create_token(role, name, expires, tenant)))

    def tokens(self, *, tenant: str | None = None) -> list[Token]:
        return [Token.from_json(doc) for doc in self.call(_Calls.tokens(tenant))["items"]]

    def revoke_token(self, ref: str, *, tenant: str | None = None) -> Token:
        """Revoke a token of the tenant by id or name (NotFound: none live by that ref)."""
        return Token.from_json(self.call(_Calls.revoke_token(ref, tenant)))


class AsyncClient:
    """The same calls as :class:`Client`, awaited."""

    def __init__(
        self, url: str = DEFAULT_URL, token: str | None = None, *, timeout: float = 30.0, **httpx_options: Any
    ):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout, **httpx_options)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def call(self, call: Call) -> Any:
        response = await self.http.request(
            call.method, call.path, params=call.params, json=call.json, headers=call.headers
        )
        raise_for(response)
        return response.json() if response.content else None

    async def request(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None, json: Any = None
    ) -> Any:
        return await self.call(Call(method, path, _clean(params or {}), json))

    async def create(self, job: Mapping[str, Any], *, idempotency_key: str | None = None) -> Schedule:
        return Schedule.from_json(await self.call(_Calls.create(job, idempotency_key)))

    async def get(self, name: str) -> Schedule:
        return Schedule.from_json(await self.call(_Calls.get(name)))

    async def replace(self, name: str, job: Mapping[str, Any], *, if_match: int | str | None = None) -> Schedule:
        return Schedule.from_json(await self.call(_Calls.replace(name, job, if_match)))

    async def patch(self, name: str, changes: Mapping[str, Any], *, if_match: int | str | None = None) -> Schedule:
        return Schedule.from_json(await self.call(_Calls.patch(name, changes, if_match)))

    async def delete(self, name: str, *, if_match: int | str | None = None) -> None:
        await self.call(_Calls.delete(name, if_match))

    async def pause(self, name: str, reason: str | None = None) -> Schedule:
        return Schedule.from_json(await self.call(_Calls.pause(name, reason)))

    async def resume(self, name: str, from_: str = "now") -> Schedule:
        return Schedule.from_json(await self.call(_Calls.resume(name, from_)))

    async def run_now(self, name: str) -> Occurrence:
        return Occurrence.from_json(await self.call(_Calls.run_now(name)))

    async def preview(self, when: Mapping[str, Any], count: int = 10) -> list[Run]:
        """As :meth:`Client.preview`."""
        return _runs(await self.call(_Calls.preview(when, count)))

    async def pages(self, path: str, **params: Any) -> AsyncIterator[dict[str, Any]]:
        cursor = None
        while True:
            doc = await self.request("GET", path, params={**params, "cursor": cursor})
            for item in doc["items"]:
                yield item
            cursor = doc.get("next_cursor")
            if not cursor:
                return

    async def schedules(self, *, state: str | None = None, label: str | None = None, name_prefix: str | None = None,
                        page_size: int = 100) -> AsyncIterator[Schedule]:  # fmt: skip
        async for doc in self.pages(
            "/v1/schedules", state=state, label=label, name_prefix=name_prefix, limit=page_size
        ):
            yield Schedule.from_json(doc)

    async def occurrences(self, *, schedule: str | None = None, state: str | None = None,
                          page_size: int = 100) -> AsyncIterator[Occurrence]:  # fmt: skip
        async for doc in self.pages("/v1/occurrences", schedule=schedule, state=state, limit=page_size):
            yield Occurrence.from_json(doc)

    async def dead_letters(self, *, schedule: str | None = None, page_size: int = 100) -> AsyncIterator[Occurrence]:
        """As :meth:`Client.dead_letters`."""
        async for doc in self.pages("/v1/dlq", schedule=schedule, limit=page_size):
            yield Occurrence.from_json(doc)

    async def audit(self, page_size: int = 100, *, tenant: str | None = None) -> AsyncGenerator[AuditEntry, None]:
        """As :meth:`Client.audit`; a generator, so a caller that stops early may close it."""
        async for doc in self.pages("/v1/audit", limit=page_size, tenant=tenant):
            yield AuditEntry.from_json(doc)

    async def create_token(self, role: str = "readonly", *, name: str | None = None, expires: str | None = None,
                           tenant: str | None = None) -> IssuedToken:  # fmt: skip
        return IssuedToken.from_json(await self.call(_Calls.create_token(role, name, expires, tenant)))

    async def tokens(self, *, tenant: str | None = None) -> list[Token]:
        return [Token.from_json(doc) for doc in (await self.call(_Calls.tokens(tenant)))["items"]]

    async def revoke_token(self, ref: str, *, tenant: str | None = None) -> Token:
        return Token.from_json(await self.call(_Calls.revoke_token(ref, tenant)))
