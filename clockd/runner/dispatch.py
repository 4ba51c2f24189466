"""Dispatch runner: routes each request to the adapter for its target type.

``CommandTarget`` → ``ProcessRunner``, ``HttpTarget`` → ``HttpRunner``,
``NoopTarget`` → success at once. This is the runner ``clockd.wiring`` hands the
worker; ``aclose`` releases the HTTP connection pools at shutdown.
"""

from __future__ import annotations

import asyncio

from clockd.core.model import AttemptOutcome, CommandTarget, HttpTarget, NoopTarget
from clockd.runner import Runner, RunRequest, RunResult


class DispatchRunner:
    def __init__(self, process: Runner, http: Runner) -> None:
        self.process, self.http = process, http

    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        target = request.target
        if isinstance(target, NoopTarget):
            return RunResult(AttemptOutcome.SUCCEEDED)
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
