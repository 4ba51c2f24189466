"""Runner port: run one attempt of a target and report what happened.

The worker owns leases, heartbeats and the store; a runner only runs. It never
raises for a job's failure: every outcome (success, exit code, signal, timeout,
could-not-start, stopped) comes back as a ``RunResult``.

Adapters: ``process`` (``CommandTarget``), ``http`` (``HttpTarget``), and
``dispatch``, which routes a request to one of them by target type (``NoopTarget``
succeeds at once). ``identity`` and ``limits`` hold what a command runs as and
with which resource limits; ``clockd.runner.secrets`` resolves secret references.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from clockd.core.model import AttemptOutcome, Target


@dataclass(frozen=True, slots=True)
class RunRequest:
    occurrence_id: str
    schedule_name: str
    scheduled_for: datetime
    attempt: int
    target: Target
    timeout: float | None = None  # seconds; None = no limit
    kill_grace: float = 10.0  # seconds between SIGTERM and SIGKILL
    output_limit: int = 64 * 1024  # bytes of combined stdout/stderr kept (the tail)
    tenant: str = "default"  # the schedule's tenant: allowed_users is checked against it


@dataclass(frozen=True, slots=True)
class RunResult:
    outcome: AttemptOutcome
    exit_code: int | None = None
    signal: int | None = None
    output: str = ""
    error: str | None = None
    duration: float = 0.0
    permanent: bool = False  # retrying cannot help (e.g. executable not found)
    retry_after: float | None = None  # seconds the target asked to wait (HTTP Retry-After)


class Runner(Protocol):
    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        """Run ``request.target``. When ``stop`` is set, terminate it (SIGTERM to the
        process group, SIGKILL after ``kill_grace``) and return ``STOPPED``."""
        ...
