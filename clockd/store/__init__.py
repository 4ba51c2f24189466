"""Store port: the contract every store keeps (SQLite embedded, PostgreSQL shared).

The port is implemented **once**, by the SQL store engine (``clockd.store.engine``),
over a narrow driver protocol (``clockd.store.driver``); each dialect keeps only its
driver (``<dialect>/store.py``) and its SQL (``<dialect>/queries.sql``, named blocks;
``<dialect>/migrations/NNNN_name.sql``, the same numbers in both). One contract suite
(``tests/contract/store``) runs over both; ``test_sql_parity.py`` checks that every
query the engine and the drivers run exists, and that no block is left that nobody
runs. docs/store.md draws the design and the path of one occurrence through it.

Rules that hold for every method:

* Every time-dependent method takes ``now`` (aware UTC). No adapter reads the
  wall clock for a decision (``clockctl`` passes its own ``now`` too).
* Hot paths are **batches**: one call moves many rows with set-based SQL, in one
  transaction, never a row at a time.
* Every state transition is a conditional write (``… WHERE state = expected
  [AND lease_token = …]``), its expected and next states taken from the one table of
  allowed transitions (``clockd.core.states``). A write that matches no row lost a
  race: it is reported in the result (rejected tokens, conflicts), never retried
  blindly.
* Writes made under a role (materializer, leader) carry a ``Fence``. In the
  same transaction the adapter advances ``fences(resource, token)`` to the
  fence's token only if the stored token is not larger; if it is larger, the
  transaction commits **nothing** and raises ``FencedOut``. (The fence check
  lives in the engine's ``SqlStore._advance_fence``.)
* Driver errors are translated: ``StoreUnavailable`` (cannot connect / disk),
  ``StoreLocked``, ``SchemaMismatch``, ``Conflict`` (duplicate name),
  ``NotFound``. Nothing half-written survives a raised error.

Tables (both adapters; names matter for the parity test):

* ``schedules``: the current definition, ``version``, ``state``, ``next_run_at``
  cursor, ``shard``; index on ``(shard, next_run_at)`` for active schedules.
* ``schedule_versions``: every definition a schedule ever had.
* ``occurrences``: one row per planned instant, ``UNIQUE(schedule_id,
  schedule_version, scheduled_for)``; the deterministic id is the primary key.
* ``outbox``: occurrences written by the materializer, not yet in the queue.
* ``dispatch``: the queue workers claim from (``visible_at``, lease columns).
* ``attempts``: one row per try, keyed by ``(occurrence_id, attempt)``, complete
  (outcome, end, output) once the try ends. While a try runs, its record is its lease
  (the ``dispatch`` row: token, worker, ``leased_at``); ``list_attempts`` shows it from
  the claim on, outcome ``running``. The claim writes no attempt row and ``release``
  leaves none; the row is written once, when the try ends (finish, reap), in both stores
  (PostgreSQL since schema 0005, SQLite since 0008). A ``running`` row written before
  those (or by an older clockd) is completed in place by finish and reap.
* ``fences``, ``counters``, ``schema_migrations``.
* ``overlap_slots`` (schema 0002): per schedule whose overlap policy is not
  ``allow``, the occurrence holding it (running, or retrying) and the one
  queue_one lets wait. Written only inside the claim, finish, reap, release and
  the leader's sweeps, so "is one running?" is decided in the claim's own
  transaction, never checked first and acted on later.
* ``tenant_limits`` (schema 0002): per-tenant caps, and for capped tenants the
  running count and this minute's claims, kept in the same transactions.
* ``api_tokens``, ``audit_log`` (schema 0007): the HTTP API's bearer tokens (a hash
  only, never the token) and the log of every write made through it.

Policies (DESIGN.md §4), where each is enforced:

* misfire: at materialization (``clockd.core.planning``), and for queued rows no
  worker reached in time by the leader's ``sweep_misfires``;
* overlap and tenant caps: in ``claim`` (round-robin across tenants inside a
  batch, so one tenant's burst never hides another tenant's row);
* ``max_schedules``: in ``create_schedule`` / ``apply_schedules``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

from clockd.core.model import (
    Attempt,
    AttemptOutcome,
    Occurrence,
    OccurrenceState,
    OverlapPolicy,
    Schedule,
    ScheduleDef,
    ScheduleState,
    Target,
    TenantLimits,
    TenantUsage,
)
from clockd.core.planning import DueSchedule, PlannedOccurrence


@dataclass(frozen=True, slots=True)
class Fence:
    """A role's fencing token for one resource (``"leader"`` or ``"shard:<n>"``)."""

    resource: str
    token: int


