"""What the API answers, as frozen dataclasses (unknown keys are kept in ``raw``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Run:
    at: str  # UTC, ISO 8601 with Z
    local: str  # in the schedule's zone, with its offset
    note: str | None  # DST: a repeated hour, or wall times a gap skipped


@dataclass(frozen=True, slots=True)
class Schedule:
    name: str
    id: str
    tenant: str
    version: int
    state: str
    job: dict[str, Any]  # the schedule-file job, secret references unresolved
    next_run_at: str | None
    next_runs: list[Run] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def etag(self) -> str:
        return f'"{self.version}"'

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Schedule:
        return cls(
            name=doc["name"],
            id=doc["id"],
            tenant=doc["tenant"],
            version=int(doc["version"]),
            state=doc["state"],
            job=dict(doc["job"]),
            next_run_at=doc.get("next_run_at"),
            next_runs=[Run(r["at"], r["local"], r.get("note")) for r in doc.get("next_runs", [])],
            raw=doc,
        )


@dataclass(frozen=True, slots=True)
class Occurrence:
    id: str
    schedule: str
    state: str
    scheduled_for: str
    attempts: int
    reason: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Occurrence:
        return cls(
            doc["id"], doc["schedule"], doc["state"], doc["scheduled_for"], int(doc["attempts"]), doc.get("reason"), doc
        )


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    at: str
    tenant: str
    actor: str
    action: str
    target: str
    before_version: int | None
    after_version: int | None
    detail: dict[str, Any] = field(default_factory=dict)  # e.g. the role of a token.create

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AuditEntry:
        return cls(
            int(doc["id"]), doc["at"], doc["tenant"], doc["actor"], doc["action"], doc["target"],
            doc.get("before_version"), doc.get("after_version"), dict(doc.get("detail") or {}),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Token:
    """A bearer token as listed: never the token itself (the store keeps only its hash)."""

    id: str
    tenant: str
    name: str
    role: str  # readonly, operator, admin, cluster-admin
    created_at: str
    expires_at: str | None
    revoked_at: str | None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Token:
        return cls(
            doc["id"], doc["tenant"], doc["name"], doc["role"], doc["created_at"],
            doc.get("expires_at"), doc.get("revoked_at"),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A new token: ``secret`` (the ``Authorization: Bearer`` value) is answered only once."""

    secret: str
    token: Token

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> IssuedToken:
        return cls(doc["token"], Token.from_json(doc))
