"""``SqliteStore``: the embedded store (stdlib ``sqlite3``, one file, zero setup).

Threading: every database call runs on **one dedicated worker thread** that owns the
one connection; the async methods hand a function to that thread
(``loop.run_in_executor``), so calls are serialized and the event loop never blocks.
Each method is one transaction: ``BEGIN IMMEDIATE`` for writes (the write lock is
taken up front, so a transaction never fails half-way on a lock upgrade), plain
``BEGIN`` for reads; it commits or rolls back entirely.

Durability: WAL journal with ``synchronous=NORMAL``. A commit survives a crash of
the process (clockd or clockctl); a power loss or kernel crash may lose the last
commits, never corrupt the file. ``busy_timeout`` (5 s) lets ``clockctl`` write
while ``clockd`` runs; a lock held longer raises ``StoreLocked``.

Sets are passed to SQL as one JSON array parameter and read with ``json_each``,
so each batch step is one statement (see ``queries.sql``). Requires SQLite ≥ 3.35
(``RETURNING``, ``UPDATE … FROM``) with the JSON functions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, LiteralString, TypeVar

from clockd.core.model import (
    Attempt,
    AttemptOutcome,
    Occurrence,
    OccurrenceState,
    OverlapPolicy,
    Schedule,
    ScheduleDef,
    ScheduleState,
    TenantLimits,
    TenantUsage,
)
from clockd.errors import (
    ClockdError,
    Conflict,
    FencedOut,
    NotFound,
    QuotaExceeded,
    SchemaMismatch,
    StoreLocked,
    StoreUnavailable,
)
from clockd.store import (
    AppliedSchedules,
    Backlog,
    Claim,
    Completion,
    CursorAdvance,
    Fence,
    LagStats,
    LateRow,
    MaterializeResult,
    NewOccurrence,
    NewSchedule,
    QueueStats,
    Reaped,
    ReconcileRows,
    ScheduleChange,
    ScheduleHistory,
    creates_by_tenant,
    idempotency_conflict_message,
    misfire_verdicts,
    not_dead_message,
    schedule_quota_message,
    within_quota,
)
from clockd.store.codec import (
    attempt_from_row,
    definition_from_json,
    definition_json,
    dumps,
    from_us,
    histories_from_rows,
    minute_of,
    occurrence_from_row,
    opt_from_us,
    opt_to_us,
    schedule_from_row,
    spec_json,
    to_us,
)
from clockd.store.sql import Migration, load_migrations, load_queries, trusted_sql
from clockd.store.sqlite import files

log = logging.getLogger(__name__)

T = TypeVar("T")

Q = load_queries(__package__ or "clockd.store.sqlite")
MIGRATIONS: Final = load_migrations(__package__ or "clockd.store.sqlite")
KNOWN_VERSION: Final = MIGRATIONS[-1].version if MIGRATIONS else 0

MIN_SQLITE: Final = (3, 35, 0)
DEFAULT_BUSY_TIMEOUT: Final = 5.0

# Primary result codes (sqlite3.h); extended codes carry them in the low byte.
_SQLITE_PERM = 3
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_SQLITE_READONLY = 8
_SQLITE_IOERR = 10
_SQLITE_CORRUPT = 11
_SQLITE_FULL = 13
_SQLITE_CANTOPEN = 14
_SQLITE_NOTADB = 26

_FINISH_STATES = frozenset({OccurrenceState.SUCCEEDED, OccurrenceState.DEAD, OccurrenceState.RETRY_WAIT})
_PLANNED_STATES = frozenset({OccurrenceState.SCHEDULED}) | {s for s in OccurrenceState if s.terminal}
_DEFINITION_CACHE_MAX = 8192
# Leader's misfire sweep: rows waiting less than this are not even looked at.
_MISFIRE_FLOOR_US: Final = 1_000_000


class SqliteStore:
    """The ``Store`` port on one SQLite file. See the module docstring."""

    def __init__(
        self,
        path: str | Path,
        *,
        readonly: bool = False,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
        owner_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        # clockd.store.sqlite.files: may a missing store be created; the daemon's owner rule.
        self.create = create and not readonly
        self.owner_only = owner_only
        self.busy_timeout = busy_timeout
        # Writes refused by the fence (a zombie materializer or leader); a metric.
        self.fenced_writes_rejected: int = 0
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        # (schedule_id, version) -> definition; versions never change once written.
        self._definitions: dict[tuple[str, int], ScheduleDef] = {}

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r}, readonly={self.readonly})"

    # -- plumbing --------------------------------------------------------------------------

    async def _call(self, fn: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        """Run ``fn`` as one transaction on the store's thread."""
        executor = self._executor
        if executor is None:
            raise StoreUnavailable(f"store {self.path} is not open")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, functools.partial(self._transaction, fn, write))

    def _transaction(self, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        conn = self._conn
        if conn is None:
            raise StoreUnavailable(f"store {self.path} is closed")
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                self._rollback(conn)
                raise
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc
        return result

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        # SQLite rolls back by itself after some errors (disk full, I/O): only roll
        # back what is still open, and never hide the original error.
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                log.warning("rollback failed", extra={"action": "sqlite_rollback_failed"})

    def _translate(self, exc: sqlite3.Error) -> Exception:
        """A driver error as a clockd error that says what happened and what to do."""
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        where = str(self.path)
        if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return StoreLocked(
                f"database {where} is locked: another process held the write lock for more "
                f"than {self.busy_timeout:g} s ({exc}); retry, or stop the other writer"
            )
        if primary == _SQLITE_FULL:
            return StoreUnavailable(f"disk full writing {where} ({exc}): nothing was written; free space and retry")
        if primary == _SQLITE_IOERR:
            return StoreUnavailable(f"disk I/O error on {where} ({exc}): nothing was written; check the disk and retry")
        if primary in (_SQLITE_NOTADB, _SQLITE_CORRUPT):
            return StoreUnavailable(
                f"{where} is not a clockd SQLite database or is damaged ({exc}): point the "
                "store at another path, or restore the file from a backup"
            )
        if primary == _SQLITE_READONLY:
            return StoreUnavailable(
                f"{where} is read-only ({exc}): "
                + ("this store was opened read-only" if self.readonly else "check the permissions of the file")
            )
        if primary in (_SQLITE_CANTOPEN, _SQLITE_PERM):
            return StoreUnavailable(
                f"cannot open {where} ({exc}): check that the path is a file and that this user may "
                "read and write it and its directory"
            )
        if isinstance(exc, sqlite3.OperationalError):
            return StoreUnavailable(f"SQLite error on {where}: {exc}")
        # Integrity and programming errors are bugs, not outages: keep them visible.
        return exc

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file (creating it and its directory), set the pragmas, apply pending
        migrations (read-only: only check them). Raises ``StoreUnavailable``,
        ``StoreLocked`` or ``SchemaMismatch``."""
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clockd-sqlite")
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._open)
        except BaseException:
            await self.close()
            raise

    def _open(self) -> None:
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise StoreUnavailable(
                f"SQLite {sqlite3.sqlite_version} is too old for the embedded store "
                f"(needs {'.'.join(map(str, MIN_SQLITE))}+): use a newer Python or "
                "the PostgreSQL store"
            )
        try:
            memory = str(self.path) == ":memory:"
            if self.readonly:
                conn = sqlite3.connect(
                    f"{self.path.resolve().as_uri()}?mode=ro",
                    uri=True,
                    timeout=self.busy_timeout,
                    isolation_level=None,
                )
            else:
                files.prepare(self.path, create=self.create, owner_only=self.owner_only)
                conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            self._conn = conn
            # Several processes opening a new file at once (clockd and clockctl) race for the
            # journal-mode switch and the migrations. SQLite answers some of those races with
            # an immediate SQLITE_BUSY instead of waiting for the busy timeout (a read
            # transaction cannot be upgraded), so retry the whole setup until the deadline.
            deadline = time.monotonic() + 3 * self.busy_timeout
            while True:
                try:
                    self._setup(conn, memory)
                    break
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc) or time.monotonic() >= deadline:
                        raise
                    if conn.in_transaction:
                        conn.rollback()
                    time.sleep(0.05)
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def _setup(self, conn: sqlite3.Connection, memory: bool) -> None:
        if not self.readonly and not memory:
            conn.execute("PRAGMA journal_mode = WAL").fetchall()
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA temp_store = MEMORY")
        if self.owner_only and not memory:
            files.quick_check(conn, self.path)
        if self.readonly:
            self._check_schema(conn, apply=False)
        else:
            self._migrate(conn)

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(executor, self._close)
        finally:
            executor.shutdown(wait=False)

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                if not self.readonly:
                    conn.execute("PRAGMA optimize")
            except sqlite3.Error:
                pass  # best effort on the way out
            conn.close()

    async def migrate(self) -> list[str]:
        executor = self._executor
        if executor is None:
            raise StoreUnavailable(f"store {self.path} is not open")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, self._migrate_translated)

    def _migrate_translated(self) -> list[str]:
        conn = self._conn
        if conn is None:
            raise StoreUnavailable(f"store {self.path} is closed")
        try:
            return self._migrate(conn)
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def _check_schema(self, conn: sqlite3.Connection, *, apply: bool) -> set[int]:
        """The applied versions. Raises ``SchemaMismatch`` on a schema newer than this
        release, or (``apply`` false) on one older than it."""
        exists = conn.execute(Q["schema_migrations_exists"]).fetchone()
        applied = {int(v) for v, _ in conn.execute(Q["schema_migrations_list"]).fetchall()} if exists else set()
        newest = max(applied, default=0)
        if newest > KNOWN_VERSION:
            raise SchemaMismatch(
                f"database schema {newest:04d} of {self.path} is newer than this clockd "
                f"(knows {KNOWN_VERSION:04d}): upgrade clockd"
            )
        missing = [m for m in MIGRATIONS if m.version not in applied]
        if missing and not apply:
            raise SchemaMismatch(
                f"database schema {newest:04d} of {self.path} is older than this clockd "
                f"(knows {KNOWN_VERSION:04d}): open it read-write once to migrate it"
            )
        return applied

    def _migrate(self, conn: sqlite3.Connection) -> list[str]:
        """Apply pending migrations, each in its own transaction with its record. The
        write lock is taken before re-reading what is applied, so two processes
        migrating at once apply each migration once."""
        conn.execute(Q["schema_migrations_create"])
        done: list[str] = []
        for migration in MIGRATIONS:
            conn.execute("BEGIN IMMEDIATE")
            try:
                applied = self._check_schema(conn, apply=True)
                if migration.version not in applied:
                    self._apply(conn, migration)
                    done.append(migration.label)
                conn.execute("COMMIT")
            except BaseException:
                self._rollback(conn)
                raise
        for label in done:
            log.info(
                "applied migration %s to %s",
                label,
                self.path,
                extra={"action": "store_migrated", "migration": label},
            )
        return done

    @staticmethod
    def _apply(conn: sqlite3.Connection, migration: Migration) -> None:
        # executescript() would COMMIT first; run statement by statement instead so the
        # migration and its schema_migrations row commit together.
        for statement in _statements(migration.sql):
            conn.execute(statement)
        conn.execute(
            Q["schema_migration_record"],
            {
                "version": migration.version,
                "name": migration.name,
                "applied_at": to_us(datetime.now(UTC)),
            },
        )

    # -- fence -----------------------------------------------------------------------------

    def _advance_fence(self, conn: sqlite3.Connection, fence: Fence) -> None:
        """Move ``fences(resource)`` to our token unless a larger one is stored; if it is
        larger, raise ``FencedOut`` (the caller's transaction rolls back: nothing commits)."""
        row = conn.execute(Q["fence_advance"], {"resource": fence.resource, "token": fence.token}).fetchone()
        if row is not None and row[0] == fence.token:
            return
        stored = conn.execute(Q["fence_get"], {"resource": fence.resource}).fetchone()
        self.fenced_writes_rejected += 1  # only the store's thread writes it
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
        def run(conn: sqlite3.Connection) -> int:
            row = conn.execute(Q["counter_next"], {"name": resource}).fetchone()
            return int(row[0])

        return await self._call(run, write=True)

    # -- schedules -------------------------------------------------------------------------

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
        now_us = to_us(now)

        def run(conn: sqlite3.Connection) -> Schedule:
            schedule = _insert_schedule(conn, new, now_us)
            if idempotency_key is not None:
                _set_idempotency_key(conn, schedule, idempotency_key)
            return schedule

        return await self._call(run, write=True)

    async def get_schedule_by_idempotency_key(self, tenant: str, key: str) -> Schedule | None:
        def run(conn: sqlite3.Connection) -> Schedule | None:
            row = conn.execute(Q["schedule_get_by_idempotency_key"], {"tenant": tenant, "key": key}).fetchone()
            return None if row is None else _schedule(row)

        return await self._call(run, write=False)

    async def get_schedule(self, tenant: str, name: str) -> Schedule | None:
        def run(conn: sqlite3.Connection) -> Schedule | None:
            row = conn.execute(Q["schedule_get_by_name"], {"tenant": tenant, "name": name}).fetchone()
            return None if row is None else _schedule(row)

        return await self._call(run, write=False)

    async def get_schedule_by_id(self, schedule_id: str) -> Schedule | None:
        """Any state, deleted included (callers check ``state``)."""

        def run(conn: sqlite3.Connection) -> Schedule | None:
            row = conn.execute(Q["schedule_get"], {"id": schedule_id}).fetchone()
            return None if row is None else _schedule(row)

        return await self._call(run, write=False)

    async def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        def run(conn: sqlite3.Connection) -> list[Schedule]:
            rows = conn.execute(Q["schedules_list"], {"tenant": tenant}).fetchall()
            return [_schedule(row) for row in rows]

        return await self._call(run, write=False)

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
        """See the port. A deleted (or unknown) schedule raises ``NotFound``."""
        change = ScheduleChange(schedule_id, expected_version, definition, state, next_run_at, reason)
        return await self._call(lambda conn: _change_schedule(conn, change, to_us(now)), write=True)

    async def apply_schedules(
        self,
        creates: Sequence[NewSchedule],
        changes: Sequence[ScheduleChange],
        now: datetime,
    ) -> AppliedSchedules:
        """See the port, in one ``BEGIN IMMEDIATE`` transaction: each change with
        ``change_schedule``'s statements, then the creates in batches of ``_APPLY_BATCH``
        (``_insert_schedules``: the statements of the PostgreSQL store, one JSON array
        each). A batch that hits a taken name or id, or a tenant's limit, is redone row
        by row so the error names its schedule."""
        now_us = to_us(now)

        def run(conn: sqlite3.Connection) -> AppliedSchedules:
            changed: list[Schedule] = []
            canceled = 0
            for change in changes:
                try:
                    schedule, count = _change_schedule(conn, change, now_us)
                except NotFound as exc:
                    raise Conflict(f"{exc.message}; nothing was applied") from exc
                changed.append(schedule)
                canceled += count
            created: list[Schedule] = []
            for start in range(0, len(creates), _APPLY_BATCH):
                created += _insert_schedules(conn, creates[start : start + _APPLY_BATCH], now_us)
            return AppliedSchedules(created=created, changed=changed, canceled=canceled)

        if not creates and not changes:
            return AppliedSchedules(created=[], changed=[], canceled=0)
        return await self._call(run, write=True)

    async def schedule_versions(
        self, schedule_id: str
    ) -> list[tuple[int, datetime, datetime | None, ScheduleDef, ScheduleState]]:
        def run(
            conn: sqlite3.Connection,
        ) -> list[tuple[int, datetime, datetime | None, ScheduleDef, ScheduleState]]:
            rows = conn.execute(Q["schedule_versions_list"], {"schedule_id": schedule_id}).fetchall()
            return [
                (
                    int(version),
                    from_us(valid_from),
                    opt_from_us(valid_to),
                    definition_from_json(definition),
                    ScheduleState(state),
                )
                for version, valid_from, valid_to, definition, state in rows
            ]

        return await self._call(run, write=False)

    # -- occurrences (clockctl) ------------------------------------------------------------

    async def add_manual_occurrence(
        self, schedule: Schedule, occurrence_id: str, max_attempts: int, now: datetime
    ) -> Occurrence:
        now_us = to_us(now)

        def run(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(
                    Q["occurrence_insert_manual"],
                    {
                        "id": occurrence_id,
                        "schedule_id": schedule.id,
                        "version": schedule.version,
                        "tenant": schedule.definition.tenant,
                        "queue": schedule.definition.queue,
                        "now": now_us,
                        "max_attempts": max_attempts,
                    },
                )
            except sqlite3.IntegrityError as exc:
                if "FOREIGN KEY" in str(exc):
                    raise NotFound(f"no schedule with id {schedule.id}") from exc
                if "occurrences.id" in str(exc):
                    raise Conflict(f"occurrence {occurrence_id} already exists") from exc
                raise
            conn.execute(Q["outbox_insert"], {"ids": dumps([occurrence_id])})

        await self._call(run, write=True)
        stamp = from_us(now_us)
        return Occurrence(
            id=occurrence_id,
            schedule_id=schedule.id,
            schedule_name=schedule.name,
            version=schedule.version,
            scheduled_for=stamp,
            available_at=stamp,
            state=OccurrenceState.SCHEDULED,
            attempts=0,
            queue=schedule.definition.queue,
            manual=True,
        )

    async def list_occurrences(
        self, schedule_id: str | None = None, limit: int = 50, before: datetime | None = None
    ) -> list[Occurrence]:
        bound = to_us(before) if before is not None else 2**62

        def run(conn: sqlite3.Connection) -> list[Occurrence]:
            if schedule_id is None:
                rows = conn.execute(Q["occurrences_list"], {"limit": limit, "before": bound}).fetchall()
            else:
                rows = conn.execute(
                    Q["occurrences_list_by_schedule"],
                    {"schedule_id": schedule_id, "limit": limit, "before": bound},
                ).fetchall()
            return [_occurrence(row) for row in rows]

        return await self._call(run, write=False)

    async def get_occurrence(self, id_or_prefix: str) -> Occurrence | None:
        key = id_or_prefix.strip().lower()

        def run(conn: sqlite3.Connection) -> Occurrence | None:
            row = conn.execute(Q["occurrence_get"], {"id": key}).fetchone()
            if row is not None:
                return _occurrence(row)
            if len(key) < 6:
                return None
            rows = conn.execute(Q["occurrence_by_prefix"], {"prefix": key, "prefix_end": key + "\U0010ffff"}).fetchall()
            if len(rows) > 1:
                raise Conflict(
                    f"occurrence prefix {key!r} is ambiguous ({rows[0][0]}, {rows[1][0]}, …): give more characters"
                )
            return _occurrence(rows[0]) if rows else None

        return await self._call(run, write=False)

    async def list_attempts(self, occurrence_id: str) -> list[Attempt]:
        def run(conn: sqlite3.Connection) -> list[Attempt]:
            rows = conn.execute(Q["attempts_list"], {"occurrence_id": occurrence_id}).fetchall()
            return [attempt_from_row(row, from_us, opt_from_us) for row in rows]

        return await self._call(run, write=False)

    # -- materializer ----------------------------------------------------------------------

    async def due_schedules(self, shards: Sequence[int], until: datetime, limit: int) -> list[Schedule]:
        params = {"shards": dumps(list(shards)), "until": to_us(until), "limit": limit}

        def run(conn: sqlite3.Connection) -> list[Schedule]:
            return [_schedule(row) for row in conn.execute(Q["due_schedules"], params)]

        return await self._call(run, write=False)

    async def due_shards(self, shards: Sequence[int], until: datetime) -> list[int]:
        if not shards:
            return []
        params = {"shards": dumps(list(dict.fromkeys(shards))), "until": to_us(until)}

        def run(conn: sqlite3.Connection) -> list[int]:
            return [int(row[0]) for row in conn.execute(Q["due_shards"], params)]

        return await self._call(run, write=False)

    async def materialize(
        self,
        fence: Fence,
        occurrences: Sequence[NewOccurrence],
        cursors: Sequence[CursorAdvance],
        now: datetime,
    ) -> MaterializeResult:
        now_us = to_us(now)
        cursor_rows = dumps(
            [[c.schedule_id, c.version, opt_to_us(c.expected), opt_to_us(c.next_run_at)] for c in cursors]
        )
        planned: list[tuple[tuple[str, int], list[Any]]] = []
        for o in occurrences:
            if o.state not in _PLANNED_STATES:
                raise ValueError(f"cannot materialize occurrence {o.id} as {o.state}")
            planned.append(
                (
                    (o.schedule_id, o.version),
                    [
                        o.id, o.schedule_id, o.version, o.tenant, o.queue,
                        to_us(o.scheduled_for), to_us(o.available_at), o.state.value,
                        o.max_attempts, o.reason,
                        None if o.state is OccurrenceState.SCHEDULED else now_us,
                    ],
                )
            )  # fmt: skip

        def run(conn: sqlite3.Connection) -> MaterializeResult:
            self._advance_fence(conn, fence)
            moved = {
                (sid, int(version))
                for sid, version in conn.execute(Q["materialize_advance"], {"cursors": cursor_rows}).fetchall()
            }
            rows = [row for key, row in planned if key in moved]
            inserted: list[Any] = []
            if rows:
                inserted = conn.execute(Q["materialize_insert"], {"occurrences": dumps(rows)}).fetchall()
                queued = [oid for oid, state in inserted if state == OccurrenceState.SCHEDULED]
                if queued:
                    conn.execute(Q["outbox_insert"], {"ids": dumps(queued)})
            return MaterializeResult(inserted=len(inserted), advanced=len(moved), stale=len(cursors) - len(moved))

        return await self._call(run, write=True)

    # -- relay -----------------------------------------------------------------------------

    async def relay(self, until: datetime, limit: int, now: datetime) -> int:
        params = {"until": to_us(until), "limit": limit}
        now_us = to_us(now)

        def run(conn: sqlite3.Connection) -> int:
            taken = [r[0] for r in conn.execute(Q["relay_take"], params).fetchall()]
            if not taken:
                return 0
            enqueued = conn.execute(Q["relay_enqueue"], {"ids": dumps(taken), "now": now_us}).fetchall()
            if not enqueued:
                return 0
            cur = conn.execute(Q["relay_dispatch"], {"ids": dumps([r[0] for r in enqueued])})
            return int(cur.rowcount)

        return await self._call(run, write=True)

    # -- worker ----------------------------------------------------------------------------

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
        now_us = to_us(now)
        lease_until_us = to_us(now + lease_for)
        lease_until = from_us(lease_until_us)  # aware UTC whatever zone `now` came in
        wanted = list(dict.fromkeys(queues))

        minute_us = to_us(minute_of(now))

        def run(conn: sqlite3.Connection) -> list[Claim]:
            # Pick: per queue, a share of each tenant's oldest rows and the queue's oldest.
            found: set[int] = set()
            for queue in wanted:
                tenants = [row[0] for row in conn.execute(Q["claim_tenants"], {"queue": queue})]
                if not tenants:
                    continue
                if len(tenants) > 1:
                    params = {
                        "queue": queue,
                        "tenants": dumps(tenants),
                        "share": -(-limit // len(tenants)),
                        "now": now_us,
                    }
                    found.update(row[1] for row in conn.execute(Q["claim_pick_fair"], params))
                found.update(
                    row[1] for row in conn.execute(Q["claim_pick"], {"queue": queue, "now": now_us, "limit": limit})
                )
            if not found:
                return []
            # Judge (caps, fairness, overlap), then write the decisions, one statement each.
            picked_ids = dumps(sorted(found))
            conn.execute(Q["overlap_slots_ensure"], {"ids": picked_ids})
            judged = conn.execute(
                Q["claim_judge"], {"picked": picked_ids, "minute": minute_us, "limit": limit}
            ).fetchall()
            starts = [row for row in judged if row[0] == "start"]
            losers = [row for row in judged if row[0] != "start"]
            if losers:
                self._write_losers(conn, losers, now_us)
            if not starts:
                return []
            picked = [(row[1], row[2]) for row in starts]
            tokens = {occ: uuid.uuid4().hex for _, occ in picked}
            dispatch_ids = dumps([row[0] for row in picked])
            conn.execute(
                Q["claim_lease"],
                {
                    "leases": dumps([[did, tokens[occ]] for did, occ in picked]),
                    "lease_until": lease_until_us,
                    "worker_id": worker_id,
                },
            )
            started = {
                row[0]: row
                for row in conn.execute(Q["claim_start"], {"ids": dumps(list(tokens)), "now": now_us}).fetchall()
            }
            conn.execute(Q["claim_attempts"], {"dispatch_ids": dispatch_ids, "now": now_us})
            per_tenant: dict[str, int] = {}
            for row in starts:
                per_tenant[row[3]] = per_tenant.get(row[3], 0) + 1
            conn.execute(
                Q["tenant_claims_count"],
                {"counts": dumps([[t, n] for t, n in per_tenant.items()]), "minute": minute_us},
            )
            taken = [[row[4], row[2], None] for row in starts if row[5] != OverlapPolicy.ALLOW]
            if taken:
                conn.execute(Q["overlap_slots_take"], {"rows": dumps(taken)})
            definitions = self._definitions_for(conn, {(row[2], int(row[3])) for row in started.values()})
            claims: list[Claim] = []
            for _, occ in picked:
                row = started.get(occ)
                if row is None:  # pragma: no cover - claim_pick filtered the state
                    continue
                _, attempt, schedule_id, version, scheduled_for, max_attempts = row
                definition = definitions[(schedule_id, int(version))]
                retry = definition.retry
                claims.append(
                    Claim(
                        occurrence_id=occ,
                        lease_token=tokens[occ],
                        attempt=int(attempt),
                        schedule_id=schedule_id,
                        schedule_name=definition.name,
                        version=int(version),
                        scheduled_for=from_us(scheduled_for),
                        target=definition.target,
                        timeout=definition.timeout,
                        max_attempts=int(max_attempts),
                        retry_backoff=retry.backoff,
                        retry_backoff_max=retry.backoff_max,
                        permanent_exit_codes=retry.permanent_exit_codes,
                        lease_until=lease_until,
                    )
                )
            return claims

        return await self._call(run, write=True)

    @staticmethod
    def _write_losers(conn: sqlite3.Connection, losers: list[Any], now_us: int) -> None:
        """Overlap losers of a claim (claim_judge): skipped ones end SKIPPED_OVERLAP; the
        parked one stays ENQUEUED as its slot's waiter. Both leave the queue (the waiter
        comes back when the slot's holder ends: overlap_release)."""
        conn.execute(
            Q["claim_losers"],
            {"rows": dumps([[row[2], row[0], row[6]] for row in losers]), "now": now_us},
        )
        conn.execute(Q["dispatch_delete"], {"ids": dumps([row[1] for row in losers])})
        parked = [[row[4], None, row[2]] for row in losers if row[0] == "park"]
        if parked:
            conn.execute(Q["overlap_slots_take"], {"rows": dumps(parked)})

    def _definitions_for(
        self, conn: sqlite3.Connection, keys: set[tuple[str, int]]
    ) -> dict[tuple[str, int], ScheduleDef]:
        cache = self._definitions
        # Take the hits before the cache may be cleared below: a burst spanning more
        # distinct schedules than the cache holds must not lose the ones it already had.
        found = {key: cache[key] for key in keys if key in cache}
        missing = [key for key in keys if key not in found]
        if missing:
            if len(cache) + len(missing) > _DEFINITION_CACHE_MAX:
                cache.clear()
            rows = conn.execute(Q["schedule_definitions"], {"keys": dumps([list(k) for k in missing])}).fetchall()
            for schedule_id, version, text in rows:
                definition = definition_from_json(text)
                cache[(schedule_id, int(version))] = definition
                found[(schedule_id, int(version))] = definition
        return found

    async def extend_leases(self, tokens: Sequence[str], lease_for: timedelta, now: datetime) -> set[str]:
        if not tokens:
            return set()
        params = {"tokens": dumps(list(tokens)), "lease_until": to_us(now + lease_for)}

        def run(conn: sqlite3.Connection) -> set[str]:
            return {row[0] for row in conn.execute(Q["leases_extend"], params).fetchall()}

        return await self._call(run, write=True)

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
        now_us = to_us(now)
        tokens = dumps(list(by_token))

        def run(conn: sqlite3.Connection) -> set[str]:
            held = conn.execute(Q["leases_held"], {"tokens": tokens}).fetchall()
            if not held:
                return set()
            rows: list[list[Any]] = []
            done: list[int] = []
            retry: list[list[int]] = []
            ended: list[str] = []
            for dispatch_id, occ, token, attempt, _ in held:
                c = by_token[token]
                reason = None
                if c.next_state is OccurrenceState.DEAD:
                    reason = c.error or f"attempt {attempt} {c.outcome.value}" + (
                        f" (exit code {c.exit_code})" if c.exit_code is not None else ""
                    )
                rows.append(
                    [occ, attempt, c.outcome.value, c.exit_code, c.signal, c.output, c.error,
                     c.next_state.value, reason]
                )  # fmt: skip
                if c.next_state is OccurrenceState.RETRY_WAIT:
                    at = now_us if c.retry_at is None else to_us(c.retry_at)
                    retry.append([dispatch_id, at])
                else:
                    done.append(dispatch_id)
                    ended.append(occ)
            encoded = dumps(rows)
            conn.execute(Q["finish_attempts"], {"rows": encoded, "now": now_us})
            conn.execute(Q["finish_occurrences"], {"rows": encoded, "now": now_us})
            if done:
                conn.execute(Q["dispatch_delete"], {"ids": dumps(done)})
            if retry:
                conn.execute(Q["dispatch_retry"], {"rows": dumps(retry)})
            conn.execute(Q["tenant_running_release"], {"tenants": dumps([row[4] for row in held])})
            if ended:  # a RETRY_WAIT holder keeps its overlap slot until it ends
                _release_slots(conn, ended, now_us)
            return {row[2] for row in held}

        return await self._call(run, write=True)

    async def release(self, tokens: Sequence[str], now: datetime) -> int:
        """See the port. ``visible_at`` is left as it was (already due)."""
        if not tokens:
            return 0
        params = {"tokens": dumps(list(dict.fromkeys(tokens)))}

        def run(conn: sqlite3.Connection) -> int:
            held = conn.execute(Q["leases_held"], params).fetchall()
            if not held:
                return 0
            conn.execute(Q["release_attempts"], {"keys": dumps([[occ, att] for _, occ, _, att, _ in held])})
            conn.execute(Q["release_occurrences"], {"ids": dumps([row[1] for row in held])})
            conn.execute(
                Q["dispatch_unlease"],
                {"ids": dumps([row[0] for row in held]), "visible_at": None},
            )
            conn.execute(Q["tenant_running_release"], {"tenants": dumps([row[4] for row in held])})
            return len(held)

        return await self._call(run, write=True)

    # -- leader ----------------------------------------------------------------------------

    async def reap_expired(self, fence: Fence, limit: int, now: datetime) -> list[Reaped]:
        now_us = to_us(now)

        def run(conn: sqlite3.Connection) -> list[Reaped]:
            self._advance_fence(conn, fence)
            picked = conn.execute(Q["reap_pick"], {"now": now_us, "limit": limit}).fetchall()
            if not picked:
                return []
            conn.execute(
                Q["reap_attempts"],
                {
                    "keys": dumps([[occ, att] for _, occ, att, _, _ in picked]),
                    "now": now_us,
                    "error": "lease expired (worker crashed, paused or partitioned)",
                },
            )
            again = [row for row in picked if row[2] < row[3]]
            dead = [row for row in picked if row[2] >= row[3]]
            if again:
                conn.execute(
                    Q["dispatch_unlease"],
                    {"ids": dumps([row[0] for row in again]), "visible_at": now_us},
                )
                conn.execute(Q["reap_retry"], {"ids": dumps([row[1] for row in again])})
            if dead:
                conn.execute(Q["dispatch_delete"], {"ids": dumps([row[0] for row in dead])})
                conn.execute(Q["reap_dead"], {"ids": dumps([row[1] for row in dead]), "now": now_us})
                _release_slots(conn, [row[1] for row in dead], now_us)
            conn.execute(Q["tenant_running_release"], {"tenants": dumps([row[4] for row in picked])})
            return [
                Reaped(
                    occurrence_id=occ,
                    attempt=int(attempt),
                    next_state=OccurrenceState.RETRY_WAIT if attempt < max_attempts else OccurrenceState.DEAD,
                )
                for _, occ, attempt, max_attempts, _ in picked
            ]

        return await self._call(run, write=True)

    async def prune(self, fence: Fence, before: datetime, limit: int, now: datetime) -> int:
        params = {"before": to_us(before), "limit": limit}

        def run(conn: sqlite3.Connection) -> int:
            self._advance_fence(conn, fence)
            return int(conn.execute(Q["prune"], params).rowcount)

        return await self._call(run, write=True)

    async def sweep_misfires(self, fence: Fence, limit: int, now: datetime) -> int:
        """See the port."""
        now_us = to_us(now)

        def run(conn: sqlite3.Connection) -> int:
            self._advance_fence(conn, fence)
            rows = conn.execute(
                Q["misfire_pick"], {"now": now_us, "floor": _MISFIRE_FLOOR_US, "limit": limit}
            ).fetchall()
            missed = misfire_verdicts(
                [
                    LateRow(did, occ, from_us(visible), policy, timedelta(microseconds=int(lateness)),
                            int(catch_up), int(newest), bool(newer))
                    for did, occ, visible, policy, lateness, catch_up, newest, newer in rows
                ],
                now,
            )  # fmt: skip
            if not missed:
                return 0
            marks = dumps([[m.occurrence_id, m.reason] for m in missed])
            conn.execute(Q["misfire_mark"], {"rows": marks, "now": now_us})
            conn.execute(Q["dispatch_delete"], {"ids": dumps([m.dispatch_id for m in missed])})
            _release_slots(conn, [m.occurrence_id for m in missed], now_us)
            return len(missed)

        return await self._call(run, write=True)

    async def release_stale_slots(self, fence: Fence, limit: int, now: datetime) -> int:
        """See the port."""
        now_us = to_us(now)

        def run(conn: sqlite3.Connection) -> int:
            self._advance_fence(conn, fence)
            stale = [row[0] for row in conn.execute(Q["overlap_stale"], {"limit": limit})]
            if stale:
                _release_slots(conn, stale, now_us)
            return len(stale)

        return await self._call(run, write=True)

    # -- occurrences: running, dead letters ------------------------------------------------

    async def running_occurrences(self, schedule_id: str) -> list[Occurrence]:
        def run(conn: sqlite3.Connection) -> list[Occurrence]:
            rows = conn.execute(Q["occurrences_running"], {"schedule_id": schedule_id}).fetchall()
            return [_occurrence(row) for row in rows]

        return await self._call(run, write=False)

    async def list_dead(
        self, schedule_id: str | None = None, tenant: str | None = None, limit: int = 50
    ) -> list[Occurrence]:
        def run(conn: sqlite3.Connection) -> list[Occurrence]:
            if schedule_id is None:
                rows = conn.execute(Q["dlq_list"], {"tenant": tenant, "limit": limit}).fetchall()
            else:
                rows = conn.execute(
                    Q["dlq_list_by_schedule"], {"schedule_id": schedule_id, "limit": limit}
                ).fetchall()
            return [dataclasses.replace(_occurrence(row[:15]), last_error=row[15]) for row in rows]

        return await self._call(run, write=False)

    async def replay_dead(self, occurrence_id: str, reason: str, now: datetime) -> Occurrence:
        """See the port."""
        now_us = to_us(now)

        def run(conn: sqlite3.Connection) -> Occurrence:
            params = {"id": occurrence_id, "now": now_us, "reason": reason}
            if conn.execute(Q["dlq_replay"], params).fetchone() is None:
                raise _not_dead(conn, occurrence_id)
            conn.execute(Q["dlq_dispatch"], params)
            return _occurrence(conn.execute(Q["occurrence_get"], {"id": occurrence_id}).fetchone())

        return await self._call(run, write=True)

    async def drop_dead(self, occurrence_id: str, reason: str, now: datetime) -> Occurrence:
        """See the port."""
        now_us = to_us(now)

        def run(conn: sqlite3.Connection) -> Occurrence:
            if conn.execute(Q["dlq_drop"], {"id": occurrence_id, "now": now_us, "reason": reason}).fetchone() is None:
                raise _not_dead(conn, occurrence_id)
            return _occurrence(conn.execute(Q["occurrence_get"], {"id": occurrence_id}).fetchone())

        return await self._call(run, write=True)

    # -- tenants ---------------------------------------------------------------------------

    async def set_tenant_limits(self, limits: TenantLimits, now: datetime) -> TenantLimits:
        """See the port."""
        params = {
            "tenant": limits.tenant,
            "max_schedules": limits.max_schedules,
            "max_running": limits.max_running,
            "max_triggers_per_minute": limits.max_triggers_per_minute,
            "catch_up_rate": limits.catch_up_rate,
            "now": to_us(now),
        }

        def run(conn: sqlite3.Connection) -> TenantLimits:
            conn.execute(Q["tenant_limits_upsert"], params)
            conn.execute(Q["tenant_running_recount"], {"tenant": limits.tenant})
            return limits

        return await self._call(run, write=True)

    async def tenant_limits(self) -> list[TenantLimits]:
        def run(conn: sqlite3.Connection) -> list[TenantLimits]:
            return [TenantLimits(*row) for row in conn.execute(Q["tenant_limits_all"])]

        return await self._call(run, write=False)

    async def tenant_usage(self) -> list[TenantUsage]:
        def run(conn: sqlite3.Connection) -> list[TenantUsage]:
            return [
                TenantUsage(TenantLimits(*row[:5]), schedules=int(row[5]), running=int(row[6]))
                for row in conn.execute(Q["tenant_usage"])
            ]

        return await self._call(run, write=False)

    # -- observation -----------------------------------------------------------------------

    async def backlog(self, now: datetime) -> Backlog:
        params = {"now": to_us(now)}

        def run(conn: sqlite3.Connection) -> Backlog:
            due, outbox, queued, running, oldest = conn.execute(Q["backlog"], params).fetchone()
            return Backlog(
                due_schedules=int(due),
                outbox=int(outbox),
                queued=int(queued),
                running=int(running),
                oldest_queued_at=opt_from_us(oldest),
            )

        return await self._call(run, write=False)

    async def server_time(self) -> datetime:
        """SQLite has no server: the local clock (the offset check is then zero)."""
        return datetime.now(UTC)

    # -- operator read paths ---------------------------------------------------------------

    async def reconcile_rows(self, start: datetime, end: datetime, schedule_id: str | None = None) -> ReconcileRows:
        """See the port: one read transaction (WAL: one snapshot) for both statements."""
        params = {"start": to_us(start), "end": to_us(end), "schedule_id": schedule_id}

        def run(conn: sqlite3.Connection) -> ReconcileRows:
            if schedule_id is None:
                versions = conn.execute(Q["reconcile_versions"], params).fetchall()
                rows = conn.execute(Q["reconcile_occurrences"], params).fetchall()
            else:
                versions = conn.execute(Q["reconcile_versions_of"], params).fetchall()
                rows = conn.execute(Q["reconcile_occurrences_of"], params).fetchall()
            return ReconcileRows(
                schedules=_histories(versions),
                occurrences=[dataclasses.replace(_occurrence(row[:15]), last_error=row[15]) for row in rows],
            )

        return await self._call(run, write=False)

    async def queue_stats(self, now: datetime) -> list[QueueStats]:
        params = {"now": to_us(now)}

        def run(conn: sqlite3.Connection) -> list[QueueStats]:
            return [
                QueueStats(queue, int(ready), int(running), int(staged), opt_from_us(oldest))
                for queue, ready, running, staged, oldest in conn.execute(Q["queue_stats"], params)
            ]

        return await self._call(run, write=False)

    async def start_lag(self, since: datetime, now: datetime) -> LagStats:
        """See the port: nearest ranks from SQL, interpolated here as ``percentile_cont``."""
        params = {"since": to_us(since), "now": to_us(now)}

        def run(conn: sqlite3.Connection) -> LagStats:
            count, *pairs = conn.execute(Q["start_lag"], params).fetchone()
            if not count:
                return LagStats(0, None, None, None)
            p50, p95, p99 = (
                _interpolate(int(count), rank, pairs[2 * i], pairs[2 * i + 1]) for i, rank in enumerate((50, 95, 99))
            )
            return LagStats(int(count), p50, p95, p99)

        return await self._call(run, write=False)

    async def live_schedules_count(self) -> int:
        def run(conn: sqlite3.Connection) -> int:
            return int(conn.execute(Q["live_schedules_count"]).fetchone()[0])

        return await self._call(run, write=False)

    async def dead_count(self) -> int:
        def run(conn: sqlite3.Connection) -> int:
            return int(conn.execute(Q["dead_count"]).fetchone()[0])

        return await self._call(run, write=False)

    async def not_run_counts(self, since: datetime, until: datetime) -> dict[tuple[OccurrenceState, str], int]:
        params = {"since": to_us(since), "until": to_us(until)}

        def run(conn: sqlite3.Connection) -> dict[tuple[OccurrenceState, str], int]:
            rows = conn.execute(Q["not_run_counts"], params).fetchall()
            return {(OccurrenceState(state), str(kind)): int(n) for state, kind, n in rows}

        return await self._call(run, write=False)

    async def enqueue_lags(self, since: datetime, until: datetime, limit: int) -> list[float]:
        params = {"since": to_us(since), "until": to_us(until), "limit": limit}

        def run(conn: sqlite3.Connection) -> list[float]:
            return [int(lag) / 1e6 for (lag,) in conn.execute(Q["enqueue_lags"], params)]

        return await self._call(run, write=False)


# -- schedule writes (one connection, inside the caller's transaction) -------------------------

# Creates per statement in apply_schedules (as the PostgreSQL store).
_APPLY_BATCH: Final = 5000


def _insert_schedule(conn: sqlite3.Connection, new: NewSchedule, now_us: int) -> Schedule:
    """``create_schedule``'s statements: the schedule row at version 1 and its first
    ``schedule_versions`` row. ``Conflict`` when the live name (or the id) is taken."""
    definition = new.definition
    _check_schedule_quota(conn, definition.tenant)
    try:
        conn.execute(
            Q["schedule_insert"],
            {
                "id": new.schedule_id,
                "tenant": definition.tenant,
                "name": definition.name,
                "kind": definition.kind.value,
                "expr": definition.expr,
                "tz": definition.tz,
                "queue": definition.queue,
                "next_run_at": opt_to_us(new.next_run_at),
                "shard": new.shard,
                "now": now_us,
                "spec": spec_json(definition),
            },
        )
    except sqlite3.IntegrityError as exc:
        if "schedules.name" in str(exc):
            raise Conflict(f"schedule {definition.name!r} already exists in tenant {definition.tenant!r}") from exc
        if "schedules.id" in str(exc):
            raise Conflict(f"schedule id {new.schedule_id} already exists") from exc
        raise
    conn.execute(
        Q["schedule_version_insert"],
        {
            "schedule_id": new.schedule_id,
            "version": 1,
            "state": ScheduleState.ACTIVE.value,
            "now": now_us,
            "definition": definition_json(definition),
            "reason": "created",
        },
    )
    return _created(new, from_us(now_us))


def _created(new: NewSchedule, stamp: datetime) -> Schedule:
    """The schedule a create wrote (version 1, active, created and updated ``stamp``)."""
    return Schedule(
        id=new.schedule_id,
        version=1,
        state=ScheduleState.ACTIVE,
        definition=new.definition,
        next_run_at=None if new.next_run_at is None else from_us(to_us(new.next_run_at)),
        shard=new.shard,
        created_at=stamp,
        updated_at=stamp,
    )


def _insert_schedules(conn: sqlite3.Connection, batch: Sequence[NewSchedule], now_us: int) -> list[Schedule]:
    """``_insert_schedule`` for a batch: the quota check once (``_within_quota``), then
    ``schedule_insert_many`` and ``schedule_version_insert_many``. When the insert hits a
    taken name or id (or a name twice in the batch; SQLite backs out the whole statement)
    or the batch would pass a tenant's limit, the batch is redone row by row, which
    raises the same ``Conflict`` / ``QuotaExceeded`` as a row-by-row apply."""
    if len(batch) == 1 or not _within_quota(conn, batch):
        return [_insert_schedule(conn, new, now_us) for new in batch]
    rows = []
    versions = []
    for new in batch:
        d = new.definition
        cursor = opt_to_us(new.next_run_at)
        rows.append(
            [new.schedule_id, d.tenant, d.name, d.kind.value, d.expr, d.tz, d.queue, cursor, new.shard, spec_json(d)]
        )
        versions.append([new.schedule_id, definition_json(d), cursor])
    try:
        conn.execute(Q["schedule_insert_many"], {"schedules": dumps(rows), "now": now_us})
    except sqlite3.IntegrityError:
        return [_insert_schedule(conn, new, now_us) for new in batch]
    conn.execute(
        Q["schedule_version_insert_many"],
        {"versions": dumps(versions), "state": ScheduleState.ACTIVE.value, "reason": "created", "now": now_us},
    )
    stamp = from_us(now_us)
    return [_created(new, stamp) for new in batch]


def _within_quota(conn: sqlite3.Connection, batch: Sequence[NewSchedule]) -> bool:
    """Whether every tenant of ``batch`` stays within its ``max_schedules`` with all of
    the batch's creates: false exactly when creating it row by row would raise
    ``QuotaExceeded``."""
    wanted = creates_by_tenant(batch)
    limits = {
        str(tenant): int(cap)
        for tenant, cap in conn.execute(Q["tenant_limits_lock_many"], {"tenants": dumps(sorted(wanted))})
    }
    if not limits:
        return True
    counts = {
        str(tenant): int(n)
        for tenant, n in conn.execute(Q["tenant_schedules_count_many"], {"tenants": dumps(sorted(limits))})
    }
    return within_quota(wanted, limits, counts)


def _change_schedule(conn: sqlite3.Connection, change: ScheduleChange, now_us: int) -> tuple[Schedule, int]:
    """``change_schedule``'s statements: the conditional version bump, the versions rows,
    the cancellation of unclaimed older-version occurrences. Returns the schedule and the
    number canceled; ``Conflict`` (version moved, name taken) or ``NotFound`` (deleted)."""
    definition, schedule_id = change.definition, change.schedule_id
    params = {
        "id": schedule_id,
        "expected_version": change.expected_version,
        "tenant": definition.tenant,
        "name": definition.name,
        "kind": definition.kind.value,
        "expr": definition.expr,
        "tz": definition.tz,
        "queue": definition.queue,
        "state": change.state.value,
        "next_run_at": opt_to_us(change.next_run_at),
        "now": now_us,
        "spec": spec_json(definition),
    }
    try:
        row = conn.execute(Q["schedule_update"], params).fetchone()
    except sqlite3.IntegrityError as exc:
        if "schedules.name" not in str(exc):
            raise
        raise Conflict(f"schedule {definition.name!r} already exists in tenant {definition.tenant!r}") from exc
    if row is None:
        current = conn.execute(Q["schedule_get"], {"id": schedule_id}).fetchone()
        if current is None:
            raise NotFound(f"no schedule with id {schedule_id}")
        found = _schedule(current)
        if found.state is ScheduleState.DELETED:
            raise NotFound(f"schedule {found.name!r} ({schedule_id}) was deleted")
        raise Conflict(
            f"schedule {found.name!r} was changed meanwhile: it is at version "
            f"{found.version}, not {change.expected_version}; read it again and retry"
        )
    schedule = _schedule(row)
    conn.execute(Q["schedule_version_close"], {"schedule_id": schedule_id, "now": now_us})
    conn.execute(
        Q["schedule_version_insert"],
        {
            "schedule_id": schedule_id,
            "version": schedule.version,
            "state": change.state.value,
            "now": now_us,
            "definition": definition_json(definition),
            "reason": change.reason,
        },
    )
    cancel = {
        "schedule_id": schedule_id,
        "version": schedule.version,
        "include_manual": int(change.state is ScheduleState.DELETED),
        "reason": change.reason,
        "now": now_us,
    }
    conn.execute(Q["cancel_outbox"], cancel)
    conn.execute(Q["cancel_dispatch"], cancel)
    canceled = conn.execute(Q["cancel_occurrences"], cancel).rowcount
    return schedule, canceled


def _not_dead(conn: sqlite3.Connection, occurrence_id: str) -> ClockdError:
    row = conn.execute(Q["occurrence_get"], {"id": occurrence_id}).fetchone()
    if row is None:
        return NotFound(f"no occurrence {occurrence_id!r}")
    return Conflict(not_dead_message(_occurrence(row)))


def _check_schedule_quota(conn: sqlite3.Connection, tenant: str) -> None:
    """``QuotaExceeded`` when ``tenant`` already has ``max_schedules`` live schedules.
    (The write lock serializes creates; PostgreSQL locks the tenant's limits row.)"""
    row = conn.execute(Q["tenant_limits_lock"], {"tenant": tenant}).fetchone()
    if row is None:
        return
    count = int(conn.execute(Q["tenant_schedules_count"], {"tenant": tenant}).fetchone()[0])
    if count >= int(row[0]):
        raise QuotaExceeded(schedule_quota_message(tenant, int(row[0])))


def _set_idempotency_key(conn: sqlite3.Connection, schedule: Schedule, key: str) -> None:
    try:
        conn.execute(Q["schedule_set_idempotency_key"], {"id": schedule.id, "key": key})
    except sqlite3.IntegrityError as exc:
        if "schedules.tenant" not in str(exc) and "idempotency" not in str(exc):
            raise
        raise Conflict(idempotency_conflict_message(key, schedule.definition.tenant)) from exc


def _release_slots(conn: sqlite3.Connection, ended: Sequence[str], now_us: int) -> None:
    """``overlap_release`` for occurrences that just ended: the slots they held pass to
    their waiter, which becomes claimable now."""
    ids = dumps(list(ended))
    conn.execute(Q["overlap_unpark"], {"ids": ids, "now": now_us})
    conn.execute(Q["overlap_release"], {"ids": ids})


# -- row decoding ----------------------------------------------------------------------------


def _schedule(row: Sequence[Any]) -> Schedule:
    return schedule_from_row(row, from_us, opt_from_us, json.loads)


def _occurrence(row: Sequence[Any]) -> Occurrence:
    return occurrence_from_row(row, from_us, opt_from_us)


def _statements(script: LiteralString) -> list[LiteralString]:
    """Split a migration script into statements (``sqlite3.complete_statement`` knows
    about strings, comments and triggers)."""
    statements: list[LiteralString] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statement = buffer.strip()
            buffer = ""
            if statement:
                statements.append(trusted_sql(statement))
    rest = "\n".join(line for line in buffer.splitlines() if line.strip() and not line.strip().startswith("--"))
    if rest:
        raise ValueError(f"unterminated statement at the end of a migration: {rest[:80]!r}")
    return statements


# -- operator read paths: row decoding ---------------------------------------------------------


def _histories(rows: Sequence[Sequence[Any]]) -> list[ScheduleHistory]:
    return histories_from_rows(rows, from_us, definition_from_json)


def _interpolate(count: int, rank: int, low: int | None, high: int | None) -> float | None:
    """``percentile_cont(rank/100)`` from the values at offsets floor((n-1)·p) and the next
    one (µs in, seconds out)."""
    if low is None:
        return None
    fraction = ((count - 1) * rank % 100) / 100
    upper = low if high is None else high
    return (low + (upper - low) * fraction) / 1e6


__all__ = ["KNOWN_VERSION", "MIGRATIONS", "SqliteStore"]


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text
