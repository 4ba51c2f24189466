"""Dispatch runner: routes each request to the adapter for its target type.

``CommandTarget`` → ``ProcessRunner``, ``HttpTarget`` → ``HttpRunner``,
``NoopTarget`` → success at once (``settled``: without even a call of ``run``).
This is the runner ``clockd.wiring`` hands the worker; ``aclose`` releases the
HTTP connection pools at shutdown.
"""

from __future__ import annotations

import asyncio

from clockd.core.model import AttemptOutcome, CommandTarget, HttpTarget, NoopTarget, Target
from clockd.runner import Runner, RunRequest, RunResult

_SUCCEEDED = RunResult(AttemptOutcome.SUCCEEDED)  # frozen: one result serves every no-op


class DispatchRunner:
    def __init__(self, process: Runner, http: Runner) -> None:
        self.process, self.http = process, http

    def settled(self, target: Target) -> RunResult | None:
        """The result of ``target`` when nothing needs to run for it (a no-op), else None:
        the worker records it without starting a task (``clockd.modes.worker``)."""
        return _SUCCEEDED if isinstance(target, NoopTarget) else None

    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        target = request.target
        if isinstance(target, NoopTarget):
            return _SUCCEEDED
        if isinstance(target, HttpTarget):
            return await self.http.run(request, stop)
        if isinstance(target, CommandTarget):
            return await self.process.run(request, stop)
        return RunResult(  # pragma: no cover - the Target union is closed
            AttemptOutcome.ERROR, error=f"no runner for {type(target).__name__}", permanent=True
        )

    async def aclose(self) -> None:
        for runner in (self.process, self.http):
            close = getattr(runner, "aclose", None)
            if close is not None:
                await close()
