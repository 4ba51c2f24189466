"""Store port: the contract every store adapter (SQLite, PostgreSQL) keeps.

Both adapters pass one contract suite (``tests/contract/store``). Their SQL lives
in ``<adapter>/queries.sql`` under the *same query names*, and their migrations in
``<adapter>/migrations/NNNN_name.sql`` under the *same numbers* (a parity test
checks both).

Rules that hold for every method:

* Every time-dependent method takes ``now`` (aware UTC). No adapter reads the
  wall clock for a decision (``clockctl`` passes its own ``now`` too).
* Hot paths are **batches**: one call moves many rows with set-based SQL, in one
  transaction, never a row at a time.
* Every state transition is a conditional write (``… WHERE state = expected
  [AND lease_token = …]``). A write that matches no row lost a race: it is
  reported in the result (rejected tokens, conflicts), never retried blindly.
* Writes made under a role (materializer, leader) carry a ``Fence``. In the
  same transaction the adapter advances ``fences(resource, token)`` to the
  fence's token only if the stored token is not larger; if it is larger, the
  transaction commits **nothing** and raises ``FencedOut``. (The fence check
  lives in each adapter's ``_advance_fence``.)
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
* ``attempts``: one row per try, keyed by ``(occurrence_id, attempt)``.
* ``fences``, ``counters``, ``schema_migrations``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from clockd.core.model import (
    Attempt,
    AttemptOutcome,
    Occurrence,
    OccurrenceState,
    Schedule,
    ScheduleDef,
    ScheduleState,
    Target,
)


@dataclass(frozen=True, slots=True)
class Fence:
    """A role's fencing token for one resource (``"leader"`` or ``"shard:<n>"``)."""

    resource: str
    token: int


@dataclass(frozen=True, slots=True)
class NewOccurrence:
    """An occurrence the materializer plans. ``state`` is SCHEDULED, or MISSED with a reason."""

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


@dataclass(frozen=True, slots=True)
class Claim:
    """One claimed occurrence: everything a worker needs to run it and report back."""

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


@dataclass(frozen=True, slots=True)
class Completion:
    """The outcome of one attempt. ``next_state`` is SUCCEEDED, DEAD or RETRY_WAIT
    (then ``retry_at`` says when the occurrence becomes claimable again)."""

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
    """A schedule to create (as ``create_schedule`` would): active, version 1."""

    schedule_id: str
    definition: ScheduleDef
    shard: int
    next_run_at: datetime | None


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
class AppliedSchedules:
    created: list[Schedule]  # in the order given
    changed: list[Schedule]  # in the order given, at their new version
    canceled: int  # occurrences of older versions canceled by the changes


