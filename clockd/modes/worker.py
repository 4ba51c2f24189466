"""Worker: claims due queue rows, runs their targets, records every attempt.

The claim (``Store.claim``) takes up to the free concurrency in one batch, each
row with a visibility lease (``lease_until``) and a fresh lease token. A lease is
held until its completion is recorded: completions waiting to be written beyond
one flush batch take concurrency too, so a worker holds at most ``concurrency +
flush_batch`` leases however slowly the store records them. While a
target runs, the heartbeat extends the leases of every held token in one batch
call; a token the store no longer knows was reaped (this worker was paused or
cut off past its lease), so that job is stopped — its completion would be
rejected anyway, because ``Store.finish`` is conditional on the token and a
newer attempt owns the occurrence.

Completions are buffered and written in batches. A completion that cannot be
written (database down, disk full) stays buffered and is retried with backoff;
its lease keeps being extended meanwhile, so nothing is redelivered while the
worker still knows the outcome. When the extension cannot be written either (the
disk is full), the lease may lapse: the leader's reaper holds off until the store has
written without error for one visibility timeout (``clockd.obs.health``), so the
heartbeat extends the same lease and the outcome is recorded as what it was.

Each run carries its schedule's tenant (looked up once per schedule version and
cached; only for targets whose runner checks ``allowed_users``), so the runner
can decide what the job may run as. A result's ``retry_after`` (an HTTP
``Retry-After``) pushes the next attempt to at least that far away.

The re-check before the side effect (DESIGN.md §3) is the claim itself: it moves
the occurrence ENQUEUED/RETRY_WAIT → RUNNING in the same transaction that leases
it, and cancellation (update, pause, delete) only touches occurrences no worker
has claimed. So a CANCELED occurrence is never handed out, and one of an older
version that was claimed before an update runs to the end under its version.
The claim also applies the overlap policy and the tenant caps (``Store.claim``):
what it hands out may start now.

Each run is logged at INFO, as cron and systemd do: ``run_started`` (schedule,
occurrence, attempt, what runs) and ``run_finished`` (outcome, exit code or HTTP
status, duration, and what comes next); an occurrence that goes DEAD is a warning
(``run_dead``). No-op targets (benchmarks) are not logged, and one the runner settles
without running anything (``DispatchRunner.settled``) is recorded as it is claimed,
with no task: its lease is held until the flush records it, like any other. Once the store has
accepted a completion, the schedule's notifications are handed to the
``Notifier`` (``clockd.runner.notify``), which sends them in the background.

Shutdown (``stopping`` set): no new claims; running jobs get ``drain_grace``
to finish, then are stopped (SIGTERM, then SIGKILL after ``kill_grace``) and
recorded as STOPPED and retried; the buffer is flushed, retried for at most
``record_grace`` (10 s) while the store fails. What is still unrecorded then is
logged (``unrecorded_at_shutdown``) and left to its lease: when the lease ends the
reaper retries those occurrences (at least once, never lost). The shipped units'
``TimeoutStopSec=50s`` is drain_grace + kill_grace + record_grace.

An idle worker reads ahead: while the next staged row is more than ``READ_AHEAD_MARGIN``
away it reads into the store's definition cache what the claims of the rows staged next
will take from their definitions (``Store.read_ahead_definitions``), a chunk of
``READ_AHEAD_CHUNK`` rows at a time, up to the last row staged; an idle turn a margin
later goes on from there (rows staged since), until the cache is full. A burst of
distinct schedules (a top-of-hour, an API client's jobs at 10:00) is then claimed
without reading a definition in the claim's transaction. It starts again from the head
of the queue once a claim has taken rows.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from clockd.core.clock import Clock
from clockd.core.model import AttemptOutcome, NoopTarget, OccurrenceState, RetryPolicy, Target
from clockd.core.planning import after_attempt
from clockd.errors import StoreError
from clockd.modes.base import Backoff, wait_or_stop
from clockd.modes.clockwatch import ClockWatch
from clockd.obs import metrics
from clockd.obs.health import STORE_WRITES
from clockd.runner import Runner, RunRequest, RunResult
from clockd.runner.notify import Notifier, Outcome
from clockd.store import Claim, Completion, QueuePosition, Store

log = logging.getLogger(__name__)


# Labelled children bound once: ``.labels()`` on every job cost 5–9 % of a busy worker's CPU.
_LAG_STARTED = metrics.schedule_lag.labels(step="started")
# Stands in for a success's retry policy, which ``after_attempt`` never reads.
_UNUSED_RETRY = RetryPolicy()
_ATTEMPTS = {outcome: metrics.attempts_total.labels(outcome=str(outcome)) for outcome in AttemptOutcome}
# Reading ahead stops this close to the next staged row's time (one chunk takes ~50-100 ms
# on PostgreSQL under load), and reads the definitions of this many queue rows per call.
READ_AHEAD_MARGIN = timedelta(seconds=1)
READ_AHEAD_CHUNK = 2_000


def _log_start(claim: Claim) -> None:
    if isinstance(claim.target, NoopTarget):
        return
    log.info(
        "run started: %s occurrence %s attempt %d: %s",
        claim.schedule_name,
        claim.occurrence_id,
        claim.attempt,
        claim.target.describe(),
        extra={
            "action": "run_started",
            "schedule": claim.schedule_name,
            "occurrence": claim.occurrence_id,
            "attempt": claim.attempt,
            "target": claim.target.describe(),
        },
    )


def _log_finish(claim: Claim, result: RunResult, state: OccurrenceState, error: str | None) -> None:
    if claim.target.kind == "http":
        status = f"status {result.exit_code}" if result.exit_code is not None else "no status"
    elif result.signal is not None:
        status = f"signal {result.signal}"
    else:
        status = f"exit code {result.exit_code}" if result.exit_code is not None else "no exit code"
    dead = state is OccurrenceState.DEAD
    log.log(
        logging.WARNING if dead else logging.INFO,
        "run %s: %s occurrence %s attempt %d: %s, %s, %.3fs%s",
        "dead" if dead else "finished",
        claim.schedule_name,
        claim.occurrence_id,
        claim.attempt,
        result.outcome.value,
        status,
        result.duration,
        f" -> {state.value}" + (f" ({error})" if error and state is not OccurrenceState.SUCCEEDED else ""),
        extra={
            "action": "run_dead" if dead else "run_finished",
            "schedule": claim.schedule_name,
            "occurrence": claim.occurrence_id,
            "attempt": claim.attempt,
            "outcome": result.outcome.value,
            "exit_code": result.exit_code,
            "signal": result.signal,
            "duration": round(result.duration, 3),
            "state": state.value,
        },
    )


def _outcome(claim: Claim, result: RunResult, state: OccurrenceState, error: str | None) -> Outcome:
    return Outcome(
        schedule_id=claim.schedule_id,
        version=claim.version,
        schedule_name=claim.schedule_name,
        occurrence_id=claim.occurrence_id,
        scheduled_for=claim.scheduled_for,
        state=state,
        attempt=claim.attempt,
        outcome=result.outcome,
        exit_code=result.exit_code,
        error=error,
        output=result.output,
    )


def default_worker_id() -> str:
    return f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    queues: tuple[str, ...] = ("default",)
    concurrency: int = field(default_factory=lambda: os.cpu_count() or 2)
    claim_batch: int = 500
    lease_for: timedelta = timedelta(seconds=30)
    heartbeat: float = 10.0
    poll: float = 0.1
    kill_grace: float = 10.0
    drain_grace: float = 30.0
    stop_on_lease_loss: bool = True
    output_limit: int = 64 * 1024
    flush_interval: float = 0.02
    flush_batch: int = 500
    record_grace: float = 10.0  # how long the shutdown flush retries a failing store
    worker_id: str = field(default_factory=default_worker_id)


@dataclass
class _Running:
    claim: Claim
    stop: asyncio.Event
    task: asyncio.Task[None] | None = None
    lease_lost: bool = False


class Worker:
    def __init__(
        self,
        store: Store,
        runner: Runner,
        clock: Clock,
        settings: WorkerSettings | None = None,
        rng: random.Random | None = None,
        clock_watch: ClockWatch | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.store, self.runner, self.clock = store, runner, clock
        # A claim takes what is due by this worker's clock: with a clock an hour fast it
        # would start jobs an hour early. While the watch says the clock is off, no claims.
        self.clock_watch = clock_watch
        self.notifier = notifier
        self._outcomes: dict[str, Outcome] = {}  # lease token -> what to notify once recorded
        self.settings = settings or WorkerSettings()
        self.rng = rng or random.Random()
        self.running: dict[str, _Running] = {}
        self.pending: list[Completion] = []
        self._pending_tokens: set[str] = set()
        self._flush_now = asyncio.Event()
        self._slot_free = asyncio.Event()
        self.completed = 0
        self._tenants: dict[tuple[str, int], str] = {}
        # Where reading ahead goes on (None: from the queue's head), and whether it is done
        # until the next claim that takes rows.
        self._read_ahead_after: QueuePosition | None = None
        self._read_ahead_done = False
        self._read_ahead_from: datetime | None = None  # not before (caught up with the queue)
        # The runner's result for a target that runs nothing, known without running it
        # (``DispatchRunner.settled``: a no-op); a runner without it runs every target.
        self._settled: Callable[[Target], RunResult | None] | None = getattr(runner, "settled", None)

    # -- the loops -------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        halt = asyncio.Event()  # stops heartbeat/flusher after the drain
        heartbeat = asyncio.create_task(self._heartbeat_loop(halt))
        flusher = asyncio.create_task(self._flush_loop(halt))
        try:
            await self._claim_loop(stopping)
            await self._drain()
        finally:
            halt.set()
            await asyncio.gather(heartbeat, flusher, return_exceptions=True)
            await self._flush_all()

    def _free_slots(self) -> int:
        """How many more claims this worker may take now. A lease is held from the claim
        until its completion is recorded, so completions waiting to be written count too,
        beyond one flush batch (written while the next claim runs): when the store records
        completions slower than jobs end (a noop flood, a slow disk, a database outage),
        the worker stops claiming instead of holding ever more leases, whose heartbeat and
        finish would grow with them and slow the store down further."""
        recording = max(0, len(self.pending) - self.settings.flush_batch)
        return self.settings.concurrency - len(self.running) - recording

    async def _claim_loop(self, stopping: asyncio.Event) -> None:
        backoff = Backoff()
        while not stopping.is_set():
            free = self._free_slots()
            if free <= 0:
                self._slot_free.clear()
                waiter = asyncio.create_task(self._slot_free.wait())
                stop_waiter = asyncio.create_task(stopping.wait())
                await asyncio.wait({waiter, stop_waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stop_waiter.cancel()
                continue
            if self.clock_watch is not None and not self.clock_watch.ok:
                if await wait_or_stop(stopping, self.settings.poll):
                    return
                continue
            asked_at = self.clock.now()
            try:
                claims = await self.store.claim(
                    self.settings.queues,
                    self.settings.worker_id,
                    min(free, self.settings.claim_batch),
                    self.settings.lease_for,
                    asked_at,
                )
                backoff.ok()
            except StoreError as exc:
                metrics.store_errors.labels(mode="worker").inc()
                log.warning("claim failed: %s", exc.message, extra={"action": "claim_failed"})
                if await wait_or_stop(stopping, backoff.failed()):
                    return
                continue
            if stopping.is_set():
                # Claimed but never started: give them back so nothing waits for a lease.
                await self._release([c.lease_token for c in claims])
                return
            now = self.clock.now()  # one reading per batch: the lag of claims taken together
            for claim in claims:
                self._start(claim, now)
            if claims:
                self._read_ahead_after, self._read_ahead_done, self._read_ahead_from = None, False, None
            if len(claims) == min(free, self.settings.claim_batch) and claims:
                await asyncio.sleep(0)
                continue
            wait = self.settings.poll if claims else await self._idle_wait(asked_at)
            if await wait_or_stop(stopping, wait):
                return

    async def _idle_wait(self, asked_at: datetime) -> float:
        """After a claim that found nothing: the poll, or less when a queued row becomes
        visible sooner — a run queued ahead of 10:00:00 starts at 10:00:00, not up to a
        poll later (``Store.next_visible``). Only when idle: a worker that claimed
        something waits its poll, so that under load its claims stay batches."""
        poll = self.settings.poll
        try:
            at = await self.store.next_visible(self.settings.queues, asked_at)
        except StoreError:
            return poll  # the next claim says what is wrong
        if at is None:
            return poll
        await self._read_ahead(at)
        return min(poll, max(0.0, (at - self.clock.now()).total_seconds()))

    async def _read_ahead(self, until: datetime) -> None:
        """Read ahead (see the module docstring) while ``until`` is more than the margin away:
        chunk after chunk up to the last row staged now; an idle turn a margin later goes on
        from there (the materializer may still be staging the burst), so an idle worker
        asks about once a second, not at every poll."""
        now = self.clock.now()
        if self._read_ahead_done or (self._read_ahead_from is not None and now < self._read_ahead_from):
            return
        while until - now > READ_AHEAD_MARGIN:
            try:
                done = await self.store.read_ahead_definitions(
                    self.settings.queues, self._read_ahead_after, now, READ_AHEAD_CHUNK
                )
            except StoreError:
                return  # an optimization: the next claim reads what it needs, and says what is wrong
            self._read_ahead_after = done.after
            self._read_ahead_done = done.room == 0
            now = self.clock.now()
            if done.looked_at < READ_AHEAD_CHUNK or self._read_ahead_done:
                self._read_ahead_from = now + READ_AHEAD_MARGIN
                return

    def _start(self, claim: Claim, now: datetime | None = None) -> None:
        """Start ``claim`` (``now``: when it was taken; default the clock's time)."""
        if now is None:
            now = self.clock.now()
        lag = (now - claim.scheduled_for).total_seconds()
        _LAG_STARTED.observe(max(0.0, lag))
        settled = self._settled(claim.target) if self._settled is not None else None
        if settled is not None:
            # Nothing runs (a no-op): recorded at once, without a task, an Event and a
            # request — they were most of a no-op's cost. Not in ``running`` either: no
            # await passes between the claim and the completion, so no heartbeat, drain
            # or gauge reading could have seen it there.
            self._record(claim, settled, now)
            return
        entry = _Running(claim=claim, stop=asyncio.Event())
        self.running[claim.lease_token] = entry
        metrics.running_jobs.set(len(self.running))
        entry.task = asyncio.create_task(self._run_one(entry))

    async def _tenant(self, claim: Claim) -> str | RunResult:
        """The tenant of the claim's schedule, or the result to record if it is unknown."""
        key = (claim.schedule_id, claim.version)
        tenant = self._tenants.get(key)
        if tenant is not None:
            return tenant
        try:
            schedule = await self.store.get_schedule_by_id(claim.schedule_id)
        except StoreError as exc:
            return RunResult(AttemptOutcome.ERROR, error=f"cannot look up the schedule's tenant: {exc.message}")
        if schedule is None:
            return RunResult(AttemptOutcome.ERROR, error="the schedule no longer exists", permanent=True)
        if len(self._tenants) >= 10_000:
            self._tenants.clear()
        self._tenants[key] = schedule.definition.tenant
        return schedule.definition.tenant

    async def _run_one(self, entry: _Running) -> None:
        claim = entry.claim
        tenant = "default"
        if not isinstance(claim.target, NoopTarget):
            found = await self._tenant(claim)
            if isinstance(found, RunResult):
                self._complete(entry, found)
                return
            tenant = found
        request = RunRequest(
            occurrence_id=claim.occurrence_id,
            schedule_name=claim.schedule_name,
            scheduled_for=claim.scheduled_for,
            attempt=claim.attempt,
            target=claim.target,
            timeout=claim.timeout.total_seconds() if claim.timeout else None,
            kill_grace=self.settings.kill_grace,
            output_limit=self.settings.output_limit,
            tenant=tenant,
        )
        _log_start(claim)
        try:
            result = await self.runner.run(request, entry.stop)
        except Exception as exc:  # a runner bug must not lose the occurrence
            log.exception("runner failed", extra={"action": "runner_crashed"})
            result = RunResult(outcome=AttemptOutcome.ERROR, error=f"runner crashed: {exc}")
        self._complete(entry, result)

    def _complete(self, entry: _Running, result: RunResult) -> None:
        claim = entry.claim
        self._record(claim, result, self.clock.now())
        self.running.pop(claim.lease_token, None)
        metrics.running_jobs.set(len(self.running))
        self._slot_free.set()

    def _record(self, claim: Claim, result: RunResult, now: datetime) -> None:
        """Buffer ``claim``'s completion for the flusher, log it and count it."""
        # A success ends the occurrence whatever the policy (after_attempt): not built then.
        retry = _UNUSED_RETRY
        if result.outcome is not AttemptOutcome.SUCCEEDED:
            retry = RetryPolicy(
                retries=claim.max_attempts - 1,
                backoff=claim.retry_backoff,
                backoff_max=claim.retry_backoff_max,
                permanent_exit_codes=claim.permanent_exit_codes,
            )
        decision_state: OccurrenceState
        retry_at: datetime | None
        reason: str | None
        if result.outcome is AttemptOutcome.STOPPED:
            # Interrupted by our own shutdown, not the job's fault: run it again at once.
            decision_state, retry_at, reason = OccurrenceState.RETRY_WAIT, now, None
        else:
            decision = after_attempt(
                result.outcome,
                claim.attempt,
                claim.max_attempts,
                retry,
                result.exit_code,
                result.permanent,
                now,
                self.rng.random(),
            )
            decision_state, retry_at, reason = (
                decision.next_state,
                decision.retry_at,
                decision.reason,
            )
            if retry_at is not None and result.retry_after is not None:
                retry_at = max(retry_at, now + timedelta(seconds=result.retry_after))
        error = result.error
        if reason and decision_state is OccurrenceState.DEAD:
            error = f"{error}; {reason}" if error else reason
        self.pending.append(
            Completion(
                lease_token=claim.lease_token,
                outcome=result.outcome,
                next_state=decision_state,
                retry_at=retry_at,
                exit_code=result.exit_code,
                signal=result.signal,
                output=result.output,
                error=error,
            )
        )
        self._pending_tokens.add(claim.lease_token)
        if not isinstance(claim.target, NoopTarget):
            _log_finish(claim, result, decision_state, error)
            if self.notifier is not None:
                self._outcomes[claim.lease_token] = _outcome(claim, result, decision_state, error)
        _ATTEMPTS[result.outcome].inc()
        if decision_state is OccurrenceState.RETRY_WAIT:
            metrics.retries_total.inc()
        elif decision_state is OccurrenceState.DEAD:
            metrics.dead_total.inc()
        if len(self.pending) >= self.settings.flush_batch:
            self._flush_now.set()

    async def _flush_loop(self, halt: asyncio.Event) -> None:
        backoff = Backoff(first=0.1, cap=5.0)
        while not halt.is_set():
            try:
                await asyncio.wait_for(self._flush_now.wait(), timeout=self.settings.flush_interval)
            except TimeoutError:
                pass
            self._flush_now.clear()
            try:
                await self._flush_once()
                backoff.ok()
                if not self.pending:
                    STORE_WRITES.ok("worker")
            except StoreError as exc:
                metrics.store_errors.labels(mode="worker").inc()
                STORE_WRITES.failed("worker", exc.message)
                log.error(
                    "cannot record %d attempt(s), will retry: %s",
                    len(self.pending),
                    exc.message,
                    extra={"action": "record_failed"},
                )
                await wait_or_stop(halt, backoff.failed())

    async def _flush_once(self) -> None:
        if not self.pending:
            return
        batch = self.pending[: self.settings.flush_batch]
        accepted = await self.store.finish(batch, self.clock.now())
        del self.pending[: len(batch)]
        self._slot_free.set()  # recorded completions free their leases (_free_slots)
        self._pending_tokens.difference_update([c.lease_token for c in batch])
        outcomes = self._outcomes
        for completion in batch:
            token = completion.lease_token
            outcome = outcomes.pop(token, None) if outcomes else None
            if token in accepted:
                if outcome is not None and self.notifier is not None:
                    self.notifier.notify(outcome)
            else:
                metrics.stale_completions.inc()
                log.warning(
                    "completion rejected: lease token is stale (a newer attempt owns the occurrence)",
                    extra={"action": "stale_completion"},
                )
        self.completed += len(accepted)

    async def _flush_all(self) -> None:
        """Record what is left, retrying a failing store for ``record_grace`` at most:
        a stop must end within the unit's TimeoutStopSec, and an unrecorded completion is
        not lost (its lease ends and the reaper retries the occurrence)."""
        backoff = Backoff(first=0.1, cap=2.0)
        deadline = asyncio.get_running_loop().time() + self.settings.record_grace
        while self.pending:
            try:
                async with asyncio.timeout_at(deadline):
                    await self._flush_once()
                continue
            except StoreError as exc:
                log.error(
                    "cannot record attempts at shutdown: %s",
                    exc.message,
                    extra={"action": "record_failed"},
                )
            except TimeoutError:
                pass
            pause = min(backoff.failed(), deadline - asyncio.get_running_loop().time())
            if pause <= 0:
                break
            await asyncio.sleep(pause)
        if self.pending:
            log.warning(
                "stopping with %d completion(s) unrecorded after %.0fs; their occurrences are"
                " retried when their leases end",
                len(self.pending),
                self.settings.record_grace,
                extra={"action": "unrecorded_at_shutdown", "completions": len(self.pending)},
            )

    async def _heartbeat_loop(self, halt: asyncio.Event) -> None:
        while not await wait_or_stop(halt, self.settings.heartbeat):
            tokens = list(self.running) + list(self._pending_tokens)
            if not tokens:
                continue
            try:
                held = await self.store.extend_leases(tokens, self.settings.lease_for, self.clock.now())
            except StoreError as exc:
                STORE_WRITES.failed("worker", exc.message)
                log.warning("heartbeat failed: %s", exc.message, extra={"action": "heartbeat_failed"})
                continue
            for token in tokens:
                entry = self.running.get(token)
                if token in held or entry is None or entry.lease_lost:
                    continue
                entry.lease_lost = True
                log.warning(
                    "lease lost for occurrence %s; %s",
                    entry.claim.occurrence_id,
                    "stopping the job" if self.settings.stop_on_lease_loss else "letting it finish",
                    extra={"action": "lease_lost", "occurrence": entry.claim.occurrence_id},
                )
                if self.settings.stop_on_lease_loss:
                    entry.stop.set()

    async def _drain(self) -> None:
        tasks = [e.task for e in self.running.values() if e.task is not None]
        if not tasks:
            return
        log.info(
            "waiting up to %.0fs for %d running job(s)",
            self.settings.drain_grace,
            len(tasks),
            extra={"action": "drain_started", "running": len(tasks)},
        )
        _, still = await asyncio.wait(tasks, timeout=self.settings.drain_grace)
        if still:
            log.warning(
                "stopping %d job(s) still running after the drain grace",
                len(still),
                extra={"action": "drain_timeout", "running": len(still)},
            )
            for entry in list(self.running.values()):
                entry.stop.set()
            await asyncio.wait(still)

    async def _release(self, tokens: list[str]) -> None:
        if not tokens:
            return
        try:
            await self.store.release(tokens, self.clock.now())
        except StoreError as exc:
            log.warning(
                "could not release %d claim(s); they return after their lease: %s",
                len(tokens),
                exc.message,
                extra={"action": "release_failed"},
            )
