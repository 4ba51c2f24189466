"""``PostgresStore``: the shared store (psycopg 3, asyncio, one connection pool).

Connections: a ``psycopg_pool.AsyncConnectionPool`` (``min_size``..``max_size``), opened
by ``open()`` and closed by ``close()``. Every connection starts with
``plan_cache_mode = force_custom_plan`` (a statement prepared while the queue was
empty kept a generic plan after a bulk load: 240 ms instead of 8 ms per claim),
``jit = off`` (compiling costs more than these short statements) and ``TimeZone = UTC``
(psycopg then hands back ``datetime.UTC`` instants), sent as startup ``options`` so
they cost no round trip. Connections run in autocommit: a read is one statement, a
write is one explicit transaction (``conn.transaction()``) that commits or rolls back
entirely.

Schema: ``open()`` only *checks* it (unlike SQLite it never migrates: several
processes share the database, and an upgrade is an operator's decision) and raises
``SchemaMismatch`` when it is behind (run ``clockd migrate``) or ahead (upgrade clockd).
``migrate()`` works on an open or a closed store, takes an advisory lock per
migration transaction, and applies each pending migration once.

Errors: psycopg's are translated once, in ``_call``: connection failures →
``StoreUnavailable`` (the pool then checks its idle connections, so the next call gets
a live one after a server restart), deadlocks and lock timeouts → ``StoreLocked``,
missing tables → ``SchemaMismatch``; unique violations are translated where they
mean something (``Conflict``). The DSN's password never appears in a message.

Concurrency: the hot paths pick rows with ``FOR UPDATE SKIP LOCKED`` inside
``id = ANY(ARRAY(SELECT …))``, so several relays and workers share the tables without
waiting on each other; a finishing worker locks its dispatch rows (``leases_held``)
and the reaper skips locked rows, so a finish and a reap of one lease never both
apply. The claim and the relay are one statement each (a chain of data-modifying
CTEs); the materializer is fence + cursor ``UPDATE … FROM unnest`` + one
``INSERT … ON CONFLICT DO NOTHING`` that also writes the outbox rows.

ANALYZE: the store never runs it, not even after a large relay batch. Every statement
is planned with its real parameters (``force_custom_plan``), the planner scales row
estimates by the table's current size between ANALYZEs, and the hot picks are
ordered index scans that stop at a LIMIT (``dispatch_ready``, ``outbox_available``,
``schedules_due`` end in the tie-breaking id), a plan that does not hinge on fresh
statistics (``test_postgres_only`` checks the claim's plan right after a bulk load,
before any ANALYZE). An ANALYZE in the relay would add tens of milliseconds to the
very batch that must be fast; autovacuum's (after 10 % of a table changed) suffices.

Round trips: a write is BEGIN, its statements, COMMIT. Statements whose results the
next one does not need (finish, release, reap) go out together in one pipeline.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TypeAlias, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from clockd.config import redact_dsn
from clockd.core.model import (
    Attempt,
    AttemptOutcome,
    Occurrence,
    OccurrenceState,
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
    StorePermissionDenied,
    StoreUnavailable,
)
from clockd.store import (
    ApiToken,
    AppliedSchedules,
    AuditEntry,
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
    OccurrencePage,
    QueueStats,
    Reaped,
    ReconcileRows,
    ScheduleChange,
    ScheduleHistory,
    SchedulePage,
    creates_by_tenant,
    idempotency_conflict_message,
    misfire_verdicts,
    not_dead_message,
    schedule_quota_message,
    within_quota,
)
from clockd.store.api_rows import (
    audit_from_row,
    audit_params,
    occurrence_page_params,
    schedule_page_params,
    token_conflict_message,
    token_from_row,
    token_params,
)
from clockd.store.codec import (
    attempt_from_row,
    definition_from_dict,
    definition_json,
    histories_from_rows,
    minute_of,
    occurrence_from_row,
    schedule_from_row,
    spec_json,
)
from clockd.store.sql import load_migrations, load_queries, trusted_sql

log = logging.getLogger(__name__)

T = TypeVar("T")
Conn: TypeAlias = psycopg.AsyncConnection[tuple[Any, ...]]
Pool: TypeAlias = AsyncConnectionPool[Conn]

_PACKAGE: Final = __package__ or "clockd.store.postgres"
Q = load_queries(_PACKAGE)
PG = load_queries(_PACKAGE, "postgres_only.sql")
MIGRATIONS: Final = load_migrations(_PACKAGE)
KNOWN_VERSION: Final = MIGRATIONS[-1].version if MIGRATIONS else 0

DEFAULT_CONNECT_TIMEOUT: Final = 10.0
# Every connection of the store, set at connection start (no round trip).
SESSION_OPTIONS: Final = "-c plan_cache_mode=force_custom_plan -c jit=off -c TimeZone=UTC"

_FINISH_STATES = frozenset({OccurrenceState.SUCCEEDED, OccurrenceState.DEAD, OccurrenceState.RETRY_WAIT})
_PLANNED_STATES = frozenset({OccurrenceState.SCHEDULED}) | {s for s in OccurrenceState if s.terminal}
_DEFINITION_CACHE_MAX = 8192
_END_OF_TIME = datetime.max.replace(tzinfo=UTC)
_LEASE_LOST = "lease expired (worker crashed, paused or partitioned)"
# Leader's misfire sweep: rows waiting less than this are not even looked at.
_MISFIRE_FLOOR = timedelta(seconds=1)


class PostgresStore:
    """The ``Store`` port on a PostgreSQL database. See the module docstring."""

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        self.dsn = dsn
        self.min_size = min_size
        self.max_size = max_size
        self.connect_timeout = connect_timeout
        # Writes refused by the fence (a zombie materializer or leader); a metric.
        self.fenced_writes_rejected: int = 0
        self.display = redact_dsn(dsn)
        self._where, self._password = _describe(dsn)
        self._pool: Pool | None = None
        # (schedule_id, version) -> definition; versions never change once written.
        self._definitions: dict[tuple[str, int], ScheduleDef] = {}

    def __repr__(self) -> str:
        return f"PostgresStore({self.display!r})"

    # -- plumbing --------------------------------------------------------------------------

    def _connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of every connection: the session settings are appended to
        whatever ``options`` the DSN already carries."""
        given = conninfo_to_dict(self.dsn)
        options = f"{given['options']} {SESSION_OPTIONS}" if given.get("options") else SESSION_OPTIONS
        kwargs: dict[str, Any] = {"autocommit": True, "options": options}
        if "connect_timeout" not in given:
            kwargs["connect_timeout"] = max(1, round(self.connect_timeout))
        return kwargs

    async def _connect(self) -> Conn:
        """One connection outside the pool (the schema check, ``migrate`` on a closed store)."""
        try:
            return await psycopg.AsyncConnection.connect(self.dsn, **self._connect_kwargs())
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"cannot reach PostgreSQL at {self._where} ({self._message(exc)}): start it or fix --store"
            ) from exc

    async def _call(self, fn: Callable[[Conn], Awaitable[T]], *, write: bool) -> T:
        """Run ``fn`` on a pooled connection: as one transaction (``write``), or as the
        autocommit read it is."""
        pool = self._pool
        if pool is None:
            raise StoreUnavailable(f"store {self.display} is not open")
        try:
            async with pool.connection(timeout=self.connect_timeout) as conn:
                if not write:
                    return await fn(conn)
                async with conn.transaction():
                    return await fn(conn)
        except PoolClosed as exc:
            raise StoreUnavailable(f"store {self.display} is not open") from exc
        except PoolTimeout as exc:
            raise StoreUnavailable(
                f"no connection to PostgreSQL at {self._where} within {self.connect_timeout:g} s "
                f"({self._message(exc)}): is the server up and reachable?"
            ) from exc
        except psycopg.Error as exc:
            translated = self._translate(exc)
            if isinstance(translated, StoreUnavailable):
                await self._check_pool(pool)
            raise translated from exc

    async def _check_pool(self, pool: Pool) -> None:
        """After a connection failure, drop the pool's other dead connections (a server
        restart kills them all), so the next call gets a fresh one instead of failing too."""
        try:
            await pool.check()
        except Exception:  # best effort: the next call reports whatever is still wrong
            log.debug("pool check failed", exc_info=True, extra={"action": "pg_pool_check_failed"})

    def _message(self, exc: BaseException) -> str:
        """The driver's message on one line, with the DSN's password (if any) hidden."""
        text = " ".join(str(exc).split()) or type(exc).__name__
        if self._password:
            text = text.replace(self._password, "***")
        return text

    def _translate(self, exc: psycopg.Error) -> Exception:
        """A driver error as a clockd error that says what happened and what to do."""
        where = self._where
        message = self._message(exc)
        if isinstance(exc, (pg_errors.DeadlockDetected, pg_errors.LockNotAvailable, pg_errors.SerializationFailure)):
            return StoreLocked(f"PostgreSQL at {where}: {message}: nothing was committed; retry")
        if isinstance(exc, pg_errors.UndefinedTable):
            return SchemaMismatch(
                f"clockd's tables are missing in {self.display} ({message}): "
                f"run `clockd migrate --store {self.display}`"
            )
        if isinstance(exc, pg_errors.InsufficientPrivilege):
            return StorePermissionDenied(
                f"PostgreSQL at {where} refused this for the connecting role ({message}): "
                "use a role with the rights it needs (clockd_operator to change schedules, "
                "clockd_daemon for clockd run; see clockd migrate --create-roles)"
            )
        if isinstance(exc, pg_errors.DiskFull):
            return StoreUnavailable(f"PostgreSQL at {where} is out of disk ({message}): nothing was written")
        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            return StoreUnavailable(f"PostgreSQL at {where} failed ({message}): the next call reconnects")
        # Integrity and programming errors are bugs, not outages: keep them visible.
        return exc

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, check the schema, open the pool. Raises ``StoreUnavailable`` (server
        unreachable, refused login) or ``SchemaMismatch`` (behind: run ``clockd migrate``;
        ahead: upgrade clockd). Never migrates."""
        if self._pool is not None:
            return
        conn = await self._connect()
        try:
            await self._check_schema(conn, apply=False)
        except psycopg.Error as exc:
            raise self._translate(exc) from exc
        finally:
            await conn.close()
        pool: Pool = AsyncConnectionPool(
            self.dsn,
            kwargs=self._connect_kwargs(),
            min_size=self.min_size,
            max_size=self.max_size,
            open=False,
            timeout=self.connect_timeout,
            name="clockd",
        )
        try:
            await pool.open(wait=True, timeout=self.connect_timeout)
        except PoolTimeout as exc:
            await pool.close()
            raise StoreUnavailable(
                f"cannot reach PostgreSQL at {self._where} (no connection within "
                f"{self.connect_timeout:g} s): start it or fix --store"
            ) from exc
        self._pool = pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def migrate(self) -> list[str]:
        """See the port. Works on a closed store too (``clockd migrate`` does not open)."""
        pool = self._pool
        try:
            if pool is not None:
                async with pool.connection(timeout=self.connect_timeout) as conn:
                    return await self._migrate(conn)
            conn = await self._connect()
            try:
                return await self._migrate(conn)
            finally:
                await conn.close()
        except PoolTimeout as exc:
            raise StoreUnavailable(f"no connection to PostgreSQL at {self._where}: {self._message(exc)}") from exc
        except psycopg.Error as exc:
            raise self._translate(exc) from exc

    async def create_roles(self) -> None:
        """Create (or refresh the grants of) the clockd_daemon, clockd_operator and
        clockd_readonly group roles from ``roles.sql``. Run as the database owner."""
        script = trusted_sql((Path(__file__).parent / "roles.sql").read_text())
        try:
            conn = await self._connect()
            try:
                await conn.execute(script)
                await conn.commit()
            finally:
                await conn.close()
        except psycopg.Error as exc:
            raise self._translate(exc) from exc

    async def _check_schema(self, conn: Conn, *, apply: bool) -> set[int]:
        """The applied versions. Raises ``SchemaMismatch`` on a schema newer than this
        release, or (``apply`` false) on one older than it."""
        exists = await (await conn.execute(Q["schema_migrations_exists"])).fetchone()
        applied: set[int] = set()
        if exists:
            rows = await (await conn.execute(Q["schema_migrations_list"])).fetchall()
            applied = {int(v) for v, _ in rows}
        newest = max(applied, default=0)
        if newest > KNOWN_VERSION:
            raise SchemaMismatch(
                f"database schema {newest:04d} of {self.display} is newer than this clockd "
                f"(knows {KNOWN_VERSION:04d}): upgrade clockd"
            )
        missing = [m for m in MIGRATIONS if m.version not in applied]
        if missing and not apply:
            raise SchemaMismatch(
                f"database schema is at {newest:04d}, this clockd needs {KNOWN_VERSION:04d}: "
                f"run `clockd migrate --store {self.display}`"
            )
        return applied

    async def _migrate(self, conn: Conn) -> list[str]:
        """Apply pending migrations, each in its own transaction with its record, under
        the migration lock; what is applied is re-read under the lock, so two migrators
        at once apply each migration once."""
        done: list[str] = []
        for migration in MIGRATIONS:
            async with conn.transaction():
                await conn.execute(PG["migration_lock"])
                await conn.execute(Q["schema_migrations_create"])
                applied = await self._check_schema(conn, apply=True)
                if migration.version in applied:
                    continue
                await conn.execute(migration.sql)  # a script: several statements, no parameters
                await conn.execute(
                    Q["schema_migration_record"],
                    {"version": migration.version, "name": migration.name, "applied_at": datetime.now(UTC)},
                )
                done.append(migration.label)
        for label in done:
            log.info(
                "applied migration %s to %s",
                label,
                self.display,
                extra={"action": "store_migrated", "migration": label},
            )
        return done

    # -- fence -----------------------------------------------------------------------------

    async def _advance_fence(self, conn: Conn, fence: Fence) -> None:
        """Move ``fences(resource)`` to our token unless a larger one is stored; if it is
        larger, raise ``FencedOut`` (the caller's transaction rolls back: nothing commits).
        The row lock taken here makes writers of one resource wait for each other."""
        cur = await conn.execute(Q["fence_advance"], {"resource": fence.resource, "token": fence.token})
        row = await cur.fetchone()
        if row is not None and row[0] == fence.token:
            return
        stored = await (await conn.execute(Q["fence_get"], {"resource": fence.resource})).fetchone()
        self.fenced_writes_rejected += 1  # one event loop: no lock needed
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
        async def run(conn: Conn) -> int:
            row = await (await conn.execute(Q["counter_next"], {"name": resource})).fetchone()
            assert row is not None
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
        stamp = _utc(now)

        async def run(conn: Conn) -> Schedule:
            schedule = await _insert_schedule(conn, new, stamp)
            if idempotency_key is not None:
                try:
                    await conn.execute(Q["schedule_set_idempotency_key"], {"id": schedule.id, "key": idempotency_key})
                except pg_errors.UniqueViolation as exc:
                    if exc.diag.constraint_name != "schedules_idempotency":
                        raise
                    raise Conflict(idempotency_conflict_message(idempotency_key, definition.tenant)) from exc
            return schedule

        return await self._call(run, write=True)

    async def get_schedule_by_idempotency_key(self, tenant: str, key: str) -> Schedule | None:
        async def run(conn: Conn) -> Schedule | None:
            cur = await conn.execute(Q["schedule_get_by_idempotency_key"], {"tenant": tenant, "key": key})
            row = await cur.fetchone()
            return None if row is None else _schedule(row)

        return await self._call(run, write=False)

    async def get_schedule(self, tenant: str, name: str) -> Schedule | None:
        async def run(conn: Conn) -> Schedule | None:
            cur = await conn.execute(Q["schedule_get_by_name"], {"tenant": tenant, "name": name})
            row = await cur.fetchone()
            return None if row is None else _schedule(row)

        return await self._call(run, write=False)

    async def get_schedule_by_id(self, schedule_id: str) -> Schedule | None:
        """Any state, deleted included (callers check ``state``)."""

        async def run(conn: Conn) -> Schedule | None:
            row = await (await conn.execute(Q["schedule_get"], {"id": schedule_id})).fetchone()
            return None if row is None else _schedule(row)

        return await self._call(run, write=False)

    async def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        async def run(conn: Conn) -> list[Schedule]:
            rows = await (await conn.execute(Q["schedules_list"], {"tenant": tenant})).fetchall()
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
        stamp = _utc(now)
        return await self._call(lambda conn: _change_schedule(conn, change, stamp), write=True)

    async def apply_schedules(
        self,
        creates: Sequence[NewSchedule],
        changes: Sequence[ScheduleChange],
        now: datetime,
    ) -> AppliedSchedules:
        """See the port, in one transaction: each change with ``change_schedule``'s
        statements (changes are rare), then the creates in batches of ``_APPLY_BATCH``
        (``_insert_schedules``: a quota check per batch, one statement for the schedules
        and their overlap slots, one for their versions; 20,000 creates took 9 s row by
        row, under 1 s so). A batch that hits a taken name or id, or a tenant's limit, is
        redone row by row so the error names its schedule."""
        if not creates and not changes:
            return AppliedSchedules(created=[], changed=[], canceled=0)
        stamp = _utc(now)

        async def run(conn: Conn) -> AppliedSchedules:
            changed: list[Schedule] = []
            canceled = 0
            for change in changes:
                try:
                    schedule, count = await _change_schedule(conn, change, stamp)
                except NotFound as exc:
                    raise Conflict(f"{exc.message}; nothing was applied") from exc
                changed.append(schedule)
                canceled += count
            created: list[Schedule] = []
            for start in range(0, len(creates), _APPLY_BATCH):
                created += await _insert_schedules(conn, creates[start : start + _APPLY_BATCH], stamp)
            return AppliedSchedules(created=created, changed=changed, canceled=canceled)

        return await self._call(run, write=True)

    async def schedule_versions(
        self, schedule_id: str
    ) -> list[tuple[int, datetime, datetime | None, ScheduleDef, ScheduleState]]:
        async def run(
            conn: Conn,
        ) -> list[tuple[int, datetime, datetime | None, ScheduleDef, ScheduleState]]:
            cur = await conn.execute(Q["schedule_versions_list"], {"schedule_id": schedule_id})
            return [
                (
                    int(version),
                    _utc(valid_from),
                    _opt_utc(valid_to),
                    definition_from_dict(definition),
                    ScheduleState(state),
                )
                for version, valid_from, valid_to, definition, state in await cur.fetchall()
            ]

        return await self._call(run, write=False)

    # -- occurrences (clockctl) ------------------------------------------------------------

    async def add_manual_occurrence(
        self, schedule: Schedule, occurrence_id: str, max_attempts: int, now: datetime
    ) -> Occurrence:
        stamp = _utc(now)

        async def run(conn: Conn) -> None:
            try:
                await conn.execute(
                    Q["occurrence_insert_manual"],
                    {
                        "id": occurrence_id,
                        "schedule_id": schedule.id,
                        "version": schedule.version,
                        "tenant": schedule.definition.tenant,
                        "queue": schedule.definition.queue,
                        "now": stamp,
                        "max_attempts": max_attempts,
                    },
                )
            except pg_errors.ForeignKeyViolation as exc:
                raise NotFound(f"no schedule with id {schedule.id}") from exc
            except pg_errors.UniqueViolation as exc:
                raise Conflict(f"occurrence {occurrence_id} already exists") from exc
            await conn.execute(Q["outbox_insert"], {"ids": [occurrence_id]})

        await self._call(run, write=True)
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
        bound = _END_OF_TIME if before is None else _utc(before)

        async def run(conn: Conn) -> list[Occurrence]:
            if schedule_id is None:
                cur = await conn.execute(Q["occurrences_list"], {"limit": limit, "before": bound})
            else:
                cur = await conn.execute(
                    Q["occurrences_list_by_schedule"],
                    {"schedule_id": schedule_id, "limit": limit, "before": bound},
                )
            return [_occurrence(row) for row in await cur.fetchall()]

        return await self._call(run, write=False)

    async def get_occurrence(self, id_or_prefix: str) -> Occurrence | None:
        key = id_or_prefix.strip().lower()

        async def run(conn: Conn) -> Occurrence | None:
            row = await (await conn.execute(Q["occurrence_get"], {"id": key})).fetchone()
            if row is not None:
                return _occurrence(row)
            if len(key) < 6:
                return None
            cur = await conn.execute(Q["occurrence_by_prefix"], {"prefix": key, "prefix_end": key + "\U0010ffff"})
            rows = await cur.fetchall()
            if len(rows) > 1:
                raise Conflict(
                    f"occurrence prefix {key!r} is ambiguous ({rows[0][0]}, {rows[1][0]}, …): give more characters"
                )
            return _occurrence(rows[0]) if rows else None

        return await self._call(run, write=False)

    async def list_attempts(self, occurrence_id: str) -> list[Attempt]:
        async def run(conn: Conn) -> list[Attempt]:
            cur = await conn.execute(Q["attempts_list"], {"occurrence_id": occurrence_id})
            return [attempt_from_row(row, _utc, _opt_utc) for row in await cur.fetchall()]

        return await self._call(run, write=False)

    # -- materializer ----------------------------------------------------------------------

    async def due_schedules(self, shards: Sequence[int], until: datetime, limit: int) -> list[Schedule]:
        if not shards or limit <= 0:
            return []
        params = {"shards": list(dict.fromkeys(shards)), "until": _utc(until), "limit": limit}

        async def run(conn: Conn) -> list[Schedule]:
            return [_schedule(row) for row in await (await conn.execute(Q["due_schedules"], params)).fetchall()]

        return await self._call(run, write=False)

    async def due_shards(self, shards: Sequence[int], until: datetime) -> list[int]:
        if not shards:
            return []
        params = {"shards": list(dict.fromkeys(shards)), "until": _utc(until)}

        async def run(conn: Conn) -> list[int]:
            return [int(row[0]) for row in await (await conn.execute(Q["due_shards"], params)).fetchall()]

        return await self._call(run, write=False)

    async def materialize(
        self,
        fence: Fence,
        occurrences: Sequence[NewOccurrence],
        cursors: Sequence[CursorAdvance],
        now: datetime,
    ) -> MaterializeResult:
        stamp = _utc(now)
        advance = _columns(
            [(c.schedule_id, c.version, _opt_utc(c.expected), _opt_utc(c.next_run_at)) for c in cursors], 4
        )
        for o in occurrences:
            if o.state not in _PLANNED_STATES:
                raise ValueError(f"cannot materialize occurrence {o.id} as {o.state}")
        planned = [
            (
                (o.schedule_id, o.version),
                (
                    o.id, o.schedule_id, o.version, o.tenant, o.queue, _utc(o.scheduled_for),
                    _utc(o.available_at), o.state.value, o.max_attempts, o.reason,
                    None if o.state is OccurrenceState.SCHEDULED else stamp,
                ),
            )
            for o in occurrences
        ]  # fmt: skip

        async def run(conn: Conn) -> MaterializeResult:
            await self._advance_fence(conn, fence)
            moved: set[tuple[str, int]] = set()
            if cursors:
                cur = await conn.execute(
                    Q["materialize_advance"],
                    {"ids": advance[0], "versions": advance[1], "expected": advance[2], "next_run_at": advance[3]},
                )
                moved = {(sid, int(version)) for sid, version in await cur.fetchall()}
            rows = [row for key, row in planned if key in moved]
            inserted = 0
            if rows:
                (ids, schedule_ids, versions, tenants, queues, scheduled_for, available_at, states,
                 max_attempts, reasons, finished_at) = _columns(rows, 11)  # fmt: skip
                cur = await conn.execute(
                    Q["materialize_insert"],
                    {
                        "ids": ids,
                        "schedule_ids": schedule_ids,
                        "versions": versions,
                        "tenants": tenants,
                        "queues": queues,
                        "scheduled_for": scheduled_for,
                        "available_at": available_at,
                        "states": states,
                        "max_attempts": max_attempts,
                        "reasons": reasons,
                        "finished_at": finished_at,
                    },
                )
                inserted = len(await cur.fetchall())
            return MaterializeResult(inserted=inserted, advanced=len(moved), stale=len(cursors) - len(moved))

        return await self._call(run, write=True)

    # -- relay -----------------------------------------------------------------------------

    async def relay(self, until: datetime, limit: int, now: datetime) -> int:
        if limit <= 0:
            return 0
        params = {"until": _utc(until), "limit": limit, "now": _utc(now)}

        async def run(conn: Conn) -> int:
            return (await conn.execute(Q["relay_dispatch"], params)).rowcount

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
        stamp = _utc(now)
        lease_until = stamp + lease_for
        params = {
            "queues": list(dict.fromkeys(queues)),
            "worker_id": worker_id,
            "limit": limit,
            "now": stamp,
            "lease_until": lease_until,
            "minute": minute_of(stamp),
        }

        async def run(conn: Conn) -> list[Claim]:
            rows = await (await conn.execute(Q["claim_lease"], params)).fetchall()
            if not rows:
                return []
            definitions = await self._definitions_for(conn, {(row[3], int(row[4])) for row in rows})
            claims: list[Claim] = []
            for occ, token, attempt, schedule_id, version, scheduled_for, max_attempts in rows:
                definition = definitions[(schedule_id, int(version))]
                retry = definition.retry
                claims.append(
                    Claim(
                        occurrence_id=occ,
                        lease_token=token,
                        attempt=int(attempt),
                        schedule_id=schedule_id,
                        schedule_name=definition.name,
                        version=int(version),
                        scheduled_for=_utc(scheduled_for),
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

    async def _definitions_for(self, conn: Conn, keys: set[tuple[str, int]]) -> dict[tuple[str, int], ScheduleDef]:
        cache = self._definitions
        # Take the hits before the cache may be cleared below: a burst spanning more
        # distinct schedules than the cache holds must not lose the ones it already had.
        found = {key: cache[key] for key in keys if key in cache}
        missing = [key for key in keys if key not in found]
        if missing:
            if len(cache) + len(missing) > _DEFINITION_CACHE_MAX:
                cache.clear()
            cur = await conn.execute(
                Q["schedule_definitions"],
                {"schedule_ids": [k[0] for k in missing], "versions": [k[1] for k in missing]},
            )
            for schedule_id, version, document in await cur.fetchall():
                definition = definition_from_dict(document)
                cache[(schedule_id, int(version))] = definition
                found[(schedule_id, int(version))] = definition
        return found

    async def extend_leases(self, tokens: Sequence[str], lease_for: timedelta, now: datetime) -> set[str]:
        if not tokens:
            return set()
        params = {"tokens": list(dict.fromkeys(tokens)), "lease_until": _utc(now) + lease_for}

        async def run(conn: Conn) -> set[str]:
            return {row[0] for row in await (await conn.execute(Q["leases_extend"], params)).fetchall()}

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
        stamp = _utc(now)
        tokens = list(by_token)

        async def run(conn: Conn) -> set[str]:
            found = await (await conn.execute(Q["leases_held"], {"tokens": tokens})).fetchall()
            held = _running(found)
            if not held:
                return set()
            # Who ran the attempt and since when: the lease is the running attempt's only
            # record (schema 0005); finish_attempts writes its row.
            leases = {row[2]: (row[6] or "", row[7] or stamp) for row in found}
            rows: list[tuple[Any, ...]] = []
            done: list[int] = []
            retry: list[tuple[int, datetime]] = []
            ended: list[str] = []
            for dispatch_id, occ, token, attempt, _ in held:
                c = by_token[token]
                reason = None
                if c.next_state is OccurrenceState.DEAD:
                    reason = c.error or f"attempt {attempt} {c.outcome.value}" + (
                        f" (exit code {c.exit_code})" if c.exit_code is not None else ""
                    )
                worker_id, started_at = leases[token]
                rows.append(
                    (occ, attempt, c.outcome.value, c.exit_code, c.signal, _text(c.output), _opt_text(c.error),
                     c.next_state.value, _opt_text(reason), token, worker_id, started_at)
                )  # fmt: skip
                if c.next_state is OccurrenceState.RETRY_WAIT:
                    retry.append((dispatch_id, stamp if c.retry_at is None else _utc(c.retry_at)))
                else:
                    done.append(dispatch_id)
                    ended.append(occ)
            (occ_ids, attempts, outcomes, exit_codes, signals, outputs, errors, next_states, reasons,
             lease_tokens, worker_ids, started_at) = _columns(rows, 12)  # fmt: skip
            # Four independent writes: one pipeline, one round trip.
            async with conn.pipeline():
                await conn.execute(
                    Q["finish_attempts"],
                    {
                        "now": stamp,
                        "occurrence_ids": occ_ids,
                        "attempts": attempts,
                        "lease_tokens": lease_tokens,
                        "worker_ids": worker_ids,
                        "started_at": started_at,
                        "outcomes": outcomes,
                        "exit_codes": exit_codes,
                        "signals": signals,
                        "outputs": outputs,
                        "errors": errors,
                    },
                )
                await conn.execute(
                    Q["finish_occurrences"],
                    {
                        "now": stamp,
                        "occurrence_ids": occ_ids,
                        "exit_codes": exit_codes,
                        "errors": errors,
                        "next_states": next_states,
                        "reasons": reasons,
                    },
                )
                if done:
                    await conn.execute(Q["dispatch_delete"], {"ids": done})
                if retry:
                    retry_ids, visible_at = _columns(retry, 2)
                    await conn.execute(Q["dispatch_retry"], {"ids": retry_ids, "visible_at": visible_at})
                await conn.execute(Q["tenant_running_release"], {"tenants": [row[4] for row in held]})
                if ended:  # a RETRY_WAIT holder keeps its overlap slot until it ends
                    await conn.execute(Q["overlap_release"], {"ids": ended, "now": stamp})
            return {row[2] for row in held}

        return await self._call(run, write=True)

    async def release(self, tokens: Sequence[str], now: datetime) -> int:
        """See the port. ``visible_at`` is left as it was (already due)."""
        if not tokens:
            return 0
        params = {"tokens": list(dict.fromkeys(tokens))}

        async def run(conn: Conn) -> int:
            held = _running(await (await conn.execute(Q["leases_held"], params)).fetchall())
            if not held:
                return 0
            async with conn.pipeline():
                await conn.execute(
                    Q["release_attempts"],
                    {"occurrence_ids": [row[1] for row in held], "attempts": [row[3] for row in held]},
                )
                await conn.execute(Q["release_occurrences"], {"ids": [row[1] for row in held]})
                await conn.execute(Q["dispatch_unlease"], {"ids": [row[0] for row in held], "visible_at": None})
                await conn.execute(Q["tenant_running_release"], {"tenants": [row[4] for row in held]})
            return len(held)

        return await self._call(run, write=True)

    # -- leader ----------------------------------------------------------------------------

    async def reap_expired(self, fence: Fence, limit: int, now: datetime) -> list[Reaped]:
        stamp = _utc(now)

        async def run(conn: Conn) -> list[Reaped]:
            await self._advance_fence(conn, fence)
            picked = await (await conn.execute(Q["reap_pick"], {"now": stamp, "limit": limit})).fetchall()
            if not picked:
                return []
            again = [row for row in picked if row[2] < row[3]]
            dead = [row for row in picked if row[2] >= row[3]]
            async with conn.pipeline():
                await conn.execute(
                    Q["reap_attempts"],
                    {
                        "occurrence_ids": [row[1] for row in picked],
                        "attempts": [row[2] for row in picked],
                        "lease_tokens": [row[5] for row in picked],
                        "worker_ids": [row[6] for row in picked],
                        "started_at": [row[7] for row in picked],
                        "now": stamp,
                        "error": _LEASE_LOST,
                    },
                )
                if again:
                    await conn.execute(Q["dispatch_unlease"], {"ids": [row[0] for row in again], "visible_at": stamp})
                    await conn.execute(Q["reap_retry"], {"ids": [row[1] for row in again]})
                if dead:
                    await conn.execute(Q["dispatch_delete"], {"ids": [row[0] for row in dead]})
                    await conn.execute(Q["reap_dead"], {"ids": [row[1] for row in dead], "now": stamp})
                    await conn.execute(Q["overlap_release"], {"ids": [row[1] for row in dead], "now": stamp})
                await conn.execute(Q["tenant_running_release"], {"tenants": [row[4] for row in picked]})
            return [
                Reaped(
                    occurrence_id=occ,
                    attempt=int(attempt),
                    next_state=OccurrenceState.RETRY_WAIT if attempt < max_attempts else OccurrenceState.DEAD,
                )
                for _, occ, attempt, max_attempts, *_ in picked
            ]

        return await self._call(run, write=True)

    async def prune(self, fence: Fence, before: datetime, limit: int, now: datetime) -> int:
        params = {"before": _utc(before), "limit": limit}

        async def run(conn: Conn) -> int:
            await self._advance_fence(conn, fence)
            return (await conn.execute(Q["prune"], params)).rowcount

        return await self._call(run, write=True)

    async def sweep_misfires(self, fence: Fence, limit: int, now: datetime) -> int:
        """See the port."""
        stamp = _utc(now)

        async def run(conn: Conn) -> int:
            await self._advance_fence(conn, fence)
            cur = await conn.execute(Q["misfire_pick"], {"now": stamp, "floor": _MISFIRE_FLOOR, "limit": limit})
            missed = misfire_verdicts(
                [
                    LateRow(did, occ, _utc(visible), policy, timedelta(microseconds=int(lateness)),
                            int(catch_up), int(newest), bool(newer))
                    for did, occ, visible, policy, lateness, catch_up, newest, newer in await cur.fetchall()
                ],
                stamp,
            )  # fmt: skip
            if not missed:
                return 0
            ids = [m.occurrence_id for m in missed]
            async with conn.pipeline():
                await conn.execute(
                    Q["misfire_mark"], {"ids": ids, "reasons": [m.reason for m in missed], "now": stamp}
                )
                await conn.execute(Q["dispatch_delete"], {"ids": [m.dispatch_id for m in missed]})
                await conn.execute(Q["overlap_release"], {"ids": ids, "now": stamp})
            return len(missed)

        return await self._call(run, write=True)

    async def release_stale_slots(self, fence: Fence, limit: int, now: datetime) -> int:
        """See the port."""
        stamp = _utc(now)

        async def run(conn: Conn) -> int:
            await self._advance_fence(conn, fence)
            stale = [row[0] for row in await (await conn.execute(Q["overlap_stale"], {"limit": limit})).fetchall()]
            if stale:
                await conn.execute(Q["overlap_release"], {"ids": stale, "now": stamp})
            return len(stale)

        return await self._call(run, write=True)

    # -- occurrences: running, dead letters ------------------------------------------------

    async def running_occurrences(self, schedule_id: str) -> list[Occurrence]:
        async def run(conn: Conn) -> list[Occurrence]:
            cur = await conn.execute(Q["occurrences_running"], {"schedule_id": schedule_id})
            return [_occurrence(row) for row in await cur.fetchall()]

        return await self._call(run, write=False)

    async def list_dead(
        self, schedule_id: str | None = None, tenant: str | None = None, limit: int = 50
    ) -> list[Occurrence]:
        async def run(conn: Conn) -> list[Occurrence]:
            if schedule_id is None:
                cur = await conn.execute(Q["dlq_list"], {"tenant": tenant, "limit": limit})
            else:
                cur = await conn.execute(Q["dlq_list_by_schedule"], {"schedule_id": schedule_id, "limit": limit})
            return [dataclasses.replace(_occurrence(row[:15]), last_error=row[15]) for row in await cur.fetchall()]

        return await self._call(run, write=False)

    async def replay_dead(self, occurrence_id: str, reason: str, now: datetime) -> Occurrence:
        """See the port."""
        params = {"id": occurrence_id, "now": _utc(now), "reason": _text(reason)}

        async def run(conn: Conn) -> Occurrence:
            if await (await conn.execute(Q["dlq_replay"], params)).fetchone() is None:
                raise await _not_dead(conn, occurrence_id)
            await conn.execute(Q["dlq_dispatch"], params)
            return await _one_occurrence(conn, occurrence_id)

        return await self._call(run, write=True)

    async def drop_dead(self, occurrence_id: str, reason: str, now: datetime) -> Occurrence:
        """See the port."""
        params = {"id": occurrence_id, "now": _utc(now), "reason": _text(reason)}

        async def run(conn: Conn) -> Occurrence:
            if await (await conn.execute(Q["dlq_drop"], params)).fetchone() is None:
                raise await _not_dead(conn, occurrence_id)
            return await _one_occurrence(conn, occurrence_id)

        return await self._call(run, write=True)

    # -- tenants ---------------------------------------------------------------------------

    async def set_tenant_limits(self, limits: TenantLimits, now: datetime) -> TenantLimits:
        """See the port. The upsert locks the row; the recount is a statement of its own."""
        params = {
            "tenant": limits.tenant,
            "max_schedules": limits.max_schedules,
            "max_running": limits.max_running,
            "max_triggers_per_minute": limits.max_triggers_per_minute,
            "catch_up_rate": limits.catch_up_rate,
            "now": _utc(now),
        }

        async def run(conn: Conn) -> TenantLimits:
            await conn.execute(Q["tenant_limits_upsert"], params)
            await conn.execute(Q["tenant_running_recount"], {"tenant": limits.tenant})
            return limits

        return await self._call(run, write=True)

    async def tenant_limits(self) -> list[TenantLimits]:
        async def run(conn: Conn) -> list[TenantLimits]:
            return [TenantLimits(*row) for row in await (await conn.execute(Q["tenant_limits_all"])).fetchall()]

        return await self._call(run, write=False)

    async def tenant_usage(self) -> list[TenantUsage]:
        async def run(conn: Conn) -> list[TenantUsage]:
            rows = await (await conn.execute(Q["tenant_usage"])).fetchall()
            return [TenantUsage(TenantLimits(*row[:5]), schedules=int(row[5]), running=int(row[6])) for row in rows]

        return await self._call(run, write=False)

    # -- observation -----------------------------------------------------------------------

    async def backlog(self, now: datetime) -> Backlog:
        params = {"now": _utc(now)}

        async def run(conn: Conn) -> Backlog:
            row = await (await conn.execute(Q["backlog"], params)).fetchone()
            assert row is not None
            due, outbox, queued, running, oldest = row
            return Backlog(
                due_schedules=int(due),
                outbox=int(outbox),
                queued=int(queued),
                running=int(running),
                oldest_queued_at=_opt_utc(oldest),
            )

        return await self._call(run, write=False)

    async def server_time(self) -> datetime:
        """The server's clock now (``clock_timestamp()``, not the transaction's start)."""

        async def run(conn: Conn) -> datetime:
            row = await (await conn.execute(PG["server_time"])).fetchone()
            assert row is not None
            return _utc(row[0])

        return await self._call(run, write=False)

    # -- operator read paths ---------------------------------------------------------------

    async def reconcile_rows(self, start: datetime, end: datetime, schedule_id: str | None = None) -> ReconcileRows:
        """See the port: both statements in one REPEATABLE READ, READ ONLY transaction."""
        params = {"start": _utc(start), "end": _utc(end), "schedule_id": schedule_id}

        async def run(conn: Conn) -> ReconcileRows:
            await conn.execute(PG["snapshot_read"])
            if schedule_id is None:
                versions = await (await conn.execute(Q["reconcile_versions"], params)).fetchall()
                rows = await (await conn.execute(Q["reconcile_occurrences"], params)).fetchall()
            else:
                versions = await (await conn.execute(Q["reconcile_versions_of"], params)).fetchall()
                rows = await (await conn.execute(Q["reconcile_occurrences_of"], params)).fetchall()
            return ReconcileRows(
                schedules=_histories(versions),
                occurrences=[dataclasses.replace(_occurrence(row[:15]), last_error=row[15]) for row in rows],
            )

        return await self._call(run, write=True)

    async def queue_stats(self, now: datetime) -> list[QueueStats]:
        params = {"now": _utc(now)}

        async def run(conn: Conn) -> list[QueueStats]:
            rows = await (await conn.execute(Q["queue_stats"], params)).fetchall()
            return [
                QueueStats(queue, int(ready), int(running), int(staged), _opt_utc(oldest))
                for queue, ready, running, staged, oldest in rows
            ]

        return await self._call(run, write=False)

    async def start_lag(self, since: datetime, now: datetime) -> LagStats:
        params = {"since": _utc(since), "now": _utc(now)}

        async def run(conn: Conn) -> LagStats:
            row = await (await conn.execute(Q["start_lag"], params)).fetchone()
            assert row is not None
            count, ranks = row
            if not count or ranks is None:
                return LagStats(0, None, None, None)
            p50, p95, p99 = (float(v) for v in ranks)
            return LagStats(int(count), p50, p95, p99)

        return await self._call(run, write=False)

    async def live_schedules_count(self) -> int:
        async def run(conn: Conn) -> int:
            row = await (await conn.execute(Q["live_schedules_count"])).fetchone()
            assert row is not None
            return int(row[0])

        return await self._call(run, write=False)

    async def dead_count(self) -> int:
        async def run(conn: Conn) -> int:
            row = await (await conn.execute(Q["dead_count"])).fetchone()
            assert row is not None
            return int(row[0])

        return await self._call(run, write=False)

    async def not_run_counts(self, since: datetime, until: datetime) -> dict[tuple[OccurrenceState, str], int]:
        params = {"since": _utc(since), "until": _utc(until)}

        async def run(conn: Conn) -> dict[tuple[OccurrenceState, str], int]:
            rows = await (await conn.execute(Q["not_run_counts"], params)).fetchall()
            return {(OccurrenceState(state), str(kind)): int(n) for state, kind, n in rows}

        return await self._call(run, write=False)

    async def enqueue_lags(self, since: datetime, until: datetime, limit: int) -> list[float]:
        params = {"since": _utc(since), "until": _utc(until), "limit": limit}

        async def run(conn: Conn) -> list[float]:
            return [float(lag) for (lag,) in await (await conn.execute(Q["enqueue_lags"], params)).fetchall()]

        return await self._call(run, write=False)

    # --- API: tokens, audit, pages ---
    # Thin: each runs its named block (queries.sql, schema 0007) and decodes with
    # clockd.store.api_rows, which both adapters share.

    async def create_token(self, token: ApiToken) -> None:
        async def run(conn: Conn) -> None:
            try:
                await conn.execute(Q["api_token_insert"], token_params(token, _utc))
            except pg_errors.UniqueViolation as exc:
                raise Conflict(token_conflict_message(token)) from exc

        await self._call(run, write=True)

    async def get_token(self, token_id: str) -> ApiToken | None:
        async def run(conn: Conn) -> ApiToken | None:
            row = await (await conn.execute(Q["api_token_get"], {"id": token_id})).fetchone()
            return None if row is None else token_from_row(row, _utc, _opt_utc)

        return await self._call(run, write=False)

    async def list_tokens(self, tenant: str | None = None) -> list[ApiToken]:
        async def run(conn: Conn) -> list[ApiToken]:
            rows = await (await conn.execute(Q["api_tokens_list"], {"tenant": tenant})).fetchall()
            return [token_from_row(row, _utc, _opt_utc) for row in rows]

        return await self._call(run, write=False)

    async def revoke_token(self, tenant: str, ref: str, now: datetime) -> ApiToken | None:
        async def run(conn: Conn) -> ApiToken | None:
            params = {"tenant": tenant, "ref": ref, "now": _utc(now)}
            row = await (await conn.execute(Q["api_token_revoke"], params)).fetchone()
            return None if row is None else token_from_row(row, _utc, _opt_utc)

        return await self._call(run, write=True)

    async def record_audit(self, entry: AuditEntry) -> int:
        async def run(conn: Conn) -> int:
            row = await (await conn.execute(Q["audit_insert"], audit_params(entry, _utc))).fetchone()
            assert row is not None  # INSERT … RETURNING
            return int(row[0])

        return await self._call(run, write=True)

    async def audit_page(self, tenant: str | None, before: int | None, limit: int) -> list[AuditEntry]:
        async def run(conn: Conn) -> list[AuditEntry]:
            params = {"tenant": tenant, "before": before, "limit": limit}
            rows = await (await conn.execute(Q["audit_page"], params)).fetchall()
            return [audit_from_row(row, _utc) for row in rows]

        return await self._call(run, write=False)

    async def schedules_page(self, tenant: str, query: SchedulePage) -> list[Schedule]:
        async def run(conn: Conn) -> list[Schedule]:
            rows = await (await conn.execute(Q["schedules_page"], schedule_page_params(tenant, query))).fetchall()
            return [_schedule(row) for row in rows]

        return await self._call(run, write=False)

    async def occurrences_page(self, tenant: str, query: OccurrencePage) -> list[Occurrence]:
        async def run(conn: Conn) -> list[Occurrence]:
            params = occurrence_page_params(tenant, query, _utc)
            rows = await (await conn.execute(Q["occurrences_page"], params)).fetchall()
            return [_occurrence(row) for row in rows]

        return await self._call(run, write=False)


# -- values ----------------------------------------------------------------------------------


def _running(held: Sequence[Sequence[Any]]) -> list[Sequence[Any]]:
    """``leases_held`` rows whose occurrence is RUNNING, without the state column:
    (dispatch id, occurrence id, token, attempt, tenant)."""
    return [row[:5] for row in held if row[5] == OccurrenceState.RUNNING.value]


def _utc(instant: datetime) -> datetime:
    """``instant`` in UTC. Naive datetimes are refused, never guessed (as codec.to_us)."""
    if instant.tzinfo is UTC:  # nearly always: checked first, it is on every hot path
        return instant
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"naive datetime {instant.isoformat()} given to the store: pass aware UTC")
    return instant.astimezone(UTC)


def _opt_utc(instant: datetime | None) -> datetime | None:
    return None if instant is None else _utc(instant)


def _text(text: str) -> str:
    """PostgreSQL text cannot hold NUL; a job's output may. Stored as U+FFFD, the
    character the runner already uses for bytes that are not UTF-8."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _opt_text(text: str | None) -> str | None:
    return None if text is None else _text(text)


