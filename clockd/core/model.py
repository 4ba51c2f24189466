"""The data model: Schedule → Occurrence → Attempt (DESIGN.md §1), as frozen values.

Occurrence states::

    SCHEDULED → ENQUEUED → RUNNING → SUCCEEDED
                              │  └──→ RETRY_WAIT → (claimed again) RUNNING
                              └────→ DEAD          (retries exhausted, or permanent error)
    side states: MISSED, SKIPPED_OVERLAP, CANCELED

Every transition is one conditional write in the store; this module only names
the states and carries the values.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from clockd.core.notify import Notification


class ScheduleKind(StrEnum):
    CRON = "cron"
    ONCE = "once"
    EVERY = "every"


# The schedule-file (and API) field each kind of schedule is written in.
WHEN_FIELD: dict[ScheduleKind, str] = {
    ScheduleKind.CRON: "schedule",
    ScheduleKind.ONCE: "at",
    ScheduleKind.EVERY: "every",
}


class ScheduleState(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    DELETED = "deleted"


class OccurrenceState(StrEnum):
    SCHEDULED = "SCHEDULED"
    ENQUEUED = "ENQUEUED"
    RUNNING = "RUNNING"
    RETRY_WAIT = "RETRY_WAIT"
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"
    MISSED = "MISSED"
    SKIPPED_OVERLAP = "SKIPPED_OVERLAP"
    CANCELED = "CANCELED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {
        OccurrenceState.SUCCEEDED,
        OccurrenceState.DEAD,
        OccurrenceState.MISSED,
        OccurrenceState.SKIPPED_OVERLAP,
        OccurrenceState.CANCELED,
    }
)


class AttemptOutcome(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # non-zero exit or killed by a signal
    TIMED_OUT = "timed_out"  # exceeded the schedule's timeout; process group killed
    LOST = "lost"  # the worker's lease expired (crash, pause, partition)
    ERROR = "error"  # could not be started (missing executable, bad cwd, …): permanent
    STOPPED = "stopped"  # stopped at shutdown after the drain grace


class MisfirePolicy(StrEnum):
    SKIP = "skip"
    FIRE_ONCE = "fire_once"
    CATCH_UP = "catch_up"


class OverlapPolicy(StrEnum):
    ALLOW = "allow"
    SKIP = "skip"
    QUEUE_ONE = "queue_one"


@dataclass(frozen=True, slots=True)
class CommandTarget:
    """Run a process. ``argv`` is never re-split; ``shell`` runs ``argv[0]`` via ``/bin/sh -c``.

    ``env`` values may hold secret references (``${file:/path}``, ``${env:NAME}``)
    and ``env_from_file`` names a ``KEY=VALUE`` file: both are resolved by the
    worker at run time (``clockd.runner.secrets``), never stored resolved. ``user`` /
    ``group``: the identity the job runs as (a root worker switches to it; the
    daemon's ``allowed_users`` decides which tenant may use which user).
    Limits are per process, applied with ``setrlimit`` before ``exec``:
    ``memory_limit`` (bytes of address space, RLIMIT_AS), ``cpu_limit`` (CPU
    seconds, RLIMIT_CPU), ``nproc_limit`` (processes of the job's user, RLIMIT_NPROC).
    ``stdin``: text written to the job's standard input, then closed (None: ``/dev/null``);
    an imported crontab line's text after ``%`` lands here.

    JSON: the original keys always; each newer key only when it is set, so a
    target written without them reads back (and re-encodes) unchanged.
    """

    argv: tuple[str, ...]
    shell: bool = False
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    user: str | None = None
    group: str | None = None
    env_from_file: str | None = None
    memory_limit: int | None = None
    cpu_limit: int | None = None
    nproc_limit: int | None = None
    stdin: str | None = None

    kind = "command"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "type": "command",
            "argv": list(self.argv),
            "shell": self.shell,
            "env": dict(self.env),
            "cwd": self.cwd,
        }
        for key in _COMMAND_OPTIONAL:
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        return data

    def describe(self) -> str:
        if self.shell:
            text = f"sh -c {json.dumps(self.argv[0])}"
        else:
            text = " ".join(_quote(a) for a in self.argv)
        if self.user:
            text += f" (as {self.user}{':' + self.group if self.group else ''})"
        return text


_COMMAND_OPTIONAL = ("user", "group", "env_from_file", "memory_limit", "cpu_limit", "nproc_limit", "stdin")


@dataclass(frozen=True, slots=True)
class HttpTarget:
    """Send one HTTP request. Success: a status in ``expect_status`` (default: any 2xx).

    Every request carries ``Idempotency-Key: <occurrence id>`` (the same on every
    attempt) and ``X-Clockd-Scheduled-For``. ``headers`` keep their order and
    duplicates; their values may hold secret references, resolved by the worker.
    ``body`` is sent as given (UTF-8). ``insecure`` turns TLS verification off.
    The schedule's ``timeout`` bounds the whole exchange.
    """

    method: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    body: str | None = None
    expect_status: tuple[int, ...] = ()
    insecure: bool = False

    kind = "http"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "http",
            "method": self.method,
            "url": self.url,
            "headers": [[k, v] for k, v in self.headers],
            "body": self.body,
            "expect_status": list(self.expect_status),
            "insecure": self.insecure,
        }

    def describe(self) -> str:
        return f"{self.method} {redact_url(self.url)}"


@dataclass(frozen=True, slots=True)
class NoopTarget:
    """Does nothing and succeeds: for benchmarks and smoke tests."""

    kind = "noop"

    def to_json(self) -> dict[str, Any]:
        return {"type": "noop"}

    def describe(self) -> str:
        return "(noop)"


Target = CommandTarget | HttpTarget | NoopTarget

# Headers every HTTP request gets from clockd; a target cannot set them.
RESERVED_HEADERS = frozenset({"idempotency-key", "x-clockd-scheduled-for", "x-clockd-attempt"})


def target_from_json(data: dict[str, Any]) -> Target:
    kind = data.get("type")
    if kind == "command":
        return CommandTarget(
            argv=tuple(str(a) for a in data["argv"]),
            shell=bool(data.get("shell", False)),
            env=tuple(sorted((str(k), str(v)) for k, v in (data.get("env") or {}).items())),
            cwd=data.get("cwd"),
            user=_opt_str(data.get("user")),
            group=_opt_str(data.get("group")),
            env_from_file=_opt_str(data.get("env_from_file")),
            memory_limit=_opt_int(data.get("memory_limit")),
            cpu_limit=_opt_int(data.get("cpu_limit")),
            nproc_limit=_opt_int(data.get("nproc_limit")),
            stdin=_opt_str(data.get("stdin")),
        )
    if kind == "http":
        body = data.get("body")
        return HttpTarget(
            method=str(data["method"]),
            url=str(data["url"]),
            headers=tuple((str(k), str(v)) for k, v in data.get("headers") or ()),
            body=None if body is None else str(body),
            expect_status=tuple(int(c) for c in data.get("expect_status") or ()),
            insecure=bool(data.get("insecure", False)),
        )
    if kind == "noop":
        return NoopTarget()
    raise ValueError(f"unknown target type {kind!r}")


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


_USERINFO_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/?#@:]*):[^/?#@]*@")
_SENSITIVE_QUERY = re.compile(r"(?i)([?&][^=&#]*(?:pass|secret|token|key|auth|sig|credential)[^=&#]*=)[^&#]*")


def redact_url(url: str) -> str:
    """The URL with a userinfo password and secret-looking query values replaced by ``***``."""
    url = _USERINFO_PASSWORD.sub(r"\1:***@", url)
    return _SENSITIVE_QUERY.sub(r"\1***", url)


def _quote(arg: str) -> str:
    if arg and all(c.isalnum() or c in "-_./=:,@%+" for c in arg):
        return arg
    return json.dumps(arg)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``retries`` further attempts after the first, exponential backoff with full jitter."""

    retries: int = 2
    backoff: timedelta = timedelta(seconds=10)
    backoff_max: timedelta = timedelta(minutes=10)
    permanent_exit_codes: tuple[int, ...] = ()

    def delay(self, attempt: int, jitter: float) -> timedelta:
        """Delay before the attempt after ``attempt`` (1-based); ``jitter`` in [0, 1).

        Full jitter (AWS architecture blog): uniform in [0, min(max, base·2^(n-1))],
        so retries of many failing jobs do not synchronise.
        """
        ceiling = min(self.backoff_max, self.backoff * (1 << min(max(0, attempt - 1), 30)))
        return ceiling * jitter

    @property
    def max_attempts(self) -> int:
        return self.retries + 1


@dataclass(frozen=True, slots=True)
class ScheduleDef:
    """What the user asked for. Changing any of it makes a new version."""

    name: str
    kind: ScheduleKind
    expr: str  # cron expression; ISO instant (UTC) for once; duration for every
    tz: str
    target: Target
    queue: str = "default"
    tenant: str = "default"
    timeout: timedelta | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    max_lateness: timedelta = timedelta(minutes=10)
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    window: timedelta = timedelta(0)
    labels: tuple[tuple[str, str], ...] = ()
    # misfire catch_up: at most this many late instants run (the most recent ones).
    catch_up_limit: int = 10
    # What to tell, and whom, on an outcome (clockd.core.notify), in the events' order.
    notify: tuple[Notification, ...] = ()


@dataclass(frozen=True, slots=True)
class Schedule:
    id: str
    version: int
    state: ScheduleState
    definition: ScheduleDef
    next_run_at: datetime | None  # UTC cursor: the next instant not yet materialized
    shard: int
    created_at: datetime  # also the anchor of ``every`` schedules
    updated_at: datetime
    paused_at: datetime | None = None

    @property
    def name(self) -> str:
        return self.definition.name


@dataclass(frozen=True, slots=True)
class Occurrence:
    id: str
    schedule_id: str
    schedule_name: str
    version: int
    scheduled_for: datetime
    available_at: datetime
    state: OccurrenceState
    attempts: int
    queue: str
    manual: bool = False
    enqueued_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    reason: str | None = None
    last_error: str | None = None  # the last attempt's error (kept on DEAD: the dead letter)


@dataclass(frozen=True, slots=True)
class Attempt:
    occurrence_id: str
    number: int
    lease_token: str
    worker_id: str
    started_at: datetime
    outcome: AttemptOutcome
    finished_at: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    output: str = ""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """Per-tenant caps (DESIGN.md §4 "concurrency"); None = no limit.

    * ``max_schedules``: live (active or paused) schedules; a create over it is refused.
    * ``max_running``: occurrences RUNNING at once; more wait in the queue.
    * ``max_triggers_per_minute``: claims (attempts started) per calendar minute (UTC);
      more wait in the queue until the next minute.
    * ``catch_up_rate``: late instants that misfire ``catch_up`` lets run, per minute;
      the materializer spaces them out (``available_at``) at this rate.
    """

    tenant: str
    max_schedules: int | None = None
    max_running: int | None = None
    max_triggers_per_minute: int | None = None
    catch_up_rate: int | None = None


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """A tenant's limits and what it uses now (``clockctl tenant list``)."""

    limits: TenantLimits
    schedules: int  # live schedules
    running: int  # RUNNING occurrences (leased runs)