class NewOccurrence(NamedTuple):
    """An occurrence the materializer plans. ``state`` is SCHEDULED, or MISSED with a reason.

    A NamedTuple (immutable, one ``tuple.__new__``), not a frozen dataclass, as
    :class:`~clockd.core.planning.PlannedOccurrence`: one per occurrence on the
    materializer's hot path."""

    id: str
    schedule_id: str
    version: int
    scheduled_for: datetime
    available_at: datetime
    queue: str
    tenant: str
    max_attempts: int
    state: OccurrenceState = OccurrenceState.SCHEDULED
    reason: str | None = None
    # The planning version's overlap policy (schema 0018), which the claim reads; None
    # leaves the claim to read the schedule's, as for rows written before.
    overlap: OverlapPolicy | None = None

    @classmethod
    def planned(
        cls, schedule: DueSchedule, planned: PlannedOccurrence, available_at: datetime | None = None
    ) -> NewOccurrence:
        """``planned`` (core.planning) as ``schedule``'s current version writes it: the one
        mapping the materializer and an update's re-plan share. ``available_at`` overrides
        the planned one (the materializer's catch-up pacing)."""
        return cls(
            id=planned.id,
            schedule_id=schedule.id,
            version=schedule.version,
            scheduled_for=planned.scheduled_for,
            available_at=planned.available_at if available_at is None else available_at,
            queue=schedule.queue,
            tenant=schedule.tenant,
            max_attempts=schedule.max_attempts,
            state=planned.state,
            reason=planned.reason,
            overlap=schedule.overlap,
        )


@dataclass(frozen=True, slots=True)
class CursorAdvance:
    """Move ``schedule_id``'s cursor from ``expected`` to ``next_run_at`` (None: exhausted),
    only if the schedule is still active at ``version`` with that cursor."""

    schedule_id: str
    version: int
    expected: datetime | None
    next_run_at: datetime | None


@dataclass(frozen=True, slots=True)
class MaterializeResult:
    inserted: int  # occurrence rows newly written (conflicts with existing ids are skipped)
    advanced: int  # cursors moved
    stale: int  # cursor advances that matched nothing (schedule changed meanwhile)
    # direct: how late each occurrence written ENQUEUED was staged (now - available_at,
    # seconds, 0 when ahead): the `enqueued` step of clockd_schedule_lag_seconds.
    enqueue_lags: tuple[float, ...] = ()


class Relayed(NamedTuple):
    """What one ``Store.relay`` moved: the number of rows, and how late each was staged
    (``now - available_at``, seconds, 0 when ahead), in no particular order."""

    moved: int
    enqueue_lags: tuple[float, ...]


class Claim(NamedTuple):
    """One claimed occurrence: everything a worker needs to run it and report back.
    The engine builds it positionally on the claim's hot path: mypy checks each field's
    type there, so a reordering that mixes same-typed fields needs that call fixed too.
    A NamedTuple (as :class:`Completion`): one per execution, one ``tuple.__new__``, where a frozen
    dataclass set each field through ``object.__setattr__`` (~1.7 µs for these 14)."""

    occurrence_id: str
    lease_token: str
    attempt: int
    schedule_id: str
    schedule_name: str
    version: int
    scheduled_for: datetime
    target: Target
    timeout: timedelta | None
    max_attempts: int
    retry_backoff: timedelta
    retry_backoff_max: timedelta
    permanent_exit_codes: tuple[int, ...]
    lease_until: datetime


class Completion(NamedTuple):
    """The outcome of one attempt. ``next_state`` is SUCCEEDED, DEAD or RETRY_WAIT
    (then ``retry_at`` says when the occurrence becomes claimable again). A NamedTuple:
    one per execution (see :class:`Claim`)."""

    lease_token: str
    outcome: AttemptOutcome
    next_state: OccurrenceState
    retry_at: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    output: str = ""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Reaped:
    occurrence_id: str
    attempt: int
    next_state: OccurrenceState  # RETRY_WAIT (redelivered) or DEAD


@dataclass(frozen=True, slots=True)
class NewSchedule:
    """A schedule to create (as ``create_schedule`` would): active, version 1.

    ``texts``: ``codec.definition_texts(definition)``, when the caller made them ahead —
    apply's planner encodes each create while the database writes the previous batch, so
    the write does not (the store encodes the definition itself when they are None)."""

    schedule_id: str
    definition: ScheduleDef
    shard: int
    next_run_at: datetime | None
    texts: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class ScheduleChange:
    """A change to write (as ``change_schedule`` would): update, pause, resume, or
    delete (``state`` DELETED, ``next_run_at`` None)."""

    schedule_id: str
    expected_version: int
    definition: ScheduleDef
    state: ScheduleState
    next_run_at: datetime | None
    reason: str


@dataclass(frozen=True, slots=True)
class Replanned:
    """One instant a change took over from an older version (``change_schedule``).

    The older version's occurrence ``replaced`` had not started (no attempt) and is now
    CANCELED. When the new definition still fires at ``scheduled_for``,
    ``occurrence_id`` is its deterministic id under ``version`` and ``state`` what the
    materializer would have planned (SCHEDULED, or MISSED by the misfire policy);
    otherwise both are None: the instant is dropped, and the canceled row says so."""

    schedule_id: str
    version: int
    scheduled_for: datetime
    replaced: str
    occurrence_id: str | None
    state: OccurrenceState | None

    @property
    def kept(self) -> bool:
        return self.occurrence_id is not None


class ScheduleChanged(NamedTuple):
    """What ``change_schedule`` wrote: the schedule at its new version, how many older
    occurrences it canceled, and the instants among them it re-planned or dropped."""

    schedule: Schedule
    canceled: int
    replanned: tuple[Replanned, ...] = ()


@dataclass(frozen=True, slots=True)
class AppliedSchedules:
    created: list[Schedule]  # in the order given
    changed: list[Schedule]  # in the order given, at their new version
    canceled: int  # occurrences of older versions canceled by the changes
    replanned: list[Replanned] = field(default_factory=list)  # of all changes, in order


