"""Runner port: run one attempt of a target and report what happened.

The worker owns leases, heartbeats and the store; a runner only runs. It never
raises for a job's failure: every outcome (success, exit code, signal, timeout,
could-not-start, stopped) comes back as a ``RunResult``.
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


@dataclass(frozen=True, slots=True)
class RunResult:
    outcome: AttemptOutcome
    exit_code: int | None = None
    signal: int | None = None
    output: str = ""
    error: str | None = None
    duration: float = 0.0
    permanent: bool = False  # retrying cannot help (e.g. executable not found)


class Runner(Protocol):
    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        """Run ``request.target``. When ``stop`` is set, terminate it (SIGTERM to the
        process group, SIGKILL after ``kill_grace``) and return ``STOPPED``."""
        ...
