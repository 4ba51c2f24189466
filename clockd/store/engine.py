"""``SqlStore``: the ``Store`` port implemented once, over a dialect driver.

Every rule of the store lives here: input and state checks, the fence step, ``Claim``
construction and the definition cache, schedule-write workflows (``_change_schedule``,
``apply_schedules``, the quota arithmetic), DEAD and lease-lost reasons, the misfire
verdicts, finish validation, lease tokens. Each method builds its parameters, then hands
the driver one transaction *body* (``clockd.store.driver``): a generator that yields
named steps of the dialect's ``queries.sql`` and receives their rows. The driver owns
the connection, the value encoding and the error translation; the SQL owns the
set-based work. The rules a statement applies — state names (``clockd.core.states``),
policy defaults (``clockd.core.model``), reason texts — travel as parameters.

How sync ``sqlite3`` and async psycopg meet: the body is a plain generator, so the
SQLite driver runs the *whole* body on its one dedicated thread (one
``run_in_executor`` hop per transaction, as before) and the PostgreSQL driver runs it on
the event loop, awaiting each statement (and sending a ``Pipeline`` in one round trip).
Neither pays a hop per statement. Measured before and after (``make bench-quick``, and
an A/B of the same workload through the old and the new tree, alternating: median
new/old per phase 0.76–1.11 on SQLite, 0.89–1.07 on PostgreSQL, all within run-to-run
noise on the shared machine; re-measured after SQLite's 0008 with ``bench/store_ab.py``;
docs/store.md has the tables).

Adding a store method: one method here (a body yielding ``Run("name", …)``), one
``-- name: name`` block in each dialect's ``queries.sql``, and, if the schema changes,
one migration with the same number in both ``migrations/`` folders.
``tests/contract/store/test_sql_parity.py`` checks that every name the engine and the
drivers run exists in both files and that no block is left that nobody runs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from clockd.core import states
from clockd.core.model import (
    Attempt,
    AttemptOutcome,
    MisfirePolicy,
    NoopTarget,
    Occurrence,
    OccurrenceState,
    OverlapPolicy,
    Schedule,
    ScheduleDef,
    ScheduleKind,
    ScheduleState,
    TenantLimits,
    TenantUsage,
)
from clockd.core.planning import MAX_WINDOW, DueSchedule, missed_reason, plan_instants, sweep_verdict
from clockd.core.spec import compile_spec, fires_at
from clockd.errors import ClockdError, Conflict, FencedOut, NotFound, QuotaExceeded, StorePermissionDenied
from clockd.store import (
    SUMMARY_DEPTH,
    ApiToken,
    AppliedSchedules,
    AuditEntry,
    Backlog,
    Claim,
    Completion,
    CursorAdvance,
    Fence,
    LagHistogram,
    LagStats,
    LateRow,
    MaterializeResult,
    Missed,
    NewOccurrence,
    NewSchedule,
    OccurrencePage,
    QueuePosition,
    QueueReady,
    QueueStats,
    ReadAhead,
    Reaped,
    ReconcileRows,
    Relayed,
    Replanned,
    RunSummary,
    ScheduleChange,
    ScheduleChanged,
    ScheduleHistory,
    SchedulePage,
)
from clockd.store.api_rows import (
    audit_from_row,
    audit_params,
    occurrence_page_params,
    schedule_page_params,
    schedule_page_query,
    token_conflict_message,
    token_from_row,
    token_params,
)
from clockd.store.codec import (
    ClaimParts,
    attempt_from_row,
    claim_parts,
    definition_from_dict,
    definition_json,
    definition_texts,
    due_from_rows,
    histories_from_rows,
    minute_of,
    occurrence_from_row,
    schedule_from_row,
    spec_json,
)
from clockd.store.definition_cache import DefinitionCache
from clockd.store.driver import Body, ClaimRequest, Driver, Integrity, Pipeline, Run, Stream

log = logging.getLogger(__name__)

S = OccurrenceState
# The audit entries waiting for the current task's next write (``SqlStore.audited``).
_AUDIT: ContextVar[list[Callable[[Any], AuditEntry | None]] | None] = ContextVar("clockd_store_audit", default=None)
# Creates per statement in apply_schedules: 20,000 in a few statements of a few MB each.
_APPLY_BATCH: Final = 5000
# The columns of the driver's ``schedules_insert`` rows, in order (SQLite: the JSON
# arrays' positions).
_CREATE_COLUMNS: Final = (
    "ids", "tenants", "names", "kinds", "exprs", "tzs", "queues", "next_run_at", "shards", "specs", "definitions",
)  # fmt: skip
# The weeks of history partitions (PostgreSQL schema 0017) each prune makes sure exist:
# from the week a week back (a catch-up plans past instants) to the one two weeks ahead
# (the leader prunes hourly by default: a week's partition exists long before its first
# instant is planned, and a planning horizon is minutes).
HISTORY_BEHIND: Final = timedelta(days=7)
HISTORY_AHEAD: Final = timedelta(days=14)
# Leader's misfire sweep: rows waiting less than this are not even looked at.
_MISFIRE_FLOOR: Final = timedelta(seconds=1)
_END_OF_TIME: Final = datetime.max.replace(tzinfo=UTC)
_FINISH_STATES = states.targets("finish")
_PLANNED_STATES = states.targets("materialize")
# Names the SQL writes besides the conditional writes' expected/next (one source: core).
# release: back to ENQUEUED before the first attempt ran, else RETRY_WAIT (states "release";
# tests/contract/store/test_sql_parity.py checks both against the table).
_RELEASED: Final = {"fresh": S.ENQUEUED.value, "again": S.RETRY_WAIT.value}
_OUTCOMES: Final = {"attempt_running": AttemptOutcome.RUNNING.value, "attempt_lost": AttemptOutcome.LOST.value}
# A queue row carrying this policy (schema 0019) was claimed without an overlap slot, so
# its finish has no slot to release (NULL, a row written before 0019, may hold one).
_ALLOW: Final = OverlapPolicy.ALLOW.value
_ENQUEUED: Final = states.target("relay").value  # what staging writes (relay or direct dispatch)
_OCCURRENCE_COLUMNS: Final = ("ids", "schedule_ids", "versions", "tenants", "queues", "scheduled_for",
                              "available_at", "states", "max_attempts", "reasons", "finished_at",
                              "overlaps")  # fmt: skip

# -- reasons users read (clockctl show / explain) -------------------------------------------

LEASE_LOST: Final = "lease expired (worker crashed, paused or partitioned)"
# Templates the SQL fills in with replace(): {running}, {waiting}, {attempt}, {max_attempts}.
LEASE_LOST_DEAD: Final = "lease expired on attempt {attempt} of {max_attempts} (worker crashed, paused or partitioned)"
OVERLAP_PARKED: Final = "waiting for occurrence {running} to finish (overlap queue_one)"
OVERLAP_QUEUE_FULL: Final = (
    "skipped: occurrence {running} is running and {waiting} is already waiting (overlap queue_one)"
)
OVERLAP_SKIPPED: Final = "skipped: occurrence {running} is still running (overlap skip)"
# Appended to a change's reason on the occurrences it canceled and re-planned (_replan).
REPLANNED: Final = "re-planned under version {version}"
DROPPED: Final = "version {version} does not fire at this instant"


def _apply_batches(total: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of apply_schedules' create batches: from a tenth of ``_APPLY_BATCH``,
    doubling up to it. ``Ops.apply`` plans the creates as the store reads them and plans
    ahead while the database writes; the first batch waits on its whole plan, which at
    5,000 creates was 7-10 µs of every create of a 20,000-create apply."""
    size, start = max(1, _APPLY_BATCH // 10), 0
    while start < total:
        stop = min(total, start + size)
        yield start, stop
        start, size = stop, min(_APPLY_BATCH, size * 2)


def dead_reason(completion: Completion, attempt: int) -> str:
    """Why an occurrence ended DEAD: the worker's error, or which attempt ended how."""
    if completion.error:
        return completion.error
    code = f" (exit code {completion.exit_code})" if completion.exit_code is not None else ""
    return f"attempt {attempt} {completion.outcome.value}{code}"


def _kept_on_occurrence(completion: Completion, attempt: int) -> bool:
    """Whether an ending attempt's record is its occurrence row instead of an ``attempts``
    row (schema 0013, issue 18: one insert fewer per run, ~a tenth of the database's time
    per execution): the first attempt, succeeded, nothing printed, no signal, no error.
    Then the row already holds all of it — state SUCCEEDED, attempts 1, started_at (the
    first claim's ``now``, which is also the lease's ``leased_at``), finished_at,
    exit_code — but the worker, which the finish writes to ``inline_attempt_worker``;
    ``attempt_history`` (a view) and ``attempts_list`` show it as attempt 1. An output
    stays out of the occurrence row: a long one would move its update off its page (no
    HOT update, an entry in every index). A 'running' row written by a clockd before
    schema 0005 (PostgreSQL) / 0008 (SQLite) is never finished here: only the process
    that claimed a lease holds its token, and this code's claims write no such row."""
    return (
        attempt == 1
        and completion.outcome is AttemptOutcome.SUCCEEDED
        and completion.next_state is S.SUCCEEDED
        and not completion.output
        and completion.signal is None
        and completion.error is None
    )


def misfire_verdicts(rows: Sequence[LateRow], now: datetime) -> list[Missed]:
    """The rows the misfire policy turns MISSED, each with its reason."""
    missed: list[Missed] = []
    for row in rows:
        policy = MisfirePolicy(row.policy)
        if sweep_verdict(policy, row.newest_rank, row.catch_up_limit, row.newer_due):
            reason = missed_reason(now - row.claimable_since, row.max_lateness, policy)
            missed.append(Missed(row.dispatch_id, row.occurrence_id, reason + "; no worker reached it in time"))
    return missed


def schedule_quota_message(tenant: str, limit: int) -> str:
    return (
        f"tenant {tenant} is at its limit of {limit} active schedules (paused ones count too); "
        f"remove one, or raise it with clockctl tenant set {tenant} --max-schedules N"
    )


def creates_by_tenant(batch: Sequence[NewSchedule]) -> Counter[str]:
    """How many of ``batch``'s creates go to each tenant (the batched quota check)."""
    return Counter(new.definition.tenant for new in batch)


def within_quota(wanted: Mapping[str, int], room: Mapping[str, int]) -> bool:
    """Whether every tenant with a ``max_schedules`` stays within it when its ``wanted``
    creates are made, ``room`` being the places each such tenant has left (tenants without
    a limit are not in it): false exactly when creating them one by one would raise
    ``QuotaExceeded`` (``apply_schedules``' batches)."""
    return all(wanted[tenant] <= left for tenant, left in room.items() if tenant in wanted)


def _streamable_batch(batch: Sequence[NewSchedule], wanted: Mapping[str, int], room: Mapping[str, int]) -> bool:
    """Whether ``_stream_creates`` may send ``batch`` in its stream: more than one create
    (a single one is written by the single create's statements) and within every limit
    (``wanted``: its creates by tenant; else row by row names the one over it)."""
    return len(batch) > 1 and within_quota(wanted, room)


def _take_room(room: dict[str, int], wanted: Mapping[str, int]) -> None:
    """Take ``wanted`` creates off the ``room`` of the tenants that have a limit."""
    for tenant in room.keys() & wanted.keys():
        room[tenant] -= wanted[tenant]


def idempotency_conflict_message(key: str, tenant: str) -> str:
    return f"idempotency key {key!r} is already used by another schedule of tenant {tenant!r}"


def not_dead_message(occurrence: Occurrence) -> str:
    return (
        f"occurrence {occurrence.id} is not in the dead-letter queue (state {occurrence.state}); "
        "only DEAD occurrences can be replayed or dropped"
    )


def name_taken(definition: ScheduleDef) -> Conflict:
    return Conflict(f"schedule {definition.name!r} already exists in tenant {definition.tenant!r}")


def new_tokens(count: int) -> list[str]:
    """``count`` fresh lease tokens, from one read of the OS generator: a claim asks for
    as many as it may start. 32 hex digits: the clock's milliseconds (12), then 80 random
    bits (20). The time first puts each claim's tokens at the right edge of the store's
    lease-token index (SQLite's dispatch_lease_token; PostgreSQL's claim_batches_pkey, whose
    batches take the first token of each claim) instead of at random leaves, as UUIDv7 does
    for keys; uniqueness rests on the random part (a collision among the tokens of one
    millisecond needs ~2^40 of them), and ordering is all the clock is used for."""
    stamp = f"{time.time_ns() // 1_000_000 % (1 << 48):012x}"
    blob = os.urandom(10 * count).hex()
    return [stamp + blob[20 * i : 20 * (i + 1)] for i in range(count)]


def policy_rules() -> dict[str, Any]:
    """The claim's and the sweep's rules as parameters: defaults from core's model, reason
    templates and state names from here and ``clockd.core.states``."""
    default = _default_definition()
    return {
        "default_overlap": default.overlap.value,
        "default_misfire": default.misfire.value,
        "default_max_lateness_us": default.max_lateness // timedelta(microseconds=1),
        "default_catch_up_limit": default.catch_up_limit,
        "overlap_parked": OVERLAP_PARKED,
        "overlap_queue_full": OVERLAP_QUEUE_FULL,
        "overlap_skipped": OVERLAP_SKIPPED,
        "skipped_state": states.target("overlap_skip").value,
        "running_state": states.target("claim").value,
    }


def _default_definition() -> ScheduleDef:
    """A definition with every policy at its default (core/model.py)."""
    return ScheduleDef(name="", kind=ScheduleKind.ONCE, expr="", tz="UTC", target=NoopTarget())


class SqlStore:
    """The ``Store`` port over ``driver``. See the module docstring."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        # Writes refused by the fence (a zombie materializer or leader); a metric.
        self.fenced_writes_rejected: int = 0
        # (schedule_id, version) -> what a claim takes from that definition
        # (clockd.store.definition_cache).
        self.definitions: DefinitionCache[ClaimParts] = DefinitionCache()
        self._rules = policy_rules()
        d = driver
        self._claimable = d.array([s.value for s in states.sources("claim")])
        self._misfire_from = d.array([s.value for s in states.sources("misfire")])
        self._cancel_from = d.array([s.value for s in states.sources("cancel")])
        # The partitions' upkeep refused to this role (prune then row-deletes alone).
        self._history_refused = False

    # -- lifecycle (the driver's) -------------------------------------------------------------

    async def open(self) -> None:
        """See the port. SQLite: opens the file (creating it and its directory) and applies
        pending migrations (read-only: only checks them). PostgreSQL: checks the schema,
        opens the pool, never migrates."""
        await self.driver.open()

    async def close(self) -> None:
        await self.driver.close()

    async def migrate(self) -> list[str]:
        """See the port. PostgreSQL: works on a closed store too (``clockd migrate``)."""
        return await self.driver.migrate()

    async def server_time(self) -> datetime:
        """The database server's clock (``clock_timestamp()``; SQLite: the local clock)."""
        return await self.driver.server_time()

    async def probe_write(self) -> None:
        """See the port. A ``write`` transaction of one statement (each dialect's SQL says
        what it writes), without the audit a pending ``audited`` block would attach."""

        def body() -> Body[None]:
            yield Run("write_probe", fetch="none")

        await self.driver.transaction(body(), "write")

    async def vacuum_queue(self) -> bool:
        """See the port. A ``read``: PostgreSQL runs it as autocommit statements (VACUUM
        refuses to run in a transaction); each dialect's SQL says what the steps are: may this
        role, the queue's VACUUM, the ANALYZE of hot tables whose statistics say "empty"."""

        def body() -> Body[bool]:
            allowed = yield Run("queue_vacuum_allowed", fetch="one")
            if allowed is None or not allowed[0]:
                return False
            yield Run("queue_vacuum", fetch="none")
            yield Run("stale_statistics_analyze", fetch="none")
            return True

        result: bool = await self._read(body())
        return result

    async def _call(self, fn: Any, *, write: bool) -> Any:
        """Run ``fn(connection)`` as one transaction in the driver's own way (tests)."""
        return await self.driver.call(fn, write=write)

    # -- plumbing ------------------------------------------------------------------------------

    async def _read(self, body: Body[Any]) -> Any:
        return await self.driver.transaction(body, "read")

    async def _write(self, body: Body[Any]) -> Any:
        pending = _AUDIT.get()
        if pending:  # the audited block's first write carries its entry (see ``audited``)
            body = self._then_audit(body, pending.pop())
        return await self.driver.transaction(body, "write")

    def _then_audit(self, body: Body[Any], describe: Callable[[Any], AuditEntry | None]) -> Body[Any]:
        result = yield from body
        entry = describe(result)
        if entry is not None:
            yield Run("audit_insert", audit_params(entry, self.driver.instant), "one")
        return result

    @contextmanager
    def audited(self, describe: Callable[[Any], AuditEntry | None]) -> Iterator[None]:
        """See the port."""
        token = _AUDIT.set([describe])
        try:
            yield
        finally:
            _AUDIT.reset(token)

    def _schedule(self, row: Sequence[Any]) -> Schedule:
        d = self.driver
        return schedule_from_row(row, d.read, d.opt_read, d.document)

    def _occurrence(self, row: Sequence[Any]) -> Occurrence:
        return occurrence_from_row(row, self.driver.read, self.driver.opt_read)

    def _with_error(self, row: Sequence[Any]) -> Occurrence:
        """An occurrence row with its ``last_error`` as the 16th column."""
        return dataclasses.replace(self._occurrence(row[:15]), last_error=row[15])

    def _one_schedule(self, name: str, params: dict[str, Any]) -> Body[Schedule | None]:
        row = yield Run(name, params, "one")
        return None if row is None else self._schedule(row)

    # -- fence ---------------------------------------------------------------------------------

    def _advance_fence(self, fence: Fence) -> Body[None]:
        """Move ``fences(resource)`` to our token unless a larger one is stored; if it is
        larger, raise ``FencedOut`` (the caller's transaction rolls back: nothing commits).
        PostgreSQL's row lock here makes writers of one resource wait for each other."""
        row = yield Run("fence_advance", {"resource": fence.resource, "token": fence.token}, "one")
        if row is not None and row[0] == fence.token:
            return
        stored = yield Run("fence_get", {"resource": fence.resource}, "one")
        self.fenced_writes_rejected += 1  # one writer at a time per store: no lock needed
        log.warning(
            "fenced out of %s: token %d, stored %s",
            fence.resource,
            fence.token,
            stored[0] if stored else None,
            extra={"action": "store_fenced_out", "resource": fence.resource},
        )
        raise FencedOut(
            f"fenced out of {fence.resource}: our token {fence.token} is older than "
            f"{stored[0] if stored else '?'}; nothing was committed"
        )

    async def next_token(self, resource: str) -> int:
        def body() -> Body[int]:
            row = yield Run("counter_next", {"name": resource}, "one")
            return int(row[0])

        result: int = await self._write(body())
        return result

    # -- schedules -----------------------------------------------------------------------------

    async def create_schedule(
        self,
        schedule_id: str,
        definition: ScheduleDef,
        shard: int,
        next_run_at: datetime | None,
        now: datetime,
        *,
        idempotency_key: str | None = None,
    ) -> Schedule:
        new = NewSchedule(schedule_id, definition, shard, next_run_at)
        stamp = self.driver.instant(now)

        def body() -> Body[Schedule]:
            schedule = yield from self._insert_schedule(new, stamp)
            if idempotency_key is not None:
                try:
                    yield Run("schedule_set_idempotency_key", {"id": schedule.id, "key": idempotency_key}, "none")
                except Integrity as exc:
                    if exc.kind != "idempotency":
                        raise
                    raise Conflict(idempotency_conflict_message(idempotency_key, definition.tenant)) from None
            return schedule

        result: Schedule = await self._write(body())
        return result

    async def get_schedule_by_idempotency_key(self, tenant: str, key: str) -> Schedule | None:
        result: Schedule | None = await self._read(
            self._one_schedule("schedule_get_by_idempotency_key", {"tenant": tenant, "key": key})
        )
        return result

    async def get_schedule(self, tenant: str, name: str) -> Schedule | None:
        result: Schedule | None = await self._read(
            self._one_schedule("schedule_get_by_name", {"tenant": tenant, "name": name})
        )
        return result

    async def get_deleted_schedule(self, tenant: str, name: str) -> Schedule | None:
        result: Schedule | None = await self._read(
            self._one_schedule("schedule_get_deleted_by_name", {"tenant": tenant, "name": name})
        )
        return result

    async def get_schedule_by_id(self, schedule_id: str) -> Schedule | None:
        """Any state, deleted included (callers check ``state``)."""
        result: Schedule | None = await self._read(self._one_schedule("schedule_get", {"id": schedule_id}))
        return result

    async def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        def body() -> Body[list[Schedule]]:
            rows = yield Run("schedules_list", {"tenant": tenant})
            return [self._schedule(row) for row in rows]

        result: list[Schedule] = await self._read(body())
        return result

    async def change_schedule(
        self,
        schedule_id: str,
        expected_version: int,
        definition: ScheduleDef,
        state: ScheduleState,
        next_run_at: datetime | None,
        now: datetime,
        reason: str,
    ) -> ScheduleChanged:
        """See the port. A deleted (or unknown) schedule raises ``NotFound``."""
        change = ScheduleChange(schedule_id, expected_version, definition, state, next_run_at, reason)
        result: ScheduleChanged = await self._write(self._change_schedule(change, self.driver.instant(now)))
        return result

    async def apply_schedules(
        self,
        creates: Sequence[NewSchedule],
        changes: Sequence[ScheduleChange],
        now: datetime,
    ) -> AppliedSchedules:
        """See the port, in one transaction: each change with ``change_schedule``'s
        statements (changes are rare), then the creates in batches of up to ``_APPLY_BATCH``,
        streamed (``_stream_creates``: 20,000 creates took 9 s row by row, under 1 s in
        batches). A batch that hits a taken name or id, or a tenant's limit, is redone row
        by row so the error names its schedule."""
        if not creates and not changes:
            return AppliedSchedules(created=[], changed=[], canceled=0)
        stamp = self.driver.instant(now)

        def body() -> Body[AppliedSchedules]:
            changed: list[Schedule] = []
            canceled = 0
            replanned: list[Replanned] = []
            for change in changes:
                try:
                    written = yield from self._change_schedule(change, stamp)
                except NotFound as exc:
                    raise Conflict(f"{exc.message}; nothing was applied") from exc
                changed.append(written.schedule)
                canceled += written.canceled
                replanned += written.replanned
            created = yield from self._stream_creates(creates, stamp)
            return AppliedSchedules(created=created, changed=changed, canceled=canceled, replanned=replanned)

        result: AppliedSchedules = await self._write(body())
        return result

    async def schedule_versions(
        self, schedule_id: str
    ) -> list[tuple[int, datetime, datetime | None, ScheduleDef, ScheduleState]]:
        d = self.driver

        def body() -> Body[list[tuple[int, datetime, datetime | None, ScheduleDef, ScheduleState]]]:
            rows = yield Run("schedule_versions_list", {"schedule_id": schedule_id})
            return [
                (int(v), d.read(start), d.opt_read(end), definition_from_dict(d.document(doc)), ScheduleState(state))
                for v, start, end, doc, state in rows
            ]

        result: list[tuple[int, datetime, datetime | None, ScheduleDef, ScheduleState]] = await self._read(body())
        return result

    # -- schedule writes (inside the caller's transaction) -------------------------------------

    def _schedule_params(
        self, schedule_id: str, definition: ScheduleDef, next_run_at: datetime | None
    ) -> dict[str, Any]:
        return {
            "id": schedule_id,
            "tenant": definition.tenant,
            "name": definition.name,
            "kind": definition.kind.value,
            "expr": definition.expr,
            "tz": definition.tz,
            "queue": definition.queue,
            "next_run_at": self.driver.opt_instant(next_run_at),
            "spec": spec_json(definition),
        }

    def _insert_schedule(self, new: NewSchedule, stamp: Any) -> Body[Schedule]:
        """``create_schedule``'s statements: the schedule row at version 1 and its first
        ``schedule_versions`` row. ``Conflict`` when the live name (or the id) is taken."""
        definition = new.definition
        try:
            yield from self._check_schedule_quota(definition.tenant)
        except QuotaExceeded:
            # A create whose name is taken was refused for the quota when the tenant was
            # full, which sent the user to raise a limit for a schedule they already have.
            taken = yield Run("schedule_get_by_name", {"tenant": definition.tenant, "name": definition.name}, "one")
            if taken is not None:
                raise name_taken(definition) from None
            raise
        params = self._schedule_params(new.schedule_id, definition, new.next_run_at)
        try:
            yield Run("schedule_insert", {**params, "shard": new.shard, "now": stamp}, "none")
        except Integrity as exc:
            if exc.kind == "schedule_name":
                raise name_taken(definition) from None
            if exc.kind == "schedule_id":
                raise Conflict(f"schedule id {new.schedule_id} already exists") from None
            raise
        yield Run(
            "schedule_version_insert",
            {
                "schedule_id": new.schedule_id,
                "version": 1,
                "state": ScheduleState.ACTIVE.value,
                "now": stamp,
                "definition": definition_json(definition),
                "reason": "created",
            },
            "none",
        )
        yield from self._write_labels([(new.schedule_id, definition)])
        return self._created((new,), stamp)[0]

    def _created(self, batch: Iterable[NewSchedule], stamp: Any) -> list[Schedule]:
        """The schedules the creates of ``batch`` wrote (version 1, active, created and
        updated ``stamp``), their instants as the store keeps them (SQLite: to the
        microsecond). The stamp read once for all of them; positional arguments (the
        frozen ``__init__`` binds keywords at ~1 µs a schedule more)."""
        d = self.driver
        at = d.read(stamp)
        active = ScheduleState.ACTIVE
        return [
            Schedule(
                new.schedule_id, 1, active, new.definition,
                None if new.next_run_at is None else d.read(d.instant(new.next_run_at)),
                new.shard, at, at,
            )
            for new in batch
        ]  # fmt: skip

    def _stream_creates(self, creates: Sequence[NewSchedule], stamp: Any) -> Body[list[Schedule]]:
        """``apply_schedules``' creates, its batches (``_apply_batches``) sent as one
        ``Stream``: in PostgreSQL each batch's statement goes out as it is built, so that
        building the next — reading ``creates``, which in ``Ops.apply`` plans them, and
        encoding the parameters — overlaps the database writing the one before, instead
        of the database waiting for each batch to be built and the client for each to be
        written (a 100,000-create apply spent ~9 µs a create in the gaps, a sixth of its
        time; the README's Performance section has the figures).

        The quota is read once per tenant (its limits row locked, its schedules counted:
        ``_quota_room``) and the stream's creates taken off it as the batches are built, so
        no batch waits for a read. The stream stops before a batch of a tenant not read
        yet (read, then a new stream), and before a batch that would pass a limit or is a
        single create: those go through ``_insert_schedules``, the path before streams,
        whose row-by-row writes name the schedule at fault. A stream that hits a taken
        name or id writes nothing (the driver's savepoint), and its batches are redone the
        same way."""
        d = self.driver
        # Slices taken as each batch is needed: reading creates plans them (Ops.apply).
        spans = list(_apply_batches(len(creates)))
        room: dict[str, int] = {}  # places left, per tenant with a max_schedules
        known: set[str] = set()  # tenants whose room is read (their limits rows locked)
        created: list[Schedule] = []
        done = 0
        while done < len(spans):
            first = creates[spans[done][0] : spans[done][1]]
            wanted = creates_by_tenant(first)
            unknown = wanted.keys() - known
            if unknown:
                room.update((yield from self._quota_room(sorted(unknown))))
                known.update(unknown)
            if not _streamable_batch(first, wanted, room):
                created += yield from self._insert_schedules(first, stamp)
                _take_room(room, wanted)
                done += 1
                continue
            streamed: list[Sequence[NewSchedule]] = []
            params = self._streamable(creates, spans[done:], known, room, streamed, stamp)
            try:
                yield Stream(run for batch in params for run in d.schedules_insert(batch))
            except Integrity:  # none of the stream is written: its batches as before streams
                for batch in streamed:
                    created += yield from self._insert_schedules(batch, stamp)
            else:
                created += self._created((new for batch in streamed for new in batch), stamp)
            done += len(streamed)
        return created

    def _streamable(
        self,
        creates: Sequence[NewSchedule],
        spans: Sequence[tuple[int, int]],
        known: set[str],
        room: dict[str, int],
        streamed: list[Sequence[NewSchedule]],
        stamp: Any,
    ) -> Iterator[dict[str, Any]]:
        """The parameters of the batches at ``spans`` as the stream asks for them, each
        batch's creates taken off ``room`` and the batch added to ``streamed``; it ends
        before a batch that is a single create, has a tenant not in ``known`` or would pass
        a limit (``_stream_creates``)."""
        for start, stop in spans:
            batch = creates[start:stop]
            wanted = creates_by_tenant(batch)
            if wanted.keys() - known or not _streamable_batch(batch, wanted, room):
                return
            _take_room(room, wanted)
            streamed.append(batch)
            yield self._create_params(batch, stamp)

    def _create_params(self, batch: Sequence[NewSchedule], stamp: Any) -> dict[str, Any]:
        """The driver's ``schedules_insert`` parameters for ``batch``."""
        d = self.driver
        rows = [
            (n.schedule_id, n.definition.tenant, n.definition.name, n.definition.kind.value, n.definition.expr,
             n.definition.tz, n.definition.queue, d.opt_instant(n.next_run_at), n.shard, spec, document)
            for n in batch
            for spec, document in (n.texts or definition_texts(n.definition),)
        ]  # fmt: skip
        return {
            **d.table("schedules", _CREATE_COLUMNS, rows),
            "state": ScheduleState.ACTIVE.value,
            "reason": "created",
            "now": stamp,
        }

    def _insert_schedules(self, batch: Sequence[NewSchedule], stamp: Any) -> Body[list[Schedule]]:
        """``_insert_schedule`` for a batch, set-based: the quota check once per batch
        (``_within_quota``), then the driver's ``schedules_insert`` as a ``Stream`` of its
        own (PostgreSQL: one statement for the schedules, their versions and labels). When it hits a taken name
        or id (or a name twice in the batch, or in PostgreSQL a label pair twice in one
        definition; nothing of the batch is written), or the batch would pass a tenant's
        limit, the batch is redone row by row, which raises the same ``Conflict`` /
        ``QuotaExceeded`` a row-by-row apply would, naming the first schedule at fault."""
        if len(batch) == 1 or not (yield from self._within_quota(batch)):
            return (yield from self._insert_one_by_one(batch, stamp))
        try:
            yield Stream(self.driver.schedules_insert(self._create_params(batch, stamp)))
        except Integrity:  # row by row: the error of the row at fault
            return (yield from self._insert_one_by_one(batch, stamp))
        return self._created(batch, stamp)

    def _write_labels(self, written: Sequence[tuple[str, ScheduleDef]]) -> Body[None]:
        """The ``schedule_labels`` rows (schema 0009) of schedules just written, in the
        write's transaction, for a single create or change (``_change_schedule`` deletes a
        changed schedule's rows first; a batch of creates has the driver's
        ``schedules_insert`` read them from the specs it writes). No statement when none
        of them has a label."""
        rows = [
            (definition.tenant, key, value, definition.name, schedule_id)
            for schedule_id, definition in written
            for key, value in definition.labels
        ]
        if rows:
            columns = ("tenants", "keys", "label_values", "names", "ids")
            yield Run("schedule_labels_insert", self.driver.table("labels", columns, rows), "none")

    def _insert_one_by_one(self, batch: Sequence[NewSchedule], stamp: Any) -> Body[list[Schedule]]:
        created: list[Schedule] = []
        for new in batch:
            created.append((yield from self._insert_schedule(new, stamp)))
        return created

    def _within_quota(self, batch: Sequence[NewSchedule]) -> Body[bool]:
        """Whether every tenant of ``batch`` stays within its ``max_schedules`` with all of
        the batch's creates: ``_check_schedule_quota`` for the whole batch (PostgreSQL locks
        the tenants' limits rows first, then one count), false exactly when creating the
        batch row by row would raise ``QuotaExceeded``."""
        wanted = creates_by_tenant(batch)
        return within_quota(wanted, (yield from self._quota_room(sorted(wanted))))

    def _quota_room(self, tenants: Sequence[str]) -> Body[dict[str, int]]:
        """The places each of ``tenants`` that has a ``max_schedules`` has left (PostgreSQL
        locks their limits rows first, for the rest of the transaction, then one count):
        ``_check_schedule_quota``'s reading for several tenants at once."""
        d = self.driver
        found = yield Run("tenant_limits_lock_many", {"tenants": d.array(list(tenants))})
        limits = {str(tenant): int(cap) for tenant, cap in found}
        if not limits:
            return {}
        found = yield Run("tenant_schedules_count_many", {"tenants": d.array(sorted(limits))})
        counts = {str(tenant): int(n) for tenant, n in found}
        return {tenant: cap - counts.get(tenant, 0) for tenant, cap in limits.items()}

    def _check_schedule_quota(self, tenant: str) -> Body[None]:
        """``QuotaExceeded`` when ``tenant`` already has ``max_schedules`` live schedules. The
        limits row is locked first (PostgreSQL; SQLite's write lock serializes creates) and
        the count is a statement of its own, so it sees every create of the tenant
        committed before the lock: two creates cannot both take the last place."""
        row = yield Run("tenant_limits_lock", {"tenant": tenant}, "one")
        if row is None:
            return
        counted = yield Run("tenant_schedules_count", {"tenant": tenant}, "one")
        if int(counted[0]) >= int(row[0]):
            raise QuotaExceeded(schedule_quota_message(tenant, int(row[0])))

    def _change_schedule(self, change: ScheduleChange, stamp: Any) -> Body[ScheduleChanged]:
        """``change_schedule``'s statements: the conditional version bump, the versions rows,
        the cancellation of unclaimed older-version occurrences and, when the schedule stays
        active, the re-planning of their instants (``_replan``). ``Conflict`` (version moved,
        name taken) or ``NotFound`` (deleted)."""
        definition, schedule_id = change.definition, change.schedule_id
        params = self._schedule_params(schedule_id, definition, change.next_run_at)
        params.update(expected_version=change.expected_version, state=change.state.value, now=stamp)
        try:
            row = yield Run("schedule_update", params, "one")
        except Integrity as exc:
            if exc.kind != "schedule_name":
                raise
            raise name_taken(definition) from None
        if row is None:
            current = yield Run("schedule_get", {"id": schedule_id}, "one")
            if current is None:
                raise NotFound(f"no schedule with id {schedule_id}")
            found = self._schedule(current)
            if found.state is ScheduleState.DELETED:
                raise NotFound(f"schedule {found.name!r} ({schedule_id}) was deleted")
            raise Conflict(
                f"schedule {found.name!r} was changed meanwhile: it is at version "
                f"{found.version}, not {change.expected_version}; read it again and retry"
            )
        schedule = self._schedule(row)
        # Its label rows are found from the version it replaces (schema 0015): after the
        # update, which holds the row's lock, before the new version's row is written.
        yield Run("schedule_labels_delete", {"schedule_id": schedule_id, "version": schedule.version}, "none")
        if change.state is not ScheduleState.DELETED:
            yield from self._write_labels([(schedule_id, definition)])
        if change.state is ScheduleState.ACTIVE and schedule.next_run_at is not None:
            schedule = yield from self._cursor_past_started(schedule)
        cancel = {
            "schedule_id": schedule_id,
            "version": schedule.version,
            "include_manual": change.state is ScheduleState.DELETED,
            "reason": change.reason,
            "now": stamp,
            "expected": self._cancel_from,
            "next": states.target("cancel").value,
        }
        yield Run("schedule_version_close", {"schedule_id": schedule_id, "now": stamp}, "none")
        yield Run(
            "schedule_version_insert",
            {
                "schedule_id": schedule_id,
                "version": schedule.version,
                "state": change.state.value,
                "now": stamp,
                "definition": definition_json(definition),
                "reason": change.reason,
            },
            "none",
        )
        yield Run("cancel_outbox", cancel, "none")
        yield Run("cancel_dispatch", cancel, "none")
        canceled = yield Run("cancel_occurrences", cancel)
        replanned: tuple[Replanned, ...] = ()
        if change.state is ScheduleState.ACTIVE and canceled:
            replanned = yield from self._replan(schedule, canceled, change.reason, stamp)
        return ScheduleChanged(schedule, len(canceled), replanned)

    def _cursor_past_started(self, schedule: Schedule) -> Body[Schedule]:
        """``schedule`` (just written, active) with its cursor moved past the latest instant
        at or after it that an older version already started (an attempt was made: a
        worker whose clock runs ahead of the caller's), so the new version never plans an
        instant that ran. Runs before ``schedule_version_insert``, which copies the cursor."""
        d = self.driver
        assert schedule.next_run_at is not None
        params = {"schedule_id": schedule.id, "version": schedule.version, "after": d.instant(schedule.next_run_at)}
        row = yield Run("occurrences_started_after", params, "one")
        if row is None or row[0] is None:
            return schedule
        started = d.read(row[0])
        definition = schedule.definition
        spec = compile_spec(definition.kind, definition.expr, definition.tz, schedule.created_at)
        cursor = spec.next_after(started)
        moved = {"id": schedule.id, "version": schedule.version, "next_run_at": d.opt_instant(cursor)}
        yield Run("schedule_cursor_move", moved, "none")
        return dataclasses.replace(schedule, next_run_at=None if cursor is None else d.read(d.instant(cursor)))

    def _replan(
        self, schedule: Schedule, canceled: Sequence[Sequence[Any]], reason: str, stamp: Any
    ) -> Body[tuple[Replanned, ...]]:
        """The instants a change just canceled, taken over by the new version (``schedule``,
        active): those of occurrences no worker started (``cancel_occurrences`` rows: id,
        scheduled_for, attempts) that the new definition still fires at are planned again
        under the new version (``plan_instants``: deterministic ids, window, misfire) and
        inserted as the materializer inserts (``_insert_planned``, outbox rows included);
        the canceled rows' reasons say which were re-planned and which the new version
        dropped. The cursor is untouched: these instants lie before it (they were
        materialized), and an instant planned twice is skipped by the unique key."""
        d = self.driver
        unstarted = {d.read(at): str(oid) for oid, at, attempts in canceled if not int(attempts)}
        if not unstarted:
            return ()
        definition = schedule.definition
        try:
            spec = compile_spec(definition.kind, definition.expr, definition.tz, schedule.created_at)
        except ClockdError:  # validated by the caller; a definition that cannot fire keeps nothing
            fires: list[datetime] = []
        else:
            fires = [t for t in unstarted if fires_at(spec, t)]
        due = DueSchedule.of(schedule)
        planned = plan_instants(due, fires, d.read(stamp))
        new = [NewOccurrence.planned(due, p) for p in planned]
        yield from self._insert_planned([row for _, row in self._planned_rows(new, stamp)], stamp)
        by_instant = {p.scheduled_for: p for p in planned}
        out = tuple(
            Replanned(
                schedule.id,
                schedule.version,
                t,
                unstarted[t],
                by_instant[t].id if t in by_instant else None,
                by_instant[t].state if t in by_instant else None,
            )
            for t in sorted(unstarted)
        )
        version = schedule.version
        for kept, note in ((True, REPLANNED), (False, DROPPED)):
            ids = [r.replaced for r in out if r.kept is kept]
            if ids:
                text = f"{reason}; {note.format(version=version)}"
                yield Run("occurrences_set_reason", {"ids": d.array(ids), "reason": text}, "none")
        return out

    # -- occurrences (clockctl) ----------------------------------------------------------------

    async def add_manual_occurrence(
        self, schedule: Schedule, occurrence_id: str, max_attempts: int, now: datetime
    ) -> Occurrence:
        d = self.driver
        stamp = d.instant(now)
        params = {
            "id": occurrence_id,
            "schedule_id": schedule.id,
            "version": schedule.version,
            "tenant": schedule.definition.tenant,
            "queue": schedule.definition.queue,
            "now": stamp,
            "max_attempts": max_attempts,
            "scheduled": S.SCHEDULED.value,
            "overlap": schedule.definition.overlap.value,
        }
        at = d.read(stamp)
        added = Occurrence(
            id=occurrence_id,
            schedule_id=schedule.id,
            schedule_name=schedule.name,
            version=schedule.version,
            scheduled_for=at,
            available_at=at,
            state=S.SCHEDULED,
            attempts=0,
            queue=schedule.definition.queue,
            manual=True,
        )

        # The body returns the occurrence, so an audited block (``audited``) can name it.
        def body() -> Body[Occurrence]:
            try:
                written = yield Run("occurrence_insert_manual", params, "count")
            except Integrity as exc:
                if exc.kind == "occurrence_id":
                    raise Conflict(f"occurrence {occurrence_id} already exists") from None
                raise
            if not written:  # the insert writes only under an existing schedule row
                raise NotFound(f"no schedule with id {schedule.id}")
            yield Run("outbox_insert", {"ids": d.array([occurrence_id]), "scheduled": S.SCHEDULED.value}, "none")
            return added

        result: Occurrence = await self._write(body())
        return result

    async def list_occurrences(
        self, schedule_id: str | None = None, limit: int = 50, before: datetime | None = None
    ) -> list[Occurrence]:
        params = {"schedule_id": schedule_id, "limit": limit, "before": self.driver.instant(before or _END_OF_TIME)}
        name = "occurrences_list" if schedule_id is None else "occurrences_list_by_schedule"
        return await self._occurrences(name, params)

    async def _occurrences(self, name: str, params: dict[str, Any], *, with_error: bool = False) -> list[Occurrence]:
        def body() -> Body[list[Occurrence]]:
            rows = yield Run(name, params)
            return [self._with_error(row) if with_error else self._occurrence(row) for row in rows]

        result: list[Occurrence] = await self._read(body())
        return result

    async def get_occurrence(self, id_or_prefix: str) -> Occurrence | None:
        key = id_or_prefix.strip().lower()

        def body() -> Body[Occurrence | None]:
            row = yield Run("occurrence_get", {"id": key}, "one")
            if row is not None:
                return self._occurrence(row)
            if len(key) < 6:
                return None
            rows = yield Run("occurrence_by_prefix", {"prefix": key, "prefix_end": key + "\U0010ffff"})
            if len(rows) > 1:
                raise Conflict(
                    f"occurrence prefix {key!r} is ambiguous ({rows[0][0]}, {rows[1][0]}, …): give more characters"
                )
            return self._occurrence(rows[0]) if rows else None

        result: Occurrence | None = await self._read(body())
        return result

    async def list_attempts(self, occurrence_id: str) -> list[Attempt]:
        d = self.driver

        def body() -> Body[list[Attempt]]:
            rows = yield Run("attempts_list", {"occurrence_id": occurrence_id})
            return [attempt_from_row(row, d.read, d.opt_read) for row in rows]

        result: list[Attempt] = await self._read(body())
        return result

    # -- materializer --------------------------------------------------------------------------

    async def due_schedules(self, shards: Sequence[int], until: datetime, limit: int) -> list[DueSchedule]:
        if not shards or limit <= 0:
            return []
        d = self.driver
        params = {"shards": d.array(list(dict.fromkeys(shards))), "until": d.instant(until), "limit": limit}

        def body() -> Body[list[DueSchedule]]:
            rows = yield Run("due_schedules", params)
            return due_from_rows(rows, d.read, d.opt_read)

        result: list[DueSchedule] = await self._read(body())
        return result

    async def due_shards(self, shards: Sequence[int], until: datetime) -> list[tuple[int, datetime]]:
        if not shards:
            return []
        d = self.driver
        params = {"shards": d.array(list(dict.fromkeys(shards))), "until": d.instant(until)}

        def body() -> Body[list[tuple[int, datetime]]]:
            rows = yield Run("due_shards", params)
            return [(int(row[0]), d.read(row[1])) for row in rows]

        result: list[tuple[int, datetime]] = await self._read(body())
        return result

    async def materialize(
        self,
        fence: Fence,
        occurrences: Sequence[NewOccurrence],
        cursors: Sequence[CursorAdvance],
        now: datetime,
        *,
        direct: bool = False,
    ) -> MaterializeResult:
        d = self.driver
        stamp = d.instant(now)
        advance = d.table(
            "cursors",
            ("ids", "versions", "expected", "next_run_at"),
            [(c.schedule_id, c.version, d.opt_instant(c.expected), d.opt_instant(c.next_run_at)) for c in cursors],
        )
        planned = self._planned_rows(occurrences, stamp)

        def body() -> Body[MaterializeResult]:
            yield from self._advance_fence(fence)
            moved: set[tuple[str, int]] = set()
            if cursors:
                found = yield Run("materialize_advance", advance)
                moved = {(sid, int(version)) for sid, version in found}
            rows = [row for key, row in planned if key in moved]
            written = yield from self._insert_planned(rows, stamp, direct=direct)
            lags: tuple[float, ...] = ()
            if direct:  # staged here, now: how late each row written ENQUEUED was
                due = {o.id: o.available_at for o in occurrences}
                lags = tuple(max(0.0, (now - due[oid]).total_seconds()) for oid, state in written if state == _ENQUEUED)
            return MaterializeResult(len(written), len(moved), len(cursors) - len(moved), lags)

        result: MaterializeResult = await self._write(body())
        return result

    def _planned_rows(
        self, occurrences: Sequence[NewOccurrence], stamp: Any
    ) -> list[tuple[tuple[str, int], tuple[Any, ...]]]:
        """``occurrences`` as ``materialize_insert`` rows (``_OCCURRENCE_COLUMNS``), each
        keyed by (schedule_id, version). ``ValueError`` for a state the materializer
        cannot plan (only SCHEDULED and MISSED)."""
        for o in occurrences:
            if o.state not in _PLANNED_STATES:
                raise ValueError(f"cannot materialize occurrence {o.id} as {o.state}")
        scheduled = S.SCHEDULED
        instant = self.driver.instant  # the hot loop of the materializer: one lookup, not two per row
        return [
            (
                (o.schedule_id, o.version),
                (
                    o.id, o.schedule_id, o.version, o.tenant, o.queue, instant(o.scheduled_for),
                    instant(o.available_at), o.state.value, o.max_attempts, o.reason,
                    None if o.state is scheduled else stamp, None if o.overlap is None else o.overlap.value,
                ),
            )
            for o in occurrences
        ]  # fmt: skip

    def _insert_planned(
        self, rows: Sequence[tuple[Any, ...]], stamp: Any, *, direct: bool = False
    ) -> Body[list[Sequence[Any]]]:
        """Insert planned occurrence rows (``_planned_rows``) and the outbox rows of the
        SCHEDULED ones — or, ``direct`` (``direct_dispatch``), SCHEDULED ones written
        already ENQUEUED and their ``dispatch`` rows (what the relay's ``relay_dispatch``
        would write for them): the materializer's one insert path (an id or (schedule,
        version, instant) already there is skipped). The (id, state) of each row inserted."""
        if not rows:
            return []
        d = self.driver
        table = d.table("occurrences", _OCCURRENCE_COLUMNS, rows)
        written: list[Sequence[Any]]
        if direct:
            rule = {"scheduled": S.SCHEDULED.value, "enqueued": _ENQUEUED, "now": stamp}
            written = yield from d.materialize_insert_enqueued({**table, **rule})
        else:
            written = yield from d.materialize_insert({**table, "scheduled": S.SCHEDULED.value})
        return written

    # -- relay ---------------------------------------------------------------------------------

    async def relay(self, until: datetime, limit: int, now: datetime) -> Relayed:
        if limit <= 0:
            return Relayed(0, ())
        d = self.driver
        params = {
            "until": d.instant(until),
            "limit": limit,
            "now": d.instant(now),
            "expected": states.sources("relay")[0].value,
            "next": _ENQUEUED,
        }

        def body() -> Body[Relayed]:
            # A driver may leave out the rows staged ahead (lag 0): PostgreSQL's statement
            # answers only the late ones; SQLite's hands back every row's, clamped here.
            moved, lags = yield from d.relay(params)
            late = tuple(max(0.0, d.seconds(lag)) for lag in lags)
            return Relayed(moved, (0.0,) * (moved - len(late)) + late)

        result: Relayed = await self._write(body())
        return result

    # -- worker --------------------------------------------------------------------------------

    async def claim(
        self,
        queues: Sequence[str],
        worker_id: str,
        limit: int,
        lease_for: timedelta,
        now: datetime,
    ) -> list[Claim]:
        if limit <= 0 or not queues:
            return []
        d = self.driver
        stamp = d.instant(now)
        lease_until_at = d.instant(now + lease_for)
        lease_until = d.read(lease_until_at)  # aware UTC whatever zone `now` came in
        request = ClaimRequest(
            queues=list(dict.fromkeys(queues)),
            worker_id=worker_id,
            limit=limit,
            now=stamp,
            lease_until=lease_until_at,
            minute=d.instant(minute_of(now)),
            tokens=new_tokens(limit),
            claimable=self._claimable,
            rules=self._rules,
        )

        def body() -> Body[list[Claim]]:
            rows = yield from d.claim(request)
            if not rows:
                return []
            # Per claimed row (the worker's hot path): positional fields, in Claim's order,
            # and what each definition gives its claims looked up once per definition.
            shared = yield from self._claim_parts_of({(row[3], int(row[4])) for row in rows})
            read = d.read
            claims: list[Claim] = []
            for occ, token, attempt, schedule_id, version, scheduled_for, max_attempts in rows:
                version = int(version)
                name, target, timeout, backoff, backoff_max, permanent = shared[(schedule_id, version)]
                claims.append(
                    Claim(occ, token, int(attempt), schedule_id, name, version, read(scheduled_for), target, timeout,
                          int(max_attempts), backoff, backoff_max, permanent, lease_until)
                )  # fmt: skip
            return claims

        result: list[Claim] = await self._write(body())
        return result

    def _claim_parts_of(self, keys: set[tuple[str, int]]) -> Body[dict[tuple[str, int], ClaimParts]]:
        """What the claims take from the definitions ``keys`` name: from the cache, the rest
        read (only the fields a claim uses, not whole documents) and cached."""
        found, missing = self.definitions.found(keys)
        if missing:
            rows = yield Run("schedule_definitions", self.driver.table("keys", ("schedule_ids", "versions"), missing))
            for schedule_id, version, name, target, retry, timeout_us in rows:
                key = (schedule_id, int(version))
                found[key] = parts = claim_parts(name, target, retry, timeout_us)
                self.definitions.put(key, parts)
        return found

    async def extend_leases(self, tokens: Sequence[str], lease_for: timedelta, now: datetime) -> set[str]:
        if not tokens:
            return set()
        d = self.driver
        params = {
            "tokens": d.array(list(dict.fromkeys(tokens))),
            "lease_until": d.instant(now + lease_for),
            "running": S.RUNNING.value,
        }

        def body() -> Body[set[str]]:
            rows = yield Run("leases_extend", params)
            return {row[0] for row in rows}

        result: set[str] = await self._write(body())
        return result

    def _held(self, tokens: list[str]) -> Body[list[Sequence[Any]]]:
        """``leases_held`` rows whose occurrence is RUNNING (SQLite's statement leaves the
        check to this filter; PostgreSQL's makes it itself, as it takes the runs out of
        their batch): (queue row id — None on PostgreSQL, whose claimed runs have none —,
        occurrence id, token, attempt, tenant, state, worker id, attempt start, overlap
        policy). The caller ends each lease: finish (a retry) or release."""
        running = S.RUNNING.value
        rows = yield Run("leases_held", {"tokens": self.driver.array(tokens), "running": running})
        return [row for row in rows if row[5] == running]

    async def finish(self, completions: Sequence[Completion], now: datetime) -> set[str]:
        if not completions:
            return set()
        by_token: dict[str, Completion] = {}
        for c in completions:
            if c.next_state not in _FINISH_STATES:
                raise ValueError(f"a completion cannot lead to {c.next_state}")
            if c.outcome is AttemptOutcome.RUNNING:
                raise ValueError("a completion's outcome cannot be 'running'")
            by_token.setdefault(c.lease_token, c)
        d = self.driver
        stamp = d.instant(now)
        retrying = [t for t, c in by_token.items() if c.next_state is S.RETRY_WAIT]
        ending = [t for t, c in by_token.items() if c.next_state is not S.RETRY_WAIT]

        def body() -> Body[set[str]]:
            yield Run("finish_by_index", {}, "none")  # see PostgreSQL's block
            # Every lease this finish ends, locked at once in one order (lock_leases), then
            # the claims that end taken (end_leases) and the retries' read (_held).
            yield from d.lock_leases({"tokens": d.array(list(by_token))})
            held: list[Sequence[Any]] = []
            if ending:
                held += yield from d.end_leases({"tokens": d.array(ending), "running": S.RUNNING.value})
            if retrying:
                held += yield from self._held(retrying)
            if not held:
                return set()
            rows: list[tuple[Any, ...]] = []
            recorded: list[tuple[Any, ...]] = []  # the rows finish_attempts writes
            retry: list[tuple[Any, Any, str]] = []
            ended: list[str] = []  # of those, the ones that may hold an overlap slot
            for dispatch_id, occ, token, attempt, _, _, worker_id, started_at, overlap in held:
                c = by_token[token]
                reason = dead_reason(c, attempt) if c.next_state is S.DEAD else None
                # Who ran the attempt and since when: the lease is the running attempt's
                # record (see the port); finish_attempts writes (or completes) its row,
                # unless the occurrence row can say all of it (_kept_on_occurrence).
                inline = _kept_on_occurrence(c, attempt)
                row = (occ, attempt, c.outcome.value, c.exit_code, c.signal, d.text(c.output),
                       None if c.error is None else d.text(c.error), c.next_state.value,
                       None if reason is None else d.text(reason), token, worker_id or "",
                       stamp if started_at is None else started_at, (worker_id or "") if inline else None)  # fmt: skip
                rows.append(row)
                if not inline:
                    recorded.append(row)
                if c.next_state is S.RETRY_WAIT:
                    retry.append((dispatch_id, stamp if c.retry_at is None else d.instant(c.retry_at), occ))
                elif overlap != _ALLOW:  # an 'allow' row's claim took no slot: nothing to release
                    ended.append(occ)
            columns = ("occurrence_ids", "attempts", "outcomes", "exit_codes", "signals", "outputs", "errors",
                       "next_states", "reasons", "lease_tokens", "worker_ids", "started_at",
                       "inline_workers")  # fmt: skip
            shared = {"now": stamp, "running": S.RUNNING.value, "retry_wait": S.RETRY_WAIT.value, **_OUTCOMES}
            runs: list[Run] = []
            if recorded:
                runs.append(Run("finish_attempts", {**d.table("rows", columns, recorded), **shared}, "none"))
            runs.append(Run("finish_occurrences", {**d.table("rows", columns, rows), **shared}, "none"))
            if retry:
                retried = d.table("rows", ("ids", "visible_at", "occurrence_ids"), retry)
                runs.append(Run("dispatch_retry", retried, "none"))
            runs.append(Run("tenant_running_release", {"tenants": d.array([row[4] for row in held])}, "none"))
            if ended:  # a RETRY_WAIT holder keeps its overlap slot until it ends
                runs.extend(d.slot_release({"ids": d.array(ended), "now": stamp}))
            # Independent writes but the last (slots after the states): one pipeline, one
            # round trip (PostgreSQL), run in order.
            yield Pipeline(tuple(runs))
            return {row[2] for row in held}

        result: set[str] = await self._write(body())
        return result

    async def release(self, tokens: Sequence[str], now: datetime) -> int:
        """See the port. ``visible_at`` is left as it was (already due)."""
        if not tokens:
            return 0
        d = self.driver
        wanted = list(dict.fromkeys(tokens))

        def body() -> Body[int]:
            yield from d.lock_leases({"tokens": d.array(wanted)})
            held = yield from self._held(wanted)
            if not held:
                return 0
            keys = d.table("keys", ("occurrence_ids", "attempts"), [(row[1], row[3]) for row in held])
            ids = d.array([row[1] for row in held])
            yield Pipeline(
                (
                    Run("release_attempts", keys, "none"),
                    Run("release_occurrences", {"ids": ids, "running": S.RUNNING.value, **_RELEASED}, "none"),
                    Run(
                        "dispatch_unlease",
                        {"ids": d.array([row[0] for row in held]), "visible_at": None, "occurrence_ids": ids},
                        "none",
                    ),
                    Run("tenant_running_release", {"tenants": d.array([row[4] for row in held])}, "none"),
                )
            )
            return len(held)

        result: int = await self._write(body())
        return result

    # -- leader --------------------------------------------------------------------------------

    async def reap_expired(self, fence: Fence, limit: int, now: datetime) -> list[Reaped]:
        d = self.driver
        stamp = d.instant(now)

        def body() -> Body[list[Reaped]]:
            yield from self._advance_fence(fence)
            yield Run("reap_by_index", {}, "none")  # see PostgreSQL's block
            picked = yield from d.reap_pick({"now": stamp, "limit": limit, "running": S.RUNNING.value})
            if not picked:
                return []
            again = [row for row in picked if row[2] < row[3]]
            dead = [row for row in picked if row[2] >= row[3]]
            columns = ("occurrence_ids", "attempts", "lease_tokens", "worker_ids", "started_at")
            lost = d.table("keys", columns, [(row[1], row[2], row[5], row[6] or "", row[7]) for row in picked])
            runs = [Run("reap_attempts", {**lost, "now": stamp, "error": LEASE_LOST, **_OUTCOMES}, "none")]
            if again:
                runs.append(
                    Run(
                        "dispatch_unlease",
                        {
                            "ids": d.array([row[0] for row in again]),
                            "visible_at": stamp,
                            "occurrence_ids": d.array([row[1] for row in again]),
                        },
                    )
                )
                runs.append(Run("reap_retry", {"ids": d.array([row[1] for row in again]), **self._reap("reap_retry")}))
            if dead:
                dead_ids = d.array([row[1] for row in dead])
                queued = [row[0] for row in dead if row[0] is not None]  # a lease per batch: none
                if queued:
                    runs.append(Run("dispatch_delete", {"ids": d.array(queued)}, "none"))
                runs.append(Run("reap_dead", {"ids": dead_ids, "now": stamp, **self._reap("reap_dead")}, "none"))
            runs.append(Run("tenant_running_release", {"tenants": d.array([row[4] for row in picked])}, "none"))
            if dead:
                runs.extend(d.slot_release({"ids": d.array([row[1] for row in dead]), "now": stamp}))
            yield Pipeline(tuple(dataclasses.replace(r, fetch="none") for r in runs))
            return [
                Reaped(
                    occurrence_id=row[1],
                    attempt=int(row[2]),
                    next_state=S.RETRY_WAIT if row[2] < row[3] else S.DEAD,
                )
                for row in picked
            ]

        result: list[Reaped] = await self._write(body())
        return result

    @staticmethod
    def _reap(step: str) -> dict[str, Any]:
        return {"expected": states.sources(step)[0].value, "next": states.target(step).value, "reason": LEASE_LOST_DEAD}

    async def prune(self, fence: Fence, before: datetime, limit: int, now: datetime) -> int:
        """See the port. The partitions' upkeep first, each step in a transaction of its
        own (detaching locks the partitioned tables until it commits), then the row delete."""
        d = self.driver
        retired = 0
        if not self._history_refused:
            try:
                retired = await self._retire_weeks(before, now)
            except StorePermissionDenied as exc:
                # A role given table rights only, not clockd_daemon's (grants.sql): the
                # weeks the migration made fill, then the DEFAULT takes the rest, and
                # history goes by the row delete as before. Said once.
                self._history_refused = True
                log.warning("history partitions not kept: %s; deleting history row by row", exc,
                            extra={"action": "history_partitions_refused"})  # fmt: skip
        params = {"before": d.instant(before), "limit": limit}

        def body() -> Body[int]:
            yield from self._advance_fence(fence)
            count = yield Run("prune", params, "count")
            return int(count)

        result: int = await self._write(body())
        return retired + result

    async def _retire_weeks(self, before: datetime, now: datetime) -> int:
        """``prune``'s partition upkeep: the weeks around ``now`` made, then every ended week
        with no live row dropped; the occurrences dropped. Nothing for a driver without
        partitions (``Driver.history`` None)."""
        d, history = self.driver, self.driver.history
        if history is None:
            return 0
        await self._write(history.extend({"since": d.instant(now - HISTORY_BEHIND),
                                          "upto": d.instant(now + HISTORY_AHEAD)}))  # fmt: skip
        retired = 0
        weeks: list[tuple[datetime, int, int]] = await self._read(history.census({"before": d.instant(before)}))
        for week, count, live in weeks:
            # A deposed leader's drop is the same verdict as its successor's: no fence. A
            # week with a live row stays whole (and is counted again at the next prune);
            # the row delete takes its ended rows.
            if not live and await self._write(history.drop({"week": week})):
                retired += count
                log.info("retired the history of the week of %s: %d occurrences", week.date(), count,
                         extra={"action": "history_week_retired", "count": count})  # fmt: skip
        return retired

    async def sweep_misfires(self, fence: Fence, limit: int, now: datetime) -> int:
        """See the port."""
        d = self.driver
        stamp = d.instant(now)
        params = {"now": stamp, "floor": d.duration(_MISFIRE_FLOOR), "limit": limit, **self._rules}

        def body() -> Body[int]:
            yield from self._advance_fence(fence)
            found = yield Run("misfire_pick", params)
            missed = misfire_verdicts(
                [
                    LateRow(did, occ, d.read(visible), policy, timedelta(microseconds=int(lateness)),
                            int(catch_up), int(newest), bool(newer))
                    for did, occ, visible, policy, lateness, catch_up, newest, newer in found
                ],
                d.read(stamp),
            )  # fmt: skip
            if not missed:
                return 0
            ids = d.array([m.occurrence_id for m in missed])
            marks = d.table("rows", ("ids", "reasons"), [(m.occurrence_id, d.text(m.reason)) for m in missed])
            mark = {**marks, "now": stamp, "expected": self._misfire_from, "next": states.target("misfire").value}
            yield Pipeline(
                (
                    Run("misfire_mark", mark, "none"),
                    Run("dispatch_delete", {"ids": d.array([m.dispatch_id for m in missed])}, "none"),
                    *d.slot_release({"ids": ids, "now": stamp}),
                )
            )
            return len(missed)

        result: int = await self._write(body())
        return result

    async def release_stale_slots(self, fence: Fence, limit: int, now: datetime) -> int:
        """See the port."""
        d = self.driver
        stamp = d.instant(now)

        def body() -> Body[int]:
            yield from self._advance_fence(fence)
            rows = yield Run("overlap_stale", {"limit": limit})
            stale = [row[0] for row in rows]
            if stale:
                yield Pipeline(d.slot_release({"ids": d.array(stale), "now": stamp}))
            return len(stale)

        result: int = await self._write(body())
        return result

    # -- occurrences: running, dead letters ----------------------------------------------------

    async def running_occurrences(self, schedule_id: str) -> list[Occurrence]:
        return await self._occurrences("occurrences_running", {"schedule_id": schedule_id})

    async def run_summaries(self, schedule_ids: Sequence[str]) -> dict[str, RunSummary]:
        d = self.driver
        params = {
            "ids": d.array(list(schedule_ids)),
            "waiting": d.array([S.SCHEDULED.value, S.ENQUEUED.value]),
            "depth": SUMMARY_DEPTH,
        }

        def body() -> Body[dict[str, RunSummary]]:
            rows = yield Run("run_summaries", params)
            return {
                sid: RunSummary(
                    d.opt_read(nxt),
                    d.opt_read(scheduled),
                    d.opt_read(started),
                    None if state is None else S(state),
                    exit_code,
                )
                for sid, nxt, scheduled, started, state, exit_code in rows
            }

        result: dict[str, RunSummary] = await self._read(body())
        return result

    async def list_dead(
        self,
        schedule_id: str | None = None,
        tenant: str | None = None,
        limit: int = 50,
        before: tuple[datetime, str] | None = None,
    ) -> list[Occurrence]:
        name = "dlq_list" if schedule_id is None else "dlq_list_by_schedule"
        params = {
            "schedule_id": schedule_id,
            "tenant": tenant,
            "limit": limit,
            "before_at": None if before is None else self.driver.instant(before[0]),
            "before_id": None if before is None else before[1],
        }
        return await self._occurrences(name, params, with_error=True)

    def _not_dead(self, occurrence_id: str) -> Body[ClockdError]:
        row = yield Run("occurrence_get", {"id": occurrence_id}, "one")
        if row is None:
            return NotFound(f"no occurrence {occurrence_id!r}")
        return Conflict(not_dead_message(self._occurrence(row)))

    async def _dead_letter(self, step: str, query: str, occurrence_id: str, reason: str, now: datetime) -> Occurrence:
        """``replay`` or ``drop`` one DEAD occurrence (``query``), then read it back."""
        d = self.driver
        params = {
            "id": occurrence_id,
            "now": d.instant(now),
            "reason": d.text(reason),
            "expected": states.sources(step)[0].value,
            "next": states.target(step).value,
        }

        def body() -> Body[Occurrence]:
            row = yield Run(query, params, "one")
            if row is None:
                raise (yield from self._not_dead(occurrence_id))
            if step == "replay":
                yield Run("dlq_dispatch", params, "none")
            back = yield Run("occurrence_get", {"id": occurrence_id}, "one")
            return self._occurrence(back)

        result: Occurrence = await self._write(body())
        return result

    async def replay_dead(self, occurrence_id: str, reason: str, now: datetime) -> Occurrence:
        """See the port."""
        return await self._dead_letter("replay", "dlq_replay", occurrence_id, reason, now)

    async def drop_dead(self, occurrence_id: str, reason: str, now: datetime) -> Occurrence:
        """See the port."""
        return await self._dead_letter("drop", "dlq_drop", occurrence_id, reason, now)

    # -- tenants -------------------------------------------------------------------------------

    async def set_tenant_limits(self, limits: TenantLimits, now: datetime) -> TenantLimits:
        """See the port. PostgreSQL: the upsert locks the row; the recount is a statement
        of its own."""
        params = {
            "tenant": limits.tenant,
            "max_schedules": limits.max_schedules,
            "max_running": limits.max_running,
            "max_triggers_per_minute": limits.max_triggers_per_minute,
            "catch_up_rate": limits.catch_up_rate,
            "now": self.driver.instant(now),
        }

        def body() -> Body[TenantLimits]:
            yield Run("tenant_limits_upsert", params, "none")
            yield Run("tenant_running_recount", {"tenant": limits.tenant, "running": S.RUNNING.value}, "none")
            return limits

        result: TenantLimits = await self._write(body())
        return result

    async def tenant_limits(self) -> list[TenantLimits]:
        def body() -> Body[list[TenantLimits]]:
            rows = yield Run("tenant_limits_all")
            return [TenantLimits(*row) for row in rows]

        result: list[TenantLimits] = await self._read(body())
        return result

    async def tenant_usage(self) -> list[TenantUsage]:
        def body() -> Body[list[TenantUsage]]:
            rows = yield Run("tenant_usage", {"running": S.RUNNING.value})
            return [TenantUsage(TenantLimits(*row[:5]), schedules=int(row[5]), running=int(row[6])) for row in rows]

        result: list[TenantUsage] = await self._read(body())
        return result

    # -- observation ---------------------------------------------------------------------------

    async def backlog(self, now: datetime) -> Backlog:
        d = self.driver
        params = {"now": d.instant(now)}

        def body() -> Body[Backlog]:
            due, outbox, running = yield Run("backlog", params, "one")
            rows = yield Run("queue_ready", params)
            queues = tuple(QueueReady(queue, int(ready), d.opt_read(oldest)) for queue, ready, oldest in rows)
            oldest_ready = [q.oldest_ready_at for q in queues if q.oldest_ready_at is not None]
            return Backlog(
                due_schedules=int(due),
                outbox=int(outbox),
                queued=sum(q.ready for q in queues),
                running=int(running),
                oldest_queued_at=min(oldest_ready, default=None),
                queues=queues,
            )

        result: Backlog = await self._read(body())
        return result

    # -- operator read paths -------------------------------------------------------------------

    async def reconcile_rows(self, start: datetime, end: datetime, schedule_id: str | None = None) -> ReconcileRows:
        """See the port: both statements in one snapshot (PostgreSQL: REPEATABLE READ,
        READ ONLY; SQLite: one read transaction, WAL)."""
        d = self.driver
        params = {"start": d.instant(start), "end": d.instant(end), "schedule_id": schedule_id}
        if schedule_id is None:
            names = ("reconcile_versions", "reconcile_occurrences")
        else:
            names = ("reconcile_versions_of", "reconcile_occurrences_of")

        def body() -> Body[ReconcileRows]:
            versions = yield Run(names[0], params)
            rows = yield Run(names[1], params)
            return ReconcileRows(
                schedules=self._histories(versions),
                occurrences=[self._with_error(row) for row in rows],
            )

        result: ReconcileRows = await self.driver.transaction(body(), "snapshot")
        return result

    def _histories(self, rows: Sequence[Sequence[Any]]) -> list[ScheduleHistory]:
        d = self.driver
        return histories_from_rows(rows, d.read, lambda doc: definition_from_dict(d.document(doc)))

    async def queue_stats(self, now: datetime) -> list[QueueStats]:
        d = self.driver

        def body() -> Body[list[QueueStats]]:
            rows = yield Run("queue_stats", {"now": d.instant(now), "running": S.RUNNING.value})
            return [
                QueueStats(queue, int(ready), int(running), int(staged), d.opt_read(oldest))
                for queue, ready, running, staged, oldest in rows
            ]

        result: list[QueueStats] = await self._read(body())
        return result

    async def next_visible(self, queues: Sequence[str], now: datetime) -> datetime | None:
        d = self.driver
        params = {"queues": d.array(list(dict.fromkeys(queues))), "now": d.instant(now)}

        def body() -> Body[datetime | None]:
            row = yield Run("next_visible", params, "one")
            return d.opt_read(row[0]) if row is not None else None

        result: datetime | None = await self._read(body())
        return result

    async def read_ahead_definitions(
        self, queues: Sequence[str], after: QueuePosition | None, now: datetime, limit: int
    ) -> ReadAhead:
        cache = self.definitions
        if limit <= 0 or not queues or cache.room == 0:
            return ReadAhead(0, 0, after, cache.room)
        d = self.driver
        # From `now` on: past every row visible at `now` (ids are positive).
        after_at, after_id = after if after is not None else (now, 2**63 - 1)
        params = {
            "queues": d.array(list(dict.fromkeys(queues))),
            "after_at": d.instant(after_at),
            "after_id": after_id,
            "limit": limit,
        }

        def body() -> Body[tuple[list[Sequence[Any]], list[Sequence[Any]]]]:
            rows = yield Run("queue_upcoming_definitions", params)
            wanted = cache.unknown((schedule_id, int(version)) for _, _, schedule_id, version in rows)[: cache.room]
            if not wanted:
                return rows, []
            found = yield Run("schedule_definitions", d.table("keys", ("schedule_ids", "versions"), wanted))
            return rows, found

        rows, found = await self._read(body())
        for schedule_id, version, name, target, retry, timeout_us in found:
            cache.put((schedule_id, int(version)), claim_parts(name, target, retry, timeout_us), ahead=True)
        if rows:
            last_at, last_id = rows[-1][0], rows[-1][1]
            after = (d.read(last_at), int(last_id))
        return ReadAhead(len(rows), len(found), after, cache.room)

    async def start_lag(self, since: datetime, now: datetime) -> LagStats:
        d = self.driver

        def body() -> Body[LagStats]:
            params = {"since": d.instant(since), "now": d.instant(now), "window": d.duration(MAX_WINDOW)}
            row = yield Run("start_lag", params, "one")
            return d.lag_stats(row)

        result: LagStats = await self._read(body())
        return result

    async def start_lag_histogram(self, at: datetime, now: datetime, bins: int) -> LagHistogram:
        d = self.driver
        params = {"at": d.instant(at), "now": d.instant(now), "bins": bins}

        def body() -> Body[LagHistogram]:
            # One row per non-empty bin, each carrying the totals (count, low, high).
            rows = yield Run("start_lag_histogram", params)
            counts = [0] * bins
            total, low, high = 0, 0.0, 0.0
            for n, lo, hi, index, in_bin in rows:
                total, low, high = int(n or 0), d.seconds(lo or 0), d.seconds(hi or 0)
                if index is not None:
                    counts[int(index)] = int(in_bin)
            return LagHistogram(total, low, high, tuple(counts))

        result: LagHistogram = await self._read(body())
        return result

    async def _count(self, name: str) -> int:
        def body() -> Body[int]:
            row = yield Run(name, {}, "one")
            return int(row[0])

        result: int = await self._read(body())
        return result

    async def live_schedules_count(self) -> int:
        return await self._count("live_schedules_count")

    async def dead_count(self) -> int:
        return await self._count("dead_count")

    async def not_run_counts(self, since: datetime, until: datetime) -> dict[tuple[OccurrenceState, str], int]:
        d = self.driver

        def body() -> Body[dict[tuple[OccurrenceState, str], int]]:
            rows = yield Run("not_run_counts", {"since": d.instant(since), "until": d.instant(until)})
            return {(OccurrenceState(state), str(kind)): int(n) for state, kind, n in rows}

        result: dict[tuple[OccurrenceState, str], int] = await self._read(body())
        return result

    # -- API: tokens, audit, pages (schema 0007) ---------------------------------------------
    # Rows are decoded and parameters built by clockd.store.api_rows.

    async def create_token(self, token: ApiToken) -> None:
        params = token_params(token, self.driver.instant)

        def body() -> Body[None]:
            try:
                yield Run("api_token_insert", params, "none")
            except Integrity:
                raise Conflict(token_conflict_message(token)) from None

        await self._write(body())

    async def get_token(self, token_id: str) -> ApiToken | None:
        d = self.driver

        def body() -> Body[ApiToken | None]:
            row = yield Run("api_token_get", {"id": token_id}, "one")
            return None if row is None else token_from_row(row, d.read, d.opt_read)

        result: ApiToken | None = await self._read(body())
        return result

    async def list_tokens(self, tenant: str | None = None) -> list[ApiToken]:
        d = self.driver

        def body() -> Body[list[ApiToken]]:
            rows = yield Run("api_tokens_list", {"tenant": tenant})
            return [token_from_row(row, d.read, d.opt_read) for row in rows]

        result: list[ApiToken] = await self._read(body())
        return result

    async def revoke_token(self, tenant: str, ref: str, now: datetime) -> ApiToken | None:
        d = self.driver

        def body() -> Body[ApiToken | None]:
            row = yield Run("api_token_revoke", {"tenant": tenant, "ref": ref, "now": d.instant(now)}, "one")
            return None if row is None else token_from_row(row, d.read, d.opt_read)

        result: ApiToken | None = await self._write(body())
        return result

    async def record_audit(self, entry: AuditEntry) -> int:
        params = audit_params(entry, self.driver.instant)

        def body() -> Body[int]:
            row = yield Run("audit_insert", params, "one")
            return int(row[0])  # INSERT … RETURNING id

        result: int = await self._write(body())
        return result

    async def audit_page(self, tenant: str | None, before: int | None, limit: int) -> list[AuditEntry]:
        d = self.driver

        def body() -> Body[list[AuditEntry]]:
            rows = yield Run("audit_page", {"tenant": tenant, "before": before, "limit": limit})
            return [audit_from_row(row, d.read) for row in rows]

        result: list[AuditEntry] = await self._read(body())
        return result

    async def schedules_page(self, tenant: str, query: SchedulePage) -> list[Schedule]:
        def body() -> Body[list[Schedule]]:
            rows = yield Run(schedule_page_query(query), schedule_page_params(tenant, query))
            return [self._schedule(row) for row in rows]

        result: list[Schedule] = await self._read(body())
        return result

    async def occurrences_page(self, tenant: str, query: OccurrencePage) -> list[Occurrence]:
        params = occurrence_page_params(tenant, query, self.driver.instant)

        def body() -> Body[list[Occurrence]]:
            rows = yield Run("occurrences_page", params)
            return [self._occurrence(row) for row in rows]

        result: list[Occurrence] = await self._read(body())
        return result


# The named blocks the engine itself runs (the drivers add those of their own steps);
# tests/contract/store/test_sql_parity.py checks both lists against both queries.sql.
ENGINE_QUERIES: Final = frozenset(
    {
        "fence_advance", "fence_get", "counter_next", "schedule_set_idempotency_key",
        "schedule_get_by_idempotency_key", "schedule_get_by_name", "schedule_get_deleted_by_name", "schedule_get",
        "schedules_list",
        "schedule_versions_list", "schedule_insert", "schedule_version_insert",
        "tenant_limits_lock_many", "tenant_schedules_count_many",
        "tenant_limits_lock", "tenant_schedules_count", "schedule_update", "schedule_version_close",
        "cancel_outbox", "cancel_dispatch", "cancel_occurrences", "occurrence_insert_manual", "outbox_insert",
        "occurrences_list", "occurrences_list_by_schedule", "occurrence_get", "occurrence_by_prefix",
        "attempts_list", "due_schedules", "due_shards", "materialize_advance", "schedule_definitions",
        "leases_extend", "leases_held", "finish_attempts", "finish_occurrences", "dispatch_delete",
        "dispatch_retry", "tenant_running_release", "release_attempts", "release_occurrences",
        "dispatch_unlease", "finish_by_index", "reap_by_index", "reap_attempts", "reap_retry",
        "reap_dead", "prune",
        "misfire_pick",
        "misfire_mark", "overlap_stale", "occurrences_running", "dlq_list", "dlq_list_by_schedule",
        "dlq_replay", "dlq_drop", "dlq_dispatch", "tenant_limits_upsert", "tenant_running_recount",
        "tenant_limits_all", "tenant_usage", "backlog", "queue_ready", "reconcile_versions", "reconcile_occurrences",
        "reconcile_versions_of", "reconcile_occurrences_of", "queue_stats", "next_visible", "start_lag",
        "live_schedules_count", "dead_count", "not_run_counts",
        "api_token_insert", "api_token_get", "api_tokens_list", "api_token_revoke", "audit_insert", "audit_page",
        "schedules_page", "occurrences_page", "run_summaries", "occurrences_set_reason",
        "start_lag_histogram", "occurrences_started_after", "schedule_cursor_move",
        "schedules_page_state", "schedules_page_label", "schedule_labels_insert", "schedule_labels_delete",
        "queue_vacuum_allowed", "queue_vacuum", "stale_statistics_analyze", "write_probe",
        "queue_upcoming_definitions",
    }
)  # fmt: skip

__all__ = ["ENGINE_QUERIES", "SqlStore"]