@dataclass(frozen=True, slots=True)
class QueueReady:
    queue: str
    ready: int  # unleased, visible now: waiting for a worker
    oldest_ready_at: datetime | None


@dataclass(frozen=True, slots=True)
class Backlog:
    """What waits, by stage. ``queued`` counts the rows a worker could claim now, not the
    rows staged for later (planned ahead by direct dispatch, waiting out a retry backoff,
    parked): those are ``queue_stats``' ``staged``, which costs a read of every one."""

    due_schedules: int  # active schedules whose cursor is due now
    outbox: int
    queued: int  # dispatch rows claimable now (unleased, visible_at <= now)
    running: int  # dispatch rows leased
    oldest_queued_at: datetime | None  # the oldest claimable row's visible_at
    queues: tuple[QueueReady, ...] = ()  # per queue with an unleased row, by name


# A queue row's place in claim order: (visible_at, dispatch id).
QueuePosition = tuple[datetime, int]


@dataclass(frozen=True, slots=True)
class ReadAhead:
    """What one ``read_ahead_definitions`` call did: queue rows ``looked_at``, definitions
    ``read`` into the claim cache, where the next call goes on (``after``: the last row
    looked at, or the position it was given when it found none) and the ``room`` left in
    the cache (0: reading ahead would only be refused)."""

    looked_at: int
    read: int
    after: QueuePosition | None
    room: int


@dataclass(frozen=True, slots=True)
class LateRow:
    """A queued row the misfire sweep looks at (``misfire_pick``)."""

    dispatch_id: int
    occurrence_id: str
    claimable_since: datetime  # dispatch visible_at: available_at, or the retry instant
    policy: str
    max_lateness: timedelta
    catch_up_limit: int
    newest_rank: int  # 1 = the latest late row of its schedule
    newer_due: bool  # a newer instant of the schedule is due and not missed


@dataclass(frozen=True, slots=True)
class Missed:
    dispatch_id: int
    occurrence_id: str
    reason: str