def _columns(rows: Iterable[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows → one list per column (each becomes one array parameter for unnest). zip
    transposes at C speed (the materializer turns ~10 values per occurrence)."""
    columns = [list(column) for column in zip(*rows, strict=True)]
    if not columns:
        return [[] for _ in range(width)]
    if len(columns) != width:
        raise ValueError(f"rows of {len(columns)} values where {width} were expected")
    return columns


def _describe(dsn: str) -> tuple[str, str | None]:
    """``host:port/dbname`` for messages, and the password to scrub from driver messages."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return redact_dsn(dsn), None
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = str(params.get("port") or "5432")
    dbname = str(params.get("dbname") or params.get("user") or "postgres")
    password = params.get("password")
    return f"{host}:{port}/{dbname}", str(password) if password else None


# -- schedule writes (one connection, inside the caller's transaction) -------------------------

# Creates per statement in apply_schedules: 20,000 in a few statements of a few MB each.
_APPLY_BATCH: Final = 5000


async def _insert_schedule(conn: Conn, new: NewSchedule, stamp: datetime) -> Schedule:
    """``create_schedule``'s statements: the schedule row at version 1 and its first
    ``schedule_versions`` row. ``Conflict`` when the live name (or the id) is taken."""
    definition = new.definition
    next_run_at = _opt_utc(new.next_run_at)
    await _check_schedule_quota(conn, definition.tenant)
    try:
        await conn.execute(
            Q["schedule_insert"],
            {
                "id": new.schedule_id,
                "tenant": definition.tenant,
                "name": definition.name,
                "kind": definition.kind.value,
                "expr": definition.expr,
                "tz": definition.tz,
                "queue": definition.queue,
                "next_run_at": next_run_at,
                "shard": new.shard,
                "now": stamp,
                "spec": spec_json(definition),
            },
        )
    except pg_errors.UniqueViolation as exc:
        if exc.diag.constraint_name == "schedules_live_name":
            raise Conflict(f"schedule {definition.name!r} already exists in tenant {definition.tenant!r}") from exc
        if exc.diag.constraint_name == "schedules_pkey":
            raise Conflict(f"schedule id {new.schedule_id} already exists") from exc
        raise
    await conn.execute(
        Q["schedule_version_insert"],
        {
            "schedule_id": new.schedule_id,
            "version": 1,
            "state": ScheduleState.ACTIVE.value,
            "now": stamp,
            "definition": definition_json(definition),
            "reason": "created",
        },
    )
    return _created(new, next_run_at, stamp)


def _created(new: NewSchedule, next_run_at: datetime | None, stamp: datetime) -> Schedule:
    """The schedule a create wrote (version 1, active, created and updated ``stamp``)."""
    return Schedule(
        id=new.schedule_id,
        version=1,
        state=ScheduleState.ACTIVE,
        definition=new.definition,
        next_run_at=next_run_at,
        shard=new.shard,
        created_at=stamp,
        updated_at=stamp,
    )


async def _insert_schedules(conn: Conn, batch: Sequence[NewSchedule], stamp: datetime) -> list[Schedule]:
    """``_insert_schedule`` for a batch, set-based: the quota check once per batch
    (``_within_quota``), then ``schedule_insert_many`` and ``schedule_version_insert_many``.
    The insert runs under a savepoint: when it hits a taken name or id (or a name twice
    in the batch), or the batch would pass a tenant's limit, the batch is redone row by
    row, which raises the same ``Conflict`` / ``QuotaExceeded`` a row-by-row apply would,
    naming the first schedule at fault."""
    if len(batch) == 1 or not await _within_quota(conn, batch):
        return [await _insert_schedule(conn, new, stamp) for new in batch]
    cursors = [_opt_utc(new.next_run_at) for new in batch]
    ids = [new.schedule_id for new in batch]
    definitions = [new.definition for new in batch]
    try:
        async with conn.transaction():
            await conn.execute(
                Q["schedule_insert_many"],
                {
                    "ids": ids,
                    "tenants": [d.tenant for d in definitions],
                    "names": [d.name for d in definitions],
                    "kinds": [d.kind.value for d in definitions],
                    "exprs": [d.expr for d in definitions],
                    "tzs": [d.tz for d in definitions],
                    "queues": [d.queue for d in definitions],
                    "next_run_at": cursors,
                    "shards": [new.shard for new in batch],
                    "specs": [spec_json(d) for d in definitions],
                    "now": stamp,
                },
            )
    except psycopg.IntegrityError:  # row by row: the error of the row at fault
        return [await _insert_schedule(conn, new, stamp) for new in batch]
    await conn.execute(
        Q["schedule_version_insert_many"],
        {
            "ids": ids,
            "definitions": [definition_json(d) for d in definitions],
            "next_run_at": cursors,
            "state": ScheduleState.ACTIVE.value,
            "reason": "created",
            "now": stamp,
        },
    )
    return [_created(new, cursor, stamp) for new, cursor in zip(batch, cursors, strict=True)]


async def _within_quota(conn: Conn, batch: Sequence[NewSchedule]) -> bool:
    """Whether every tenant of ``batch`` stays within its ``max_schedules`` with all of
    the batch's creates: ``_check_schedule_quota`` for the whole batch (the tenants'
    limits rows locked first, then one count), false exactly when creating the batch
    row by row would raise ``QuotaExceeded``."""
    wanted = creates_by_tenant(batch)
    cur = await conn.execute(Q["tenant_limits_lock_many"], {"tenants": sorted(wanted)})
    limits = {str(tenant): int(cap) for tenant, cap in await cur.fetchall()}
    if not limits:
        return True
    cur = await conn.execute(Q["tenant_schedules_count_many"], {"tenants": sorted(limits)})
    counts = {str(tenant): int(n) for tenant, n in await cur.fetchall()}
    return within_quota(wanted, limits, counts)


async def _change_schedule(conn: Conn, change: ScheduleChange, stamp: datetime) -> tuple[Schedule, int]:
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
        "next_run_at": _opt_utc(change.next_run_at),
        "now": stamp,
        "spec": spec_json(definition),
    }
    try:
        row = await (await conn.execute(Q["schedule_update"], params)).fetchone()
    except pg_errors.UniqueViolation as exc:
        if exc.diag.constraint_name != "schedules_live_name":
            raise
        raise Conflict(f"schedule {definition.name!r} already exists in tenant {definition.tenant!r}") from exc
    if row is None:
        current = await (await conn.execute(Q["schedule_get"], {"id": schedule_id})).fetchone()
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
    await conn.execute(Q["schedule_version_close"], {"schedule_id": schedule_id, "now": stamp})
    await conn.execute(
        Q["schedule_version_insert"],
        {
            "schedule_id": schedule_id,
            "version": schedule.version,
            "state": change.state.value,
            "now": stamp,
            "definition": definition_json(definition),
            "reason": change.reason,
        },
    )
    cancel = {
        "schedule_id": schedule_id,
        "version": schedule.version,
        "include_manual": change.state is ScheduleState.DELETED,
        "reason": change.reason,
        "now": stamp,
    }
    await conn.execute(Q["cancel_outbox"], cancel)
    await conn.execute(Q["cancel_dispatch"], cancel)
    canceled = (await conn.execute(Q["cancel_occurrences"], cancel)).rowcount
    return schedule, canceled


async def _check_schedule_quota(conn: Conn, tenant: str) -> None:
    """``QuotaExceeded`` when ``tenant`` already has ``max_schedules`` live schedules. The
    limits row is locked first and the count is a statement of its own, so it sees every
    create of the tenant committed before the lock: two creates cannot both take the last
    place."""
    row = await (await conn.execute(Q["tenant_limits_lock"], {"tenant": tenant})).fetchone()
    if row is None:
        return
    counted = await (await conn.execute(Q["tenant_schedules_count"], {"tenant": tenant})).fetchone()
    assert counted is not None
    if int(counted[0]) >= int(row[0]):
        raise QuotaExceeded(schedule_quota_message(tenant, int(row[0])))


async def _not_dead(conn: Conn, occurrence_id: str) -> ClockdError:
    row = await (await conn.execute(Q["occurrence_get"], {"id": occurrence_id})).fetchone()
    if row is None:
        return NotFound(f"no occurrence {occurrence_id!r}")
    return Conflict(not_dead_message(_occurrence(row)))


async def _one_occurrence(conn: Conn, occurrence_id: str) -> Occurrence:
    row = await (await conn.execute(Q["occurrence_get"], {"id": occurrence_id})).fetchone()
    if row is None:
        raise NotFound(f"no occurrence {occurrence_id!r}")
    return _occurrence(row)


# -- row decoding ----------------------------------------------------------------------------


def _schedule(row: Sequence[Any]) -> Schedule:
    return schedule_from_row(row, _utc, _opt_utc, _jsonb)


def _jsonb(document: dict[str, Any]) -> dict[str, Any]:
    return document  # psycopg has decoded the jsonb column already


def _occurrence(row: Sequence[Any]) -> Occurrence:
    return occurrence_from_row(row, _utc, _opt_utc)


# -- operator read paths: row decoding ---------------------------------------------------------


def _histories(rows: Sequence[Sequence[Any]]) -> list[ScheduleHistory]:
    return histories_from_rows(rows, _utc, definition_from_dict)


__all__ = ["KNOWN_VERSION", "MIGRATIONS", "PostgresStore"]