@dataclass(frozen=True, slots=True)
class Backlog:
    due_schedules: int  # active schedules whose cursor is due now
    outbox: int
    queued: int  # dispatch rows not leased
    running: int  # dispatch rows leased
    oldest_queued_at: datetime | None


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
    ) -> Schedule:
        """Insert an active schedule at version 1 and its first ``schedule_versions`` row.
        Raises ``Conflict`` when the tenant already has a live schedule of that name."""
        ...

    async def get_schedule(self, tenant: str, name: str) -> Schedule | None:
        """The live (not deleted) schedule of that name."""
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
    ) -> tuple[Schedule, int]:
        """Update, pause, resume or delete: write version ``expected_version + 1`` with
        ``definition``/``state``/``next_run_at``, close the old ``schedule_versions`` row and
        open a new one, and CANCEL (with ``reason``) every occurrence of an older version
        that no worker has claimed (SCHEDULED, ENQUEUED, RETRY_WAIT; their outbox and
        dispatch rows go). Manual occurrences are canceled only on delete. One transaction.
        Returns the schedule and the number canceled. Raises ``Conflict`` when the stored
        version is not ``expected_version`` (someone else changed it) or the new name is
        taken."""
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
        the change's ``reason``; a DELETED change also cancels manual ones), then each
        create exactly as ``create_schedule`` writes it (``created_at = updated_at =
        now``, the anchor of ``every`` schedules). Changes go first, so a name freed by a
        delete may be reused by a create of the same call. Raises ``Conflict`` and commits
        **nothing** when any change's stored version is not ``expected_version`` or its
        schedule was deleted meanwhile, or when a create's name (or id) is taken by a
        live schedule of its tenant. Empty input commits nothing and returns empty lists."""
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

    async def due_schedules(self, shards: Sequence[int], until: datetime, limit: int) -> list[Schedule]:
        """Active schedules of ``shards`` whose ``next_run_at <= until``, earliest first.
        Answered from the ``(shard, next_run_at)`` index, never a scan of all schedules."""
        ...

    async def materialize(
        self,
        fence: Fence,
        occurrences: Sequence[NewOccurrence],
        cursors: Sequence[CursorAdvance],
        now: datetime,
    ) -> MaterializeResult:
        """The materializer's transaction. In one transaction: advance the fence (or raise
        ``FencedOut`` and commit nothing); move each cursor only if the schedule is still
        active at that version with the expected cursor; insert the occurrences of the
        schedules whose cursor moved (``ON CONFLICT DO NOTHING`` on the id); write an
        outbox row for every inserted SCHEDULED occurrence. MISSED ones get no outbox row."""
        ...

    # -- relay ---------------------------------------------------------------------

    async def relay(self, until: datetime, limit: int, now: datetime) -> int:
        """Move up to ``limit`` outbox rows with ``available_at <= until`` into ``dispatch``
        (``visible_at = available_at``), mark their occurrences ENQUEUED with
        ``enqueued_at = now``, delete the outbox rows. Idempotent by occurrence id; safe with
        several relays at once. Returns the number moved."""
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
        RUNNING with ``attempts + 1`` (and ``started_at`` on the first attempt), and an
        attempt row (outcome ``running``) is written. Only occurrences still ENQUEUED or
        RETRY_WAIT are claimed: a canceled one is never handed out."""
        ...

    async def extend_leases(self, tokens: Sequence[str], lease_for: timedelta, now: datetime) -> set[str]:
        """Heartbeat: push ``lease_until`` to ``now + lease_for`` for the tokens still held.
        Returns the tokens that are still held (a missing one was reaped: stop that job)."""
        ...

    async def finish(self, completions: Sequence[Completion], now: datetime) -> set[str]:
        """Record outcomes, each conditional on its lease token. SUCCEEDED/DEAD: dispatch
        row deleted, occurrence finished. RETRY_WAIT: dispatch row unleased with
        ``visible_at = retry_at``. Returns the tokens accepted; a stale token (reaped and
        re-claimed meanwhile) changes nothing."""
        ...

    async def release(self, tokens: Sequence[str], now: datetime) -> int:
        """Give back claims that were never started (shutdown): the attempt row is removed,
        ``attempts`` decremented, the occurrence is claimable again at once."""
        ...

    # -- leader ----------------------------------------------------------------------

    async def reap_expired(self, fence: Fence, limit: int, now: datetime) -> list[Reaped]:
        """Leases with ``lease_until < now``: the attempt is recorded LOST; the occurrence
        is redelivered at once (RETRY_WAIT) if it has attempts left, else DEAD."""
        ...

    async def prune(self, fence: Fence, before: datetime, limit: int, now: datetime) -> int:
        """Delete terminal occurrences finished before ``before`` (and their attempts)."""
        ...

    # -- coordination and observation ----------------------------------------------

    async def next_token(self, resource: str) -> int:
        """A new fencing token for ``resource`` from a counter (local coordinator)."""
        ...

    async def backlog(self, now: datetime) -> Backlog: ...

    async def server_time(self) -> datetime:
        """The database server's clock (SQLite: the local clock), for clock-offset checks."""
        ...