class Store(Protocol):
    """The store port. See the module docstring for the rules every method keeps."""

    # -- lifecycle ---------------------------------------------------------------

    async def open(self) -> None:
        """Connect and check the schema. Raises ``StoreUnavailable`` or ``SchemaMismatch``
        (``migrate`` was not run, or the schema is newer than this release knows)."""
        ...

    async def close(self) -> None: ...

    async def migrate(self) -> list[str]:
        """Apply pending numbered migrations in order, each in its own transaction,
        recording them in ``schema_migrations``; returns the names applied. Safe to run
        concurrently (PostgreSQL: advisory lock). Refuses a schema newer than it knows."""
        ...

    # -- schedules (clockctl) ----------------------------------------------------

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
        """Insert an active schedule at version 1 and its first ``schedule_versions`` row,
        with ``idempotency_key`` if given. Raises ``Conflict`` when the tenant already has a
        live schedule of that name, or of that idempotency key; ``QuotaExceeded`` when the
        tenant already has ``max_schedules`` live schedules (checked in the same
        transaction: PostgreSQL locks the tenant's ``tenant_limits`` row first, so two
        concurrent creates cannot both take the last place)."""
        ...

    async def get_schedule_by_idempotency_key(self, tenant: str, key: str) -> Schedule | None:
        """The live schedule created with that idempotency key."""
        ...

    async def get_schedule(self, tenant: str, name: str) -> Schedule | None:
        """The live (not deleted) schedule of that name."""
        ...

    async def get_deleted_schedule(self, tenant: str, name: str) -> Schedule | None:
        """The schedule of that name deleted last (its runs stay until retention prunes
        them); None when none was. An index probe (schema 0021)."""
        ...

    async def get_schedule_by_id(self, schedule_id: str) -> Schedule | None: ...

    async def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        """Live schedules ordered by name."""
        ...

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
        """Update, pause, resume or delete: write version ``expected_version + 1`` with
        ``definition``/``state``/``next_run_at``, close the old ``schedule_versions`` row and
        open a new one, and CANCEL (with ``reason``) every occurrence of an older version
        that no worker has claimed (SCHEDULED, ENQUEUED, RETRY_WAIT; their outbox and
        dispatch rows go). Manual occurrences are canceled only on delete.

        When the new state is active, the canceled instants that never started (no
        attempt) are **re-planned**: each one the new definition still fires at gets an
        occurrence under the new version (its deterministic id, misfire policy and window
        applied as the materializer would, outbox row included); the others stay CANCELED
        with the reason that the new version does not fire then. A RETRY_WAIT occurrence
        already ran once: it is canceled, never re-planned (that could run the instant's
        side effect twice under two ids). All in one transaction.

        Returns the schedule, the number canceled and the ``Replanned`` instants. Raises
        ``Conflict`` when the stored version is not ``expected_version`` (someone else
        changed it) or the new name is taken."""
        ...

    async def apply_schedules(
        self,
        creates: Sequence[NewSchedule],
        changes: Sequence[ScheduleChange],
        now: datetime,
    ) -> AppliedSchedules:
        """``clockctl apply``: many creates and changes in **one** transaction, all or nothing.

        Each change is written exactly as ``change_schedule`` writes it (version bump,
        ``schedule_versions`` rows, unclaimed occurrences of older versions CANCELED with
        the change's ``reason`` and re-planned under the new version where it still fires;
        a DELETED change also cancels manual ones), then each
        create exactly as ``create_schedule`` writes it (``created_at = updated_at =
        now``, the anchor of ``every`` schedules). Changes go first, so a name freed by a
        delete may be reused by a create of the same call. Raises ``Conflict`` and commits
        **nothing** when any change's stored version is not ``expected_version`` or its
        schedule was deleted meanwhile, or when a create's name (or id) is taken by a
        live schedule of its tenant or by another create of the call; ``QuotaExceeded``
        (nothing committed) when the creates would pass a tenant's ``max_schedules``; of
        several faults, the one writing the creates one by one in order meets first. Empty
        input commits nothing and returns empty lists. ``creates`` is read in order, a
        slice at a time, as the transaction writes it (``clockctl apply`` hands in a
        sequence that plans each slice as it is read, and raises — rolling back — when the
        plan has a problem)."""
        ...

    async def schedule_versions(
        self, schedule_id: str
    ) -> list[tuple[int, datetime, datetime | None, ScheduleDef, ScheduleState]]:
        """(version, valid_from, valid_to, definition, state) oldest first."""
        ...

    # -- occurrences (clockctl) --------------------------------------------------

    async def add_manual_occurrence(
        self, schedule: Schedule, occurrence_id: str, max_attempts: int, now: datetime
    ) -> Occurrence:
        """``run-now``: an occurrence due ``now`` with its own id, straight into the outbox."""
        ...

    async def list_occurrences(
        self, schedule_id: str | None = None, limit: int = 50, before: datetime | None = None
    ) -> list[Occurrence]:
        """Newest ``scheduled_for`` first; only those scheduled at or before ``before`` if given."""
        ...

    async def get_occurrence(self, id_or_prefix: str) -> Occurrence | None:
        """By full id, or by a unique prefix of at least 6 characters (``Conflict`` if
        ambiguous)."""
        ...

    async def list_attempts(self, occurrence_id: str) -> list[Attempt]:
        """Oldest first."""
        ...

    # -- materializer --------------------------------------------------------------

    async def due_schedules(self, shards: Sequence[int], until: datetime, limit: int) -> list[DueSchedule]:
        """Active schedules of ``shards`` whose ``next_run_at <= until``, earliest first, as
        their planning inputs only (``DueSchedule``: equal to ``DueSchedule.of`` the whole
        schedule; the whole definition is not decoded). Answered from the
        ``(shard, next_run_at)`` index, never a scan of all schedules."""
        ...

    async def due_shards(self, shards: Sequence[int], until: datetime) -> list[tuple[int, datetime]]:
        """The shards among ``shards`` with at least one active schedule whose
        ``next_run_at <= until``, each with its earliest such cursor, the earliest first
        (ties by shard number). One index probe per shard: the materializer's idle tick
        costs one round trip, and its busy ticks read and write shard by shard; the
        earliest cursors give how far ahead the shards are planned
        (``clockd_materializer_lead_seconds``)."""
        ...

    async def materialize(
        self,
        fence: Fence,
        occurrences: Sequence[NewOccurrence],
        cursors: Sequence[CursorAdvance],
        now: datetime,
        *,
        direct: bool = False,
    ) -> MaterializeResult:
        """The materializer's transaction. In one transaction: advance the fence (or raise
        ``FencedOut`` and commit nothing); move each cursor only if the schedule is still
        active at that version with the expected cursor; insert the occurrences of the
        schedules whose cursor moved (``ON CONFLICT DO NOTHING`` on the id); write an
        outbox row for every inserted SCHEDULED occurrence. MISSED ones get no outbox row.

        ``direct`` (the ``direct_dispatch`` setting): the built-in queue is a table of this
        same database, so this transaction is already the transactional outbox; each
        inserted SCHEDULED occurrence is written ENQUEUED (``enqueued_at = now``) with its
        ``dispatch`` row (``visible_at = available_at``) instead, exactly as the relay
        would have moved it, and no outbox row. Nothing else changes for claims."""
        ...

    # -- relay ---------------------------------------------------------------------

    async def relay(self, until: datetime, limit: int, now: datetime) -> Relayed:
        """Move up to ``limit`` outbox rows with ``available_at <= until`` into ``dispatch``
        (``visible_at = available_at``), mark their occurrences ENQUEUED with
        ``enqueued_at = now``, delete the outbox rows. Idempotent by occurrence id; safe with
        several relays at once. Returns the number moved and how late each was staged."""
        ...

    # -- worker ----------------------------------------------------------------------

    async def claim(
        self,
        queues: Sequence[str],
        worker_id: str,
        limit: int,
        lease_for: timedelta,
        now: datetime,
    ) -> list[Claim]:
        """Claim up to ``limit`` visible dispatch rows (``visible_at <= now``, not leased) of
        ``queues``, oldest ``visible_at`` first, skipping rows other claimers hold. Each gets a
        fresh ``lease_token`` and ``lease_until = now + lease_for``; its occurrence becomes
        RUNNING with ``attempts + 1`` (and ``started_at`` on the first attempt), and the
        attempt is running: ``list_attempts`` shows it (outcome ``running``) until it ends
        (see ``attempts`` above for where that is stored). Only occurrences still ENQUEUED
        or RETRY_WAIT (``states.sources("claim")``) are claimed: a canceled one is never
        handed out. Lease tokens are 128 random bits (hex) made by the engine."""
        ...

    # The claim above also enforces, in the same transaction (one statement chain with
    # SKIP LOCKED in PostgreSQL — claim_plain when there is nothing below to judge, else
    # claim_lease: docs/store.md, "The claim with nothing to judge"):
    # * fairness: per queue, rows are picked as a share of each tenant's oldest (a skip
    #   scan over the tenants with queued rows) plus the queue's oldest, and started in
    #   round-robin order across tenants (every tenant's n-th row before any n+1-th);
    # * tenant caps (``tenant_limits``): at most ``max_running`` leased rows and
    #   ``max_triggers_per_minute`` claims per UTC minute per tenant; the rest wait;
    # * overlap (``overlap_slots``): for a schedule whose policy is ``skip`` or
    #   ``queue_one``, only the slot's holder (or, if free, its oldest row) may start; with
    #   one running, ``skip`` ends the others SKIPPED_OVERLAP (the reason names the running
    #   occurrence), ``queue_one`` keeps the oldest as the slot's waiter (still ENQUEUED,
    #   but out of the queue: no dispatch row until the holder ends) and skips the rest.
    #   Two claimers never both start one schedule: PostgreSQL locks the slot row (SKIP
    #   LOCKED: the loser leaves that schedule's rows for its next claim), SQLite
    #   serializes writers.
    # A RETRY_WAIT holder keeps its slot until it ends; finish (SUCCEEDED / DEAD), reap
    # (DEAD) and the misfire sweep hand the slot to the waiter, which is claimable at once.

    async def next_visible(self, queues: Sequence[str], now: datetime) -> datetime | None:
        """When the next unleased row of ``queues`` becomes visible: the earliest
        ``visible_at`` after ``now`` (a run queued ahead of its time, a retry waiting out
        its backoff), or None. Not a promise that it will be claimable then (caps, overlap,
        another worker): an idle worker wakes at this time instead of at its next poll, and
        a claim decides."""
        ...

    async def read_ahead_definitions(
        self, queues: Sequence[str], after: QueuePosition | None, now: datetime, limit: int
    ) -> ReadAhead:
        """Read into the claim path's definition cache what the claims of the next ``limit``
        unleased rows of ``queues`` will take from their definitions: the rows after
        ``after`` in claim order (visible_at, id), or from ``now`` on when None. An idle
        worker calls it before a burst staged in the queue is due, so that the burst's
        claims find their definitions cached instead of reading them inside the claim's
        transaction. Reads only (nothing locked), only definitions not cached yet, and
        nothing once the cache is full (it would evict what the claims use). The position
        returned (``ReadAhead.after``) is where the next call goes on: rows staged after
        it since."""
        ...

    async def extend_leases(self, tokens: Sequence[str], lease_for: timedelta, now: datetime) -> set[str]:
        """Heartbeat: push ``lease_until`` to ``now + lease_for`` for the tokens still held.
        Returns the tokens that are still held (a missing one was reaped: stop that job).
        Never waits for a row another session holds (a finish or release ending it, a
        reaper taking an expired lease): that lease is not extended this time and counts
        as held; the next heartbeat extends it or finds it gone."""
        ...

    async def finish(self, completions: Sequence[Completion], now: datetime) -> set[str]:
        """Record outcomes, each conditional on its lease token. The attempt's row is
        written (or completed) with its outcome, end, exit code, signal and output.
        SUCCEEDED/DEAD: dispatch row deleted, occurrence finished (a DEAD one's reason is
        the worker's error, or ``attempt N <outcome> (exit code C)``). RETRY_WAIT: dispatch
        row unleased with ``visible_at = retry_at``. Returns the tokens accepted; a stale
        token (reaped and re-claimed meanwhile) changes nothing. ``ValueError`` for a
        ``next_state`` ``finish`` cannot lead to, or an outcome of ``running``."""
        ...

    async def release(self, tokens: Sequence[str], now: datetime) -> int:
        """Give back claims that were never started (shutdown): the running attempt is
        forgotten (it leaves no row in ``list_attempts``), ``attempts`` decremented, the
        occurrence is claimable again at once."""
        ...

    # -- leader ----------------------------------------------------------------------

    async def reap_expired(self, fence: Fence, limit: int, now: datetime) -> list[Reaped]:
        """Leases with ``lease_until < now``: the attempt is recorded LOST; the occurrence
        is redelivered at once (RETRY_WAIT) if it has attempts left, else DEAD (reason
        ``lease expired on attempt N of M …``). Fenced. About ``limit`` runs a call: the
        oldest leases first; PostgreSQL reaps whole claimed batches (schema 0022), as many
        as hold ``limit`` open runs (the first whatever its size)."""
        ...

    async def prune(self, fence: Fence, before: datetime, limit: int, now: datetime) -> int:
        """Delete terminal occurrences both due and finished before ``before`` (and their
        attempts), at most ``limit``. Both: a run canceled ahead of its instant stays until
        that instant is as old, and the PostgreSQL store finds them by due time (no index
        there may name finished_at: the finish's update stays HOT, schema 0006).

        The PostgreSQL store keeps history in weekly partitions (schema 0017): first it
        makes the partitions of the weeks around ``now`` that are missing, then drops whole
        the weeks that ended before ``before`` whose every occurrence is terminal and
        finished before it (however many: a week is a few catalog changes), then deletes
        up to ``limit`` rows as above. The number returned counts both."""
        ...

    async def sweep_misfires(self, fence: Fence, limit: int, now: datetime) -> int:
        """The leader's misfire sweep: queued occurrences (ENQUEUED / RETRY_WAIT, not
        run-now) claimable for longer than their schedule's ``max_lateness`` (measured from
        the row's ``visible_at``: its ``available_at``, or its retry instant) become MISSED
        with the reason, per policy (``clockd.core.planning.sweep_verdict``): skip all;
        fire_once all but the latest of each schedule, and that one too when a newer
        instant is already due; catch_up all but the ``catch_up_limit`` latest. The queue
        rows go; overlap slots they held pass on. Looks at the oldest ``limit`` waiting rows
        of each queue to find the schedules concerned. Fenced; returns the number MISSED."""
        ...

    async def release_stale_slots(self, fence: Fence, limit: int, now: datetime) -> int:
        """Overlap slots whose holder ended without releasing them (canceled or missed while
        it waited to retry) pass to their waiter or become free. Fenced; returns how many."""
        ...

    # -- occurrences: running, dead letters ---------------------------------------------

    async def running_occurrences(self, schedule_id: str) -> list[Occurrence]:
        """The schedule's RUNNING occurrences, oldest first (``clockctl update`` reports them)."""
        ...

    async def run_summaries(self, schedule_ids: Sequence[str]) -> dict[str, RunSummary]:
        """For each schedule of a page (``clockctl list``, the dashboard): when its next
        planned occurrence starts — the earliest ``available_at`` of its occurrences still
        waiting to run (SCHEDULED or ENQUEUED), looked for among its
        :data:`SUMMARY_DEPTH` newest — and its latest occurrence that started. One
        statement; each schedule is reached through ``occurrences_by_schedule``."""
        ...

    async def list_dead(
        self,
        schedule_id: str | None = None,
        tenant: str | None = None,
        limit: int = 50,
        before: tuple[datetime, str] | None = None,
    ) -> list[Occurrence]:
        """The dead-letter queue: DEAD occurrences (of one schedule, or of a tenant, or all),
        the most recently dead first, with ``last_error`` filled in. ``before``: the
        ``(finished_at, id)`` of the last one of the page before (a DEAD occurrence's
        ``finished_at`` is when it died): the next page, unmoved by new dead letters."""
        ...

    async def replay_dead(self, occurrence_id: str, reason: str, now: datetime) -> Occurrence:
        """A DEAD occurrence back into the queue, claimable ``now``: same id, state
        ENQUEUED, one attempt more allowed than it has had (the next claim numbers it
        ``attempts + 1``), ``reason`` noted. ``NotFound`` / ``Conflict`` (not DEAD)."""
        ...

    async def drop_dead(self, occurrence_id: str, reason: str, now: datetime) -> Occurrence:
        """A DEAD occurrence leaves the dead-letter queue: CANCELED with ``reason``, its
        attempts and ``last_error`` kept until retention. ``NotFound`` / ``Conflict``."""
        ...

    # -- tenants ------------------------------------------------------------------------

    async def set_tenant_limits(self, limits: TenantLimits, now: datetime) -> TenantLimits:
        """Write a tenant's limits (every field: None removes that limit) and recount its
        running occurrences, in one transaction."""
        ...

    async def tenant_limits(self) -> list[TenantLimits]:
        """Every tenant that has limits, by name."""
        ...

    async def tenant_usage(self) -> list[TenantUsage]:
        """Every tenant with live schedules or limits, by name, with what it uses."""
        ...

    # -- coordination and observation ----------------------------------------------

    async def next_token(self, resource: str) -> int:
        """A new fencing token for ``resource`` from a counter (local coordinator)."""
        ...

    async def backlog(self, now: datetime) -> Backlog:
        """What waits, by stage, and per queue the rows claimable now (see ``Backlog``): the
        leader's 10-second sample, so it reads no row staged for later."""
        ...

    async def server_time(self) -> datetime:
        """The database server's clock (SQLite: the local clock), for clock-offset checks."""
        ...

    async def probe_write(self) -> None:
        """Raise ``StoreError`` if this store cannot write now; keep nothing. For
        ``/healthz``: reads may work while every write fails (a disk turned read-only), and
        an idle daemon writes nothing that could fail. SQLite writes its header's
        ``user_version`` (0) again: a real page write and commit on the store's disk;
        PostgreSQL only runs a write transaction's round trip — a server that cannot write
        its WAL stops, which ``store_reachable`` shows, and a full data disk fails the
        writes that do happen (``STORE_WRITES``)."""
        ...

    async def vacuum_queue(self) -> bool:
        """Reclaim the queue's dead row versions now; the leader calls it every
        ``queue_vacuum_every``. PostgreSQL: ``VACUUM (SKIP_LOCKED, TRUNCATE false) dispatch``. Every
        execution leaves dead versions of its queue row (the claim's update, the finish's
        delete) and their entries at the head of the ready indexes, which every claim
        walks until a vacuum removes them; autovacuum visits a table at most once per
        ``autovacuum_naptime`` (a minute by default, server-wide), by when 10,000
        executions/s have left ~600,000 (README "Round two"). Then ``ANALYZE (SKIP_LOCKED)``
        of each hot table — the queue, the history's partitions — whose statistics count
        fewer rows than it has pages while over 1,000 rows changed since its last ANALYZE:
        a queue VACUUMed empty keeps its pages, a week's partition counted beside the first
        batch written to it counts none, and either is otherwise planned as one row until
        autovacuum's next ANALYZE (claims and finishes of 500 took seconds; the SQL of
        ``stale_statistics_analyze`` says why). Returns False when this role may not
        vacuum the table (only its owner, the database's owner or a superuser may; the
        same for ANALYZE), having done nothing. SQLite: nothing to reclaim, True."""
        ...

    # -- operator read paths (clockctl reconcile / explain / status, the leader's samples) --
    # Reads only: no fence, no lock held past the call. Each is one or two set-based
    # statements; none scans a table the hot paths write, except ``dead_count`` (the
    # ``occurrences_dead`` partial index) and ``queue_stats`` (the queue, which is small).

    async def reconcile_rows(self, start: datetime, end: datetime, schedule_id: str | None = None) -> ReconcileRows:
        """What the reconciler compares, for instants in ``[start, end]`` (inclusive), from
        ONE consistent snapshot (SQLite: one transaction; PostgreSQL: a REPEATABLE READ,
        READ ONLY transaction):

        * ``schedules``: every schedule (or only ``schedule_id``) that had a version in force
          during the range — not counting one deleted before ``start`` — or that has an
          occurrence in it, with all its versions oldest first;
        * ``occurrences``: the planned (not run-now) occurrences of those schedules with
          ``scheduled_for`` in the range, any state.

        One statement per table: versions joined to their schedule, then occurrences."""
        ...

    async def queue_stats(self, now: datetime) -> list[QueueStats]:
        """Per queue (by name): rows claimable now (unleased, ``visible_at <= now``), rows
        leased, rows staged for later, and the oldest claimable ``visible_at``."""
        ...

    async def start_lag(self, since: datetime, now: datetime) -> LagStats:
        """Lag from due (``available_at``) to the first attempt's start, over occurrences
        due in ``[since, now]``: ``started_at - available_at``, or ``now - available_at``
        for one still waiting (so a stalled queue raises the figures instead of hiding);
        occurrences that will never start (MISSED, SKIPPED_OVERLAP, CANCELED before a
        start) do not count. PostgreSQL: ``percentile_cont``; SQLite: the same linear
        interpolation, from the two neighbouring rows of each rank (ORDER BY … OFFSET)."""
        ...

    async def start_lag_histogram(self, at: datetime, now: datetime, bins: int) -> LagHistogram:
        """Exact histogram of the start lags of EVERY occurrence due at ``at`` (its
        ``scheduled_for``; the dashboard's top-of-hour burst), counted by the store however
        many there are (nothing is sampled or capped). A lag is as in :meth:`start_lag`
        (``now - available_at`` for one still waiting; never-starting ones do not count);
        ``bins`` equal bins from ``min(0, lowest lag)`` to the highest, bin ``i`` holding
        ``low + i·width <= lag < low + (i+1)·width`` (the last bin includes ``high``)."""
        ...

    async def live_schedules_count(self) -> int:
        """Schedules not deleted (active and paused)."""
        ...

    async def dead_count(self) -> int:
        """DEAD occurrences: the size of the dead-letter queue (``occurrences_dead``)."""
        ...

    async def not_run_counts(self, since: datetime, until: datetime) -> dict[tuple[OccurrenceState, str], int]:
        """MISSED and SKIPPED_OVERLAP occurrences that ended in ``[since, until)``, by
        (state, kind): ``misfire`` (already late when materialized: never queued),
        ``lateness`` (queued, but no worker reached it within max_lateness: the leader's
        sweep) or ``overlap``. Bounded labels for metrics."""
        ...

    # -- API: tokens, audit, pages (schema 0007; clockd.api) --------------------------
    # Pages are keyset reads: each starts after its cursor in an index order and stops at
    # ``limit`` (never load-all-then-slice), so a page costs the same at any table size
    # and a row written or removed meanwhile moves no other row across a page boundary.

    async def create_token(self, token: ApiToken) -> None:
        """Store a token (its hash only). ``Conflict`` when the tenant already has an
        unrevoked token of that name, or the id is taken."""
        ...

    async def get_token(self, token_id: str) -> ApiToken | None:
        """The token with that id, revoked or expired ones included (the caller decides)."""
        ...

    async def list_tokens(self, tenant: str | None = None) -> list[ApiToken]:
        """Every token (of ``tenant``, or all) by tenant, name, creation."""
        ...

    async def revoke_token(self, tenant: str, ref: str, now: datetime) -> ApiToken | None:
        """Revoke ``tenant``'s unrevoked token whose id or name is ``ref``; None when it has
        none (another tenant's token is never touched)."""
        ...

    async def record_audit(self, entry: AuditEntry) -> int:
        """Append one audit entry (``entry.id`` ignored); returns its id (increasing)."""
        ...

    def audited(self, describe: Callable[[Any], AuditEntry | None]) -> AbstractContextManager[None]:
        """Inside the block, the first write transaction (any write method) also appends
        ``describe(result)`` — ``result`` is what that write method returns; None records
        nothing — to the audit log *in that transaction*: the change and its audit entry
        commit together or not at all. A block whose write never happens (a no-op, an
        error before it) records nothing. Scoped to the current task (a context variable),
        so concurrent requests never mix entries."""
        ...

    async def audit_page(self, tenant: str | None, before: int | None, limit: int) -> list[AuditEntry]:
        """Audit entries of ``tenant`` (None: all), newest first, with ``id < before``."""
        ...

    async def schedules_page(self, tenant: str, query: SchedulePage) -> list[Schedule]:
        """Up to ``query.limit`` live schedules of ``tenant`` with ``name > query.after``,
        by name (code point order), filtered by state, name prefix and one label."""
        ...

    async def occurrences_page(self, tenant: str, query: OccurrencePage) -> list[Occurrence]:
        """Up to ``query.limit`` occurrences of ``tenant``'s schedules, newest
        ``scheduled_for`` first (ties by id, descending), strictly after the cursor
        ``query.before`` in that order, filtered by schedule, state and ``[since, until)``."""
        ...


