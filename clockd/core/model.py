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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any


class ScheduleKind(StrEnum):
    CRON = "cron"
    ONCE = "once"
    EVERY = "every"


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
    """Run a process. ``argv`` is never re-split; ``shell`` runs ``argv[0]`` via ``/bin/sh -c``."""

    argv: tuple[str, ...]
    shell: bool = False
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None

    kind = "command"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "command",
            "argv": list(self.argv),
            "shell": self.shell,
            "env": dict(self.env),
            "cwd": self.cwd,
        }

    def describe(self) -> str:
        if self.shell:
            return f"sh -c {json.dumps(self.argv[0])}"
        return " ".join(_quote(a) for a in self.argv)


@dataclass(frozen=True, slots=True)
class NoopTarget:
    """Does nothing and succeeds: for benchmarks and smoke tests."""

    kind = "noop"

    def to_json(self) -> dict[str, Any]:
        return {"type": "noop"}

    def describe(self) -> str:
        return "(noop)"


Target = CommandTarget | NoopTarget


def target_from_json(data: dict[str, Any]) -> Target:
    kind = data.get("type")
    if kind == "command":
        return CommandTarget(
            argv=tuple(str(a) for a in data["argv"]),
            shell=bool(data.get("shell", False)),
            env=tuple(sorted((str(k), str(v)) for k, v in (data.get("env") or {}).items())),
            cwd=data.get("cwd"),
        )
    if kind == "noop":
        return NoopTarget()
    raise ValueError(f"unknown target type {kind!r}")


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
