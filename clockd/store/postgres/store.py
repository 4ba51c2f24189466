"""``PostgresStore``: the shared store (psycopg 3, asyncio, one connection pool).

This module is the PostgreSQL *driver* of the SQL store engine (``clockd.store.engine``
implements the ``Store`` port; ``PostgresStore`` is the two composed). It owns the pool,
the value encoding, the error translation and the steps PostgreSQL writes as one
statement chain (the claim, the relay, the materializer's insert). The engine's
transaction bodies run on the event loop: each statement is awaited, a ``Pipeline`` goes
out in one round trip, a ``Stream`` goes out statement by statement in a pipeline inside a
savepoint (the next statement is built while the server runs the one before; the first
error rolls back to the savepoint and comes out of the pipeline's end).

Connections: a ``psycopg_pool.AsyncConnectionPool`` (``min_size``..``max_size``), opened
by ``open()`` and closed by ``close()``. Every connection starts with
``plan_cache_mode = force_custom_plan`` (a statement prepared while the queue was
empty kept a generic plan after a bulk load: 240 ms instead of 8 ms per claim),
``jit = off`` (compiling costs more than these short statements) and ``TimeZone = UTC``
(psycopg then hands back ``datetime.UTC`` instants), sent as startup ``options`` so
they cost no round trip. Connections run in autocommit: a read is one statement, a
write is one explicit transaction (``conn.transaction()``) that commits or rolls back
entirely.

A daemon's store (``idle_in_transaction_timeout``, set by ``clockd.wiring.build_daemon``)
also starts every connection with ``idle_in_transaction_session_timeout``: a process
that stops between two statements of a transaction (SIGSTOP, a paused VM, a swap storm)
keeps its row locks, and the locks are what the others step around — the reaper skips a
locked queue row (its worker is finishing it), a new shard owner waits on the fence row.
Without a limit, a worker frozen inside a heartbeat kept its run from ever being
redelivered. PostgreSQL ends such a session after the limit (its transaction rolls back;
the process, once it runs again, gets ``StoreUnavailable`` and reconnects). The CLI's
connections get a minute (``clockd.wiring.OPERATOR_STALL_LIMIT``: a ``clockctl``
suspended inside its transaction), and the reconciler's read-only snapshot lifts it for its own
transaction (``snapshot_read``: it locks no row and decodes between its statements).
A DSN's own ``options`` are kept, but clockd's settings come after them and so win
(PostgreSQL takes the last ``-c`` of a name): a longer limit in the DSN would let a
stalled daemon keep the reaper from its runs for longer than its leases protect them.

Schema: ``open()`` only *checks* it (unlike SQLite it never migrates: several
processes share the database, and an upgrade is an operator's decision) and raises
``SchemaMismatch`` when it is behind (run ``clockd migrate``) or ahead (upgrade clockd).
``migrate()`` works on an open or a closed store, takes an advisory lock per
migration transaction, and applies each pending migration once.

Errors: psycopg's are translated once, in ``call``: connection failures →
``StoreUnavailable`` (the pool then checks its idle connections, so the next call gets
a live one after a server restart), deadlocks and lock timeouts → ``StoreLocked``,
missing tables → ``SchemaMismatch``; unique violations reach the engine as
``Integrity`` (by constraint name), which says what they mean (``Conflict``). The
DSN's password never appears in a message.

Concurrency (``FOR UPDATE SKIP LOCKED``), why the store never runs ANALYZE, and the
round trips of a write: docs/store.md, "The PostgreSQL driver".
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, LiteralString, TypeAlias, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from clockd.config import redact_dsn
from clockd.errors import SchemaMismatch, StoreLocked, StorePermissionDenied, StoreUnavailable
from clockd.store import LagStats
from clockd.store.driver import (
    Body,
    ClaimRequest,
    HistoryPartitions,
    Integrity,
    Mode,
    Pipeline,
    Run,
    Script,
    Step,
    Stream,
    drive_async,
)
from clockd.store.engine import SqlStore
from clockd.store.sql import apply_migration, check_schema, load_migrations, load_queries, log_applied, trusted_sql

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
# After a claim that had something to judge, this many claims go straight to claim_lease:
# where caps or overlap policies are in play claim_plain would only find so again, a
# wasted pick each time; one try in this many finds out whether the queue has become
# plain. Likewise to claim_shared after claim_plain found tenants sharing the queues.
JUDGED_STREAK: Final = 64
# Every connection of the store, set at connection start (no round trip).
SESSION_OPTIONS: Final = "-c plan_cache_mode=force_custom_plan -c jit=off -c TimeZone=UTC"

# The queries this driver's own steps run (the engine's are in clockd.store.engine).
DRIVER_QUERIES: Final = frozenset(
    {
        "claim_plain",
        "claim_shared",
        "claim_lease",
        "claim_unlease_unstarted",
        "relay_dispatch",
        "schedule_insert_many",
        "materialize_insert",
        "materialize_insert_enqueued",
        "overlap_release",
        "leases_end",
        "leases_lock",
        "reap_lock",
        "reap_pick",
        "history_extend",
        "history_census",
        "history_drop",
    }
)
_CONSTRAINTS: Final = {
    "schedules_live_name": "schedule_name",
    "schedules_pkey": "schedule_id",
    "schedules_idempotency": "idempotency",
    "occurrences_pkey": "occurrence_id",
}


class PostgresDriver:
    """One PostgreSQL database: its pool, its values. See the module docstring."""

    def __init__(
        self,
        dsn: str,
        min_size: int,
        max_size: int,
        connect_timeout: float,
        idle_in_transaction_timeout: timedelta | None = None,
    ) -> None:
        self.dsn = dsn
        self.min_size = min_size
        self.max_size = max_size
        self.connect_timeout = connect_timeout
        self.idle_in_transaction_timeout = idle_in_transaction_timeout
        self.display = redact_dsn(dsn)
        self._where, self._password = _describe(dsn)
        self._pool: Pool | None = None
        self.migrations = MIGRATIONS  # what migrate() applies (an upgrade test stops short)
        self.history: HistoryPartitions | None = _WeeklyPartitions()
        self.judged_streak = 0  # claims left that go straight to claim_lease (JUDGED_STREAK)
        self.shared_streak = 0  # claims left that go straight to claim_shared (as long)

    def _connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of every connection: the session settings are appended to
        whatever ``options`` the DSN already carries."""
        given = conninfo_to_dict(self.dsn)
        options = SESSION_OPTIONS
        if self.idle_in_transaction_timeout is not None:
            limit_ms = max(1, round(self.idle_in_transaction_timeout.total_seconds() * 1000))
            options += f" -c idle_in_transaction_session_timeout={limit_ms}"
        if given.get("options"):
            options = f"{given['options']} {options}"
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

    async def transaction(self, body: Body[T], mode: Mode) -> T:
        async def run(conn: Conn) -> T:
            if mode == "snapshot":
                await conn.execute(PG["snapshot_read"])
            return await drive_async(body, self._runner(conn), _integrity)

        return await self.call(run, write=mode != "read")

    def _runner(self, conn: Conn) -> Callable[[Step], Awaitable[Any]]:
        return functools.partial(self._step, conn)

    async def _step(self, conn: Conn, step: Step) -> Any:
        if isinstance(step, Script):
            await conn.execute(step.sql)  # several statements: no parameters
            return None
        if isinstance(step, Pipeline):  # independent writes: one round trip
            async with conn.pipeline():
                for run in step.runs:
                    await conn.execute(Q[run.name], run.params)
            return [None] * len(step.runs)
        if isinstance(step, Stream):
            count = 0
            async with conn.transaction(), conn.pipeline():
                for run in step.runs:
                    await conn.execute(Q[run.name], run.params)
                    count += 1
            return count
        cur = await conn.execute(Q[step.name], step.params)
        if step.fetch == "all":
            return await cur.fetchall()
        if step.fetch == "one":
            return await cur.fetchone()
        return cur.rowcount if step.fetch == "count" else None

    async def call(self, fn: Callable[[Conn], Awaitable[T]], *, write: bool) -> T:
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
        if isinstance(exc, pg_errors.IdleInTransactionSessionTimeout):
            return StoreUnavailable(
                f"PostgreSQL at {where} ended this session, which sat inside a transaction longer than "
                f"idle_in_transaction_session_timeout ({message}): nothing was committed; the next call reconnects"
            )
        if isinstance(exc, pg_errors.DiskFull):
            return StoreUnavailable(f"PostgreSQL at {where} is out of disk ({message}): nothing was written")
        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            return StoreUnavailable(f"PostgreSQL at {where} failed ({message}): the next call reconnects")
        # Integrity and programming errors are bugs, not outages: keep them visible.
        return exc

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        if self._pool is not None:
            return
        conn = await self._connect()
        try:
            await drive_async(check_schema(self.migrations, self.display, self._behind), self._runner(conn), _integrity)
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
        """roles.sql (the group roles, cluster-wide), then grants.sql (what they may do in
        this database, ``_grant``), each one transaction."""
        try:
            conn = await self._connect()
            try:
                await conn.execute(_script("roles.sql"))
                await self._grant(conn)
            finally:
                await conn.close()
        except psycopg.Error as exc:
            raise self._translate(exc) from exc

    def _behind(self, newest: int, known: int) -> str:
        return (
            f"database schema is at {newest:04d}, this clockd needs {known:04d}: "
            f"run `clockd migrate --store {self.display}`"
        )

    async def _migrate(self, conn: Conn) -> list[str]:
        """Apply pending migrations, each in its own transaction with its record, under the
        migration lock (``clockd.store.sql.apply_migration``)."""
        done: list[str] = []
        for m in self.migrations:
            async with conn.transaction():
                body = apply_migration(
                    m, self.migrations, self.display, datetime.now(UTC), Script(PG["migration_lock"])
                )
                if await drive_async(body, self._runner(conn), _integrity):
                    done.append(m.label)
        log_applied(done, self.display)
        # The roles are cluster-wide and outlive any schema: a migration's new table or
        # view is theirs to use as soon as it exists (grants.sql says why), and a database
        # migrated before this ran gets what it missed.
        await self._grant(conn)
        return done

    async def _grant(self, conn: Conn) -> None:
        """grants.sql when roles.sql's three roles exist (nothing to grant to otherwise),
        under the migration lock: two GRANTs on one object at once fail ("tuple
        concurrently updated"), and `clockd migrate` may run concurrently."""
        async with conn.transaction():
            await conn.execute(PG["migration_lock"])
            row = await (await conn.execute(PG["group_roles_exist"])).fetchone()
            if row is not None and row[0]:
                await conn.execute(_script("grants.sql"))

    async def server_time(self) -> datetime:
        """The server's clock now (``clock_timestamp()``, not the transaction's start)."""

        async def run(conn: Conn) -> datetime:
            row = await (await conn.execute(PG["server_time"])).fetchone()
            assert row is not None
            return _utc(row[0])

        return await self.call(run, write=False)

    # -- values --------------------------------------------------------------------------------

    @staticmethod
    def instant(value: datetime) -> datetime:
        return _utc(value)

    @staticmethod
    def opt_instant(value: datetime | None) -> datetime | None:
        return None if value is None else _utc(value)

    read = instant
    opt_read = opt_instant

    @staticmethod
    def duration(value: timedelta) -> timedelta:
        return value

    @staticmethod
    def seconds(value: Any) -> float:
        return float(value)

    @staticmethod
    def array(values: Sequence[Any]) -> list[Any]:
        return list(values)

    @staticmethod
    def table(name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
        """One array per column (each becomes one parameter for unnest). zip transposes at
        C speed (the materializer turns ~10 values per occurrence)."""
        transposed = [list(column) for column in zip(*rows, strict=True)] or [[] for _ in columns]
        if len(transposed) != len(columns):
            raise ValueError(f"rows of {len(transposed)} values where {len(columns)} were expected")
        return dict(zip(columns, transposed, strict=True))

    @staticmethod
    def document(value: Any) -> dict[str, Any]:
        document: dict[str, Any] = value  # psycopg has decoded the jsonb column already
        return document

    @staticmethod
    def text(value: str) -> str:
        """PostgreSQL text cannot hold NUL; a job's output may. Stored as U+FFFD, the
        character the runner already uses for bytes that are not UTF-8."""
        return value.replace("\x00", "\ufffd") if "\x00" in value else value

    @staticmethod
    def lag_stats(row: Sequence[Any]) -> LagStats:
        count, ranks = row
        if not count or ranks is None:
            return LagStats(0, None, None, None)
        p50, p95, p99 = (float(v) for v in ranks)
        return LagStats(int(count), p50, p95, p99)

    # -- steps of one statement chain ----------------------------------------------------------

    def claim(self, r: ClaimRequest) -> Body[list[Sequence[Any]]]:
        params = {
            "queues": r.queues,
            "worker_id": r.worker_id,
            "limit": r.limit,
            "now": r.now,
            "lease_until": r.lease_until,
            "minute": r.minute,
            "tokens": r.tokens,
            "claimable": r.claimable,
            **r.rules,
        }
        if self.judged_streak > 0:
            self.judged_streak -= 1
            judged: list[Sequence[Any]] = yield Run("claim_lease", params)
            return judged
        # claim_plain first: most claims have nothing to judge (see the statement); or
        # claim_shared while tenants share the queues. The answer rows are in start order;
        # at most one more, last, has no occurrence id and says what was left undone
        # ('shared' and 'judge' lease nothing, so never come with 'unstarted').
        first = "claim_plain"
        if self.shared_streak > 0:
            self.shared_streak -= 1
            first = "claim_shared"
        rows: list[Sequence[Any]] = yield Run(first, params)
        if rows and rows[-1][0] is None and rows[-1][1] == "shared":  # the round-robin's
            self.shared_streak = JUDGED_STREAK
            rows = yield Run("claim_shared", params)
        if not rows or rows[-1][0] is not None:
            return rows
        if rows[-1][1] == "judge":  # the whole claim is claim_lease's
            self.shared_streak = 0
            self.judged_streak = JUDGED_STREAK
            judged = yield Run("claim_lease", params)
            return judged
        started = rows[:-1]  # the last row says 'unstarted': give back the rows not started
        tokens = {"tokens": r.tokens, "started": [row[1] for row in started]}
        yield Run("claim_unlease_unstarted", tokens, "none")
        return started

    def relay(self, params: dict[str, Any]) -> Body[tuple[int, list[Any]]]:
        moved, late = yield Run("relay_dispatch", params, "one")
        return int(moved), late

    def schedules_insert(self, params: dict[str, Any]) -> tuple[Run, ...]:
        # One statement (data-modifying CTEs) for the four tables.
        return (Run("schedule_insert_many", params, "none"),)

    def materialize_insert(self, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
        rows: list[Sequence[Any]] = yield Run("materialize_insert", params)
        return rows

    def materialize_insert_enqueued(self, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
        rows: list[Sequence[Any]] = yield Run("materialize_insert_enqueued", params)
        return rows

    def slot_release(self, params: dict[str, Any]) -> tuple[Run, ...]:
        return (Run("overlap_release", params, "none"),)

    def lock_leases(self, params: dict[str, Any]) -> Body[None]:
        yield Run("leases_lock", params, "none")

    def end_leases(self, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
        rows: list[Sequence[Any]] = yield Run("leases_end", params)
        return rows

    def reap_pick(self, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
        # Lock first, read after (see reap_lock): two statements, so that the read sees
        # every finish committed before the locks were taken.
        locked: list[Sequence[Any]] = yield Run("reap_lock", params)
        if not locked:
            return []
        batches = {"batches": [row[0] for row in locked], "running": params["running"]}
        rows: list[Sequence[Any]] = yield Run("reap_pick", batches)
        return rows


class _WeeklyPartitions:
    """History in weekly partitions (schema 0017): each step one call of the migration's
    SECURITY DEFINER functions."""

    def extend(self, params: dict[str, Any]) -> Body[int]:
        made = yield Run("history_extend", params, "one")
        return int(made[0]) if made else 0

    def census(self, params: dict[str, Any]) -> Body[list[tuple[datetime, int, int]]]:
        rows: list[Sequence[Any]] = yield Run("history_census", params)
        return [(week, int(count), int(live)) for week, count, live in rows]

    def drop(self, params: dict[str, Any]) -> Body[bool]:
        dropped = yield Run("history_drop", params, "one")
        return bool(dropped and dropped[0])


class PostgresStore(SqlStore):
    """The ``Store`` port on a PostgreSQL database: the engine over ``PostgresDriver``."""

    driver: PostgresDriver

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        idle_in_transaction_timeout: timedelta | None = None,
    ) -> None:
        """``idle_in_transaction_timeout``: how long PostgreSQL lets a connection of this
        store sit inside a transaction between statements (a daemon's; see the module
        docstring); None: no limit (the server's own setting)."""
        super().__init__(PostgresDriver(dsn, min_size, max_size, connect_timeout, idle_in_transaction_timeout))
        self.dsn = dsn
        self.display = self.driver.display

    def __repr__(self) -> str:
        return f"PostgresStore({self.display!r})"

    async def create_roles(self) -> None:
        """Create (or refresh the grants of) the clockd_daemon, clockd_operator and
        clockd_readonly group roles from ``roles.sql``. Run as the database owner."""
        await self.driver.create_roles()


def _script(name: str) -> LiteralString:
    """A file of this package run whole (roles.sql, grants.sql): ours, never input."""
    return trusted_sql((Path(__file__).parent / name).read_text())


def _integrity(exc: Exception) -> Integrity | None:
    """A constraint error as the engine's ``Integrity``, by constraint name."""
    if isinstance(exc, pg_errors.ForeignKeyViolation):
        return Integrity("foreign_key", exc)
    if isinstance(exc, psycopg.IntegrityError):
        return Integrity(_CONSTRAINTS.get(_partitioned(exc.diag.constraint_name or ""), "other"), exc)
    return None


_PARTITION_KEY: Final = re.compile(r"^occurrences_(?:default|w[0-9]{8})_pkey$")


def _partitioned(constraint: str) -> str:
    """A partition's key (schema 0017: an insert names the partition's index, such as
    occurrences_w20261130_pkey) as the partitioned table's."""
    return "occurrences_pkey" if _PARTITION_KEY.match(constraint) else constraint


def _utc(instant: datetime) -> datetime:
    """``instant`` in UTC. Naive datetimes are refused, never guessed (as codec.to_us)."""
    if instant.tzinfo is UTC:  # nearly always: checked first, it is on every hot path
        return instant
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"naive datetime {instant.isoformat()} given to the store: pass aware UTC")
    return instant.astimezone(UTC)


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


__all__ = ["KNOWN_VERSION", "MIGRATIONS", "PG", "PostgresDriver", "PostgresStore", "Q"]