@dataclass(frozen=True, slots=True)
class VersionRecord:
    """One ``schedule_versions`` row. ``next_run_at`` is the schedule's cursor when the
    version was written (schema 0003): where its expectations begin; None when unknown
    (written before 0003) or when there was no next run (deleted, exhausted)."""

    version: int
    state: ScheduleState
    valid_from: datetime
    valid_to: datetime | None
    definition: ScheduleDef
    next_run_at: datetime | None


@dataclass(frozen=True, slots=True)
class ScheduleHistory:
    """A schedule as the reconciler sees it: its current row and every version."""

    schedule_id: str
    name: str
    tenant: str
    state: ScheduleState
    version: int
    next_run_at: datetime | None  # the cursor now: the next instant not yet materialized
    created_at: datetime  # the anchor of ``every`` schedules
    versions: tuple[VersionRecord, ...]


@dataclass(frozen=True, slots=True)
class ReconcileRows:
    schedules: list[ScheduleHistory]
    occurrences: list[Occurrence]  # planned ones only (manual False), any state


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    ready: int  # unleased, visible now: waiting for a worker
    running: int  # leased
    staged: int  # unleased, visible later (staged ahead, retry backoff, parked queue_one)
    oldest_ready_at: datetime | None


# How many of a schedule's newest occurrences ``run_summaries`` looks at for the waiting
# ones: they are the newest (planned ahead), unless a catch-up planned more than this.
SUMMARY_DEPTH = 200


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What ``clockctl list`` shows of a schedule's runs (see ``Store.run_summaries``)."""

    next_start: datetime | None  # the next planned occurrence's start; None: none planned yet
    last_scheduled_for: datetime | None = None  # the latest occurrence that started
    last_started_at: datetime | None = None
    last_state: OccurrenceState | None = None
    last_exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class LagStats:
    """Seconds; None when ``count`` is 0."""

    count: int
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class LagHistogram:
    """Start lags (seconds) in ``len(counts)`` equal bins from ``low`` to ``high``;
    ``count`` is their sum (0: nothing was due, and ``low == high == 0``)."""

    count: int
    low: float
    high: float
    counts: tuple[int, ...]

    @property
    def width(self) -> float:
        """A bin's width; 1 s when every lag is the same (the bins need some width)."""
        return (self.high - self.low) / len(self.counts) or 1.0


@dataclass(frozen=True, slots=True)
class ApiToken:
    """A bearer token of the HTTP API as stored: ``hash`` is the sha256 (hex) of the whole
    token (``clockd.tokens``); the token itself is never stored."""

    id: str
    tenant: str
    name: str
    role: str  # readonly, operator, admin, cluster-admin (clockd.tokens.Role)
    hash: str
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One write: who (token name and tenant), what (action, target), when, versions."""

    at: datetime
    tenant: str
    actor: str
    action: str
    target: str
    before_version: int | None = None
    after_version: int | None = None
    detail: Mapping[str, object] = field(default_factory=dict)
    id: int = 0

    @classmethod
    def of_write(
        cls,
        result: object,
        at: datetime,
        tenant: str,
        actor: str,
        action: str,
        target: str,
        before: int | None = None,
        **detail: object,
    ) -> AuditEntry:
        """The entry of a schedule write, from what the write returned (the ``describe`` of
        ``Store.audited``, for the API and the dashboard alike): a ``ScheduleChanged`` gives
        the after-version and what it ``canceled`` and ``replanned``; anything else with a
        ``version`` (a ``Schedule``) that version; else none."""
        if isinstance(result, ScheduleChanged):
            return cls(at, tenant, actor, action, target, before, result.schedule.version,
                       {**detail, "canceled": result.canceled, "replanned": len(result.replanned)})  # fmt: skip
        return cls(at, tenant, actor, action, target, before, getattr(result, "version", None), detail)


@dataclass(frozen=True, slots=True)
class SchedulePage:
    after: str = ""  # the last name of the previous page ("" = from the start)
    limit: int = 100
    state: ScheduleState | None = None
    name_prefix: str | None = None
    label: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class OccurrencePage:
    before: tuple[datetime, str] | None = None  # (scheduled_for, id) of the previous page's last
    limit: int = 100
    schedule_id: str | None = None
    state: OccurrenceState | None = None
    since: datetime | None = None
    until: datetime | None = None
