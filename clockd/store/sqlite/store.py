"""``SqliteStore``: the embedded store (stdlib ``sqlite3``, one file, zero setup).

This module is the SQLite *driver* of the SQL store engine (``clockd.store.engine``
implements the ``Store`` port; ``SqliteStore`` is the two composed; the package
docstring states the invariants: one thread, WAL, ``busy_timeout``, migrations at
open). It owns the file, the one connection and its thread, the value encoding
(instants as integer µs, sets as one JSON array read with ``json_each``), the error
translation, and the steps SQLite writes as several statements (the claim, the relay,
the materializer's insert, the overlap-slot release) where PostgreSQL needs one.
Every transaction body runs whole on the store's thread, ``BEGIN IMMEDIATE`` for writes
(the write lock up front: no failure half-way on a lock upgrade). Requires SQLite ≥ 3.35
(``RETURNING``, ``UPDATE … FROM``) with JSON.

**Group commit.** Write bodies that wait while the thread is busy go to it together, as
one SQLite transaction: one hop to the thread and back, one ``BEGIN IMMEDIATE`` and one
``COMMIT`` for the batch (``_WriteQueue``). Each body runs in its own ``SAVEPOINT``: a
body that raises is rolled back alone and its error goes to its caller only; its
neighbours commit. A caller's answer is given only after the batch's ``COMMIT``, so an
acknowledged write survives a process crash (WAL) and an unacknowledged one is whole
or absent. An error that ends the whole transaction (disk full, I/O, a failed
``COMMIT``: SQLite rolled everything back) goes to every caller of the batch, each of
whose writes then did not happen. One hop per write had cost a GIL hand-off each
(~5 ms, the interpreter's switch interval, under load): 32 concurrent creates over the
API ran at ~100/s.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, LiteralString, TypeVar

from clockd.core.model import OverlapPolicy
from clockd.errors import StoreLocked, StoreUnavailable
from clockd.store.codec import dumps, duration_to_us, from_us, neighbour_lag_stats, opt_from_us, opt_to_us, to_us
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
    drive_sync,
)
from clockd.store.engine import SqlStore
from clockd.store.sql import apply_migration, check_schema, load_migrations, load_queries, log_applied, trusted_sql
from clockd.store.sqlite import files

log = logging.getLogger(__name__)

T = TypeVar("T")

Q = load_queries(__package__ or "clockd.store.sqlite")
MIGRATIONS: Final = load_migrations(__package__ or "clockd.store.sqlite")
KNOWN_VERSION: Final = MIGRATIONS[-1].version if MIGRATIONS else 0

MIN_SQLITE: Final = (3, 35, 0)
DEFAULT_BUSY_TIMEOUT: Final = 5.0
# At most this many write bodies share one transaction (one batch holds the write lock
# that clockctl waits for, and its callers' answers wait for its last body).
MAX_BATCH: Final = 128

# What SQLite's message names for each kind of constraint error the engine tells apart.
_CONSTRAINTS: Final = (
    ("idempotency", "idempotency"), ("schedules.name", "schedule_name"), ("schedules.id", "schedule_id"),
    ("occurrences.id", "occurrence_id"), ("FOREIGN KEY", "foreign_key"),
)  # fmt: skip

# The queries this driver's own steps run (the engine's are in clockd.store.engine).
DRIVER_QUERIES: Final = frozenset(
    {
        "claim_tenants", "claim_pick_fair", "claim_pick", "overlap_slots_ensure",
        "claim_judge", "claim_losers", "dispatch_delete", "overlap_slots_take", "claim_lease", "claim_start",
        "tenant_claims_count", "relay_take", "relay_enqueue", "relay_dispatch",
        "materialize_insert", "outbox_insert", "materialize_insert_enqueued", "dispatch_insert_enqueued",
        "overlap_unpark", "overlap_release", "schedule_insert_many", "schedule_version_insert_many",
        "schedule_labels_insert_many", "reap_pick",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Write:
    """A write body waiting for the thread, and where its caller waits for the outcome."""

    body: Body[Any]
    future: asyncio.Future[Any]


@dataclass(frozen=True, slots=True)
class _Failed:
    """A body's own error, rolled back to its savepoint (its neighbours commit)."""

    error: BaseException


@dataclass(slots=True)
class BatchStats:
    """How the writes were grouped (tests and figures): ``writes`` bodies in ``batches``
    transactions; ``largest`` bodies in one."""

    writes: int = 0
    batches: int = 0
    largest: int = 0


class SqliteDriver:
    """One SQLite file: its connection, its thread, its values. See the module docstring.

    Invariants: every write body's caller is answered after its batch's ``COMMIT`` (or
    its rollback); at most one batch is on its way to the thread at a time, so the
    bodies of the next one gather while it runs."""

    def __init__(self, path: Path, readonly: bool, busy_timeout: float, create: bool, owner_only: bool) -> None:
        self.path = path
        # No partitions: an embedded store's history goes by the row delete alone
        # (PostgreSQL's migration 0017 says why that is enough here).
        self.history: HistoryPartitions | None = None
        self.readonly = readonly
        # clockd.store.sqlite.files: may a missing store be created; the daemon's owner rule.
        self.create = create and not readonly
        self.owner_only = owner_only
        self.busy_timeout = busy_timeout
        # The file system holding the store is mounted read-only (found at open): the
        # file is then opened read-only, so reads work and writes say why they cannot.
        self.fs_read_only = False
        self.display = str(path)
        self.migrations = MIGRATIONS  # what open() applies (an upgrade test stops short)
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._waiting: list[_Write] = []  # write bodies for the next batch, in arrival order
        self._flusher: asyncio.Task[None] | None = None
        self.batch_stats = BatchStats()

    # -- transactions ------------------------------------------------------------------------

    async def transaction(self, body: Body[T], mode: Mode) -> T:
        if mode != "write":
            return await self.call(functools.partial(self._drive, body), write=False)
        if self._executor is None:
            body.close()
            raise StoreUnavailable(f"store {self.path} is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._waiting.append(_Write(body, future))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush(), name="clockd-sqlite-group-commit")
        return await future

    async def _flush(self) -> None:
        """Hand the waiting write bodies to the thread, a batch at a time, until none wait;
        answer each caller from its batch's outcome."""
        try:
            while self._waiting:
                taken, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
                batch = []
                for w in taken:
                    if w.future.cancelled():  # its caller stopped waiting before it ran
                        w.body.close()
                    else:
                        batch.append(w)
                if not batch:
                    continue
                try:
                    outcomes = await self._on_thread(
                        functools.partial(self._translated, functools.partial(self._batch, [w.body for w in batch]))
                    )
                except Exception as exc:  # the whole transaction: no caller's write happened
                    for w in batch:
                        w.body.close()
                        if not w.future.done():
                            w.future.set_exception(exc)
                    continue
                except BaseException:  # the flusher itself is cancelled (the loop is closing)
                    for w in batch:
                        w.future.cancel()
                    raise
                for w, outcome in zip(batch, outcomes, strict=True):
                    if w.future.done():
                        continue
                    if isinstance(outcome, _Failed):
                        w.future.set_exception(outcome.error)
                    else:
                        w.future.set_result(outcome)
        finally:
            self._flusher = None
            for w in self._waiting:  # only when cancelled (the loop is closing): none may hang
                w.future.cancel()
            self._waiting.clear()

    def _batch(self, bodies: list[Body[Any]], conn: sqlite3.Connection) -> list[Any]:
        """Run ``bodies`` as one write transaction, each in its own savepoint; their results
        (a ``_Failed`` for each body that raised and was rolled back alone). On the thread.
        Raises when the transaction as a whole fails (nothing of it is written)."""
        stats = self.batch_stats
        stats.writes += len(bodies)
        stats.batches += 1
        stats.largest = max(stats.largest, len(bodies))
        if len(bodies) == 1:  # alone: no savepoint; its error is the transaction's, raised
            return [self._atomic(functools.partial(self._drive, bodies[0]), True, conn)]
        outcomes: list[Any] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for i, body in enumerate(bodies):
                conn.execute("SAVEPOINT clockd_write")
                try:
                    value = self._drive(body, conn)
                except Exception as exc:
                    if not conn.in_transaction:  # SQLite ended the whole transaction (disk full, I/O)
                        for rest in bodies[i + 1 :]:
                            rest.close()
                        raise
                    conn.execute("ROLLBACK TO clockd_write")
                    conn.execute("RELEASE clockd_write")
                    outcomes.append(_Failed(self._own_error(exc)))
                else:
                    conn.execute("RELEASE clockd_write")
                    outcomes.append(value)
            conn.execute("COMMIT")
        except BaseException:
            self._rollback(conn)
            raise
        return outcomes

    def _drive(self, body: Body[T], _conn: sqlite3.Connection) -> T:
        return drive_sync(body, self._step, _integrity)

    async def call(self, fn: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        """Run ``fn`` as one transaction on the store's thread."""
        return await self._on_thread(functools.partial(self._translated, functools.partial(self._atomic, fn, write)))

    async def _on_thread(self, fn: Callable[[], T]) -> T:
        executor = self._executor
        if executor is None:
            raise StoreUnavailable(f"store {self.path} is not open")
        return await asyncio.get_running_loop().run_in_executor(executor, fn)

    def _translated(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` on the open connection, its driver errors as ``ClockdError``s."""
        conn = self._conn
        if conn is None:
            raise StoreUnavailable(f"store {self.path} is closed")
        try:
            return fn(conn)
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def _atomic(self, fn: Callable[[sqlite3.Connection], T], write: bool, conn: sqlite3.Connection) -> T:
        """``fn`` between ``BEGIN [IMMEDIATE]`` and ``COMMIT``; rolled back if it raises."""
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            self._rollback(conn)
            raise
        return result

    def _own_error(self, exc: Exception) -> Exception:
        """A body's error as its caller sees it (``_translated``'s translation)."""
        if not isinstance(exc, sqlite3.Error):
            return exc
        translated = self._translate(exc)
        if translated is not exc:
            translated.__cause__ = exc
        return translated

    def _step(self, step: Step) -> Any:
        if isinstance(step, Pipeline):
            return [self._step(run) for run in step.runs]
        conn = self._conn
        assert conn is not None
        if isinstance(step, Stream):  # all or nothing (the driver module's docstring)
            conn.execute("SAVEPOINT clockd_stream")
            count = 0
            try:
                for run in step.runs:
                    self._step(run)
                    count += 1
            except BaseException:
                if conn.in_transaction:  # else SQLite ended the whole transaction (disk full, I/O)
                    conn.execute("ROLLBACK TO clockd_stream")
                    conn.execute("RELEASE clockd_stream")
                raise
            conn.execute("RELEASE clockd_stream")
            return count
        if isinstance(step, Script):
            for statement in _statements(step.sql):
                conn.execute(statement)
            return None
        cur = conn.execute(Q[step.name], step.params)
        if step.fetch == "all":
            return cur.fetchall()
        if step.fetch == "one":
            return cur.fetchone()
        return cur.rowcount if step.fetch == "count" else None

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
        primary = code & 0xFF if isinstance(code, int) else None  # extended codes: primary in the low byte
        where = str(self.path)
        if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return StoreLocked(
                f"database {where} is locked: another process held the write lock for more "
                f"than {self.busy_timeout:g} s ({exc}); retry, or stop the other writer"
            )
        if primary in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN) and (
            self.fs_read_only or _on_read_only_fs(self.path, probe=True)
        ):
            return StoreUnavailable(self._read_only_message(exc))
        if primary == sqlite3.SQLITE_FULL:
            return StoreUnavailable(f"disk full writing {where} ({exc}): nothing was written; free space and retry")
        if primary == sqlite3.SQLITE_IOERR:
            return StoreUnavailable(f"disk I/O error on {where} ({exc}): nothing was written; check the disk and retry")
        if primary in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
            return StoreUnavailable(
                f"{where} is not a clockd SQLite database or is damaged ({exc}): point the "
                "store at another path, or restore the file from a backup"
            )
        if primary == sqlite3.SQLITE_READONLY:
            return StoreUnavailable(
                f"{where} is read-only ({exc}): "
                + ("this store was opened read-only" if self.readonly else "check the permissions of the file")
            )
        if primary in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM):
            return StoreUnavailable(
                f"cannot open {where} ({exc}): check that the path is a file and that this user may "
                "read and write it and its directory"
            )
        if isinstance(exc, sqlite3.OperationalError):
            return StoreUnavailable(f"SQLite error on {where}: {exc}")
        return exc  # a constraint or a programming error is a bug, not an outage: keep it

    def _read_only_message(self, exc: object | None = None) -> str:
        cause = f" ({exc})" if exc is not None else ""
        return (
            f"the file system holding {self.path} is read-only (Read-only file system){cause}: "
            "nothing was written; remount it read-write (or move the store) and retry"
        )

    # -- the file ----------------------------------------------------------------------------------

    async def open(self) -> None:
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
        """Open the file (creating it and its directory), set the pragmas, apply pending
        migrations (read-only: only check them). On the store's thread."""
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise StoreUnavailable(
                f"SQLite {sqlite3.sqlite_version} is too old for the embedded store "
                f"(needs {'.'.join(map(str, MIN_SQLITE))}+): use a newer Python or "
                "the PostgreSQL store"
            )
        try:
            memory = str(self.path) == ":memory:"
            self.fs_read_only = not memory and _on_read_only_fs(self.path)
            if self.fs_read_only and not self.readonly:
                # No write can land: the daemon (it needs its lock and writes) stops with
                # the cause; clockctl reads an existing store, and its writes say why not.
                if self.owner_only or (self.create and not os.path.lexists(self.path)):
                    raise StoreUnavailable(self._read_only_message())
                files.prepare(self.path, create=False, owner_only=False)
            elif not self.readonly:
                files.prepare(self.path, create=self.create, owner_only=self.owner_only)
            target = str(self.path)
            if self._opened_read_only:
                target = f"{self.path.resolve().as_uri()}?mode=ro"
                if self.fs_read_only and not Path(f"{self.path}-shm").exists():
                    # A WAL database on a read-only file system with no -shm (no clockd has it
                    # open) opens only as immutable: nobody can change it while it is mounted so.
                    target += "&immutable=1"
            conn = sqlite3.connect(
                target, uri=target != str(self.path), timeout=self.busy_timeout, isolation_level=None
            )
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

    @property
    def _opened_read_only(self) -> bool:
        return self.readonly or self.fs_read_only

    def _setup(self, conn: sqlite3.Connection, memory: bool) -> None:
        if not self._opened_read_only and not memory:
            conn.execute("PRAGMA journal_mode = WAL").fetchall()
        # FULL: a commit is on the disk before it is acknowledged, so a power loss or a disk
        # that fails (ext4 errors=remount-ro) keeps every acknowledged create and every
        # recorded run; NORMAL lost the last seconds' commits in the read-only drill. Group
        # commit makes it one WAL fsync per batch of waiting writes.
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA temp_store = MEMORY")
        if self.owner_only and not memory:
            files.quick_check(conn, self.path)
        if self._opened_read_only:
            drive_sync(check_schema(self.migrations, self.display, self._behind), self._step, _integrity)
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
                if not self._opened_read_only:
                    conn.execute("PRAGMA optimize")
            except sqlite3.Error:
                pass  # best effort on the way out
            conn.close()

    def _behind(self, newest: int, known: int) -> str:
        return (
            f"database schema {newest:04d} of {self.path} is older than this clockd "
            f"(knows {known:04d}): open it read-write once to migrate it"
        )

    async def migrate(self) -> list[str]:
        return await self._on_thread(functools.partial(self._translated, self._migrate))

    def _migrate(self, conn: sqlite3.Connection) -> list[str]:
        """Apply pending migrations, each in its own ``BEGIN IMMEDIATE`` transaction with its
        record (``clockd.store.sql.apply_migration``)."""
        stamp, done = to_us(datetime.now(UTC)), []
        for m in self.migrations:
            body = apply_migration(m, self.migrations, self.display, stamp)
            if self._atomic(functools.partial(self._drive, body), True, conn):
                done.append(m.label)
        log_applied(done, self.display)
        return done

    async def server_time(self) -> datetime:
        """SQLite has no server: the local clock (the offset check is then zero)."""
        return datetime.now(UTC)

    # -- values --------------------------------------------------------------------------------

    instant = staticmethod(to_us)
    opt_instant = staticmethod(opt_to_us)
    read = staticmethod(from_us)
    opt_read = staticmethod(opt_from_us)
    array = staticmethod(dumps)

    duration = staticmethod(duration_to_us)

    @staticmethod
    def seconds(value: Any) -> float:
        return int(value) / 1e6

    @staticmethod
    def table(name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
        return {name: dumps([list(row) for row in rows])}

    @staticmethod
    def document(value: Any) -> dict[str, Any]:
        decoded: dict[str, Any] = json.loads(value)
        return decoded

    @staticmethod
    def text(value: str) -> str:
        return value

    lag_stats = staticmethod(neighbour_lag_stats)  # SQLite has no percentile_cont

    # -- steps of several statements -----------------------------------------------------------

    def claim(self, r: ClaimRequest) -> Body[list[Sequence[Any]]]:
        """Pick (per queue: a share of each tenant's oldest rows and the queue's oldest),
        judge (caps, fairness, overlap: claim_judge), then write the decisions, one
        statement each. SQLite has one writer: no row is taken by anyone in between."""
        found: set[int] = set()
        for queue in r.queues:
            tenants = [row[0] for row in (yield Run("claim_tenants", {"queue": queue}))]
            if not tenants:
                continue
            pick = {"queue": queue, "now": r.now, "limit": r.limit, "claimable": r.claimable}
            if len(tenants) > 1:
                fair = yield Run(
                    "claim_pick_fair", {**pick, "tenants": dumps(tenants), "share": -(-r.limit // len(tenants))}
                )
                found.update(row[1] for row in fair)
            found.update(row[1] for row in (yield Run("claim_pick", pick)))
        if not found:
            return []
        picked_ids = dumps(sorted(found))
        yield Run("overlap_slots_ensure", {"ids": picked_ids}, "none")
        judge = {"picked": picked_ids, "minute": r.minute, "limit": r.limit, "claimable": r.claimable, **r.rules}
        judged = yield Run("claim_judge", judge)
        starts = [row for row in judged if row[0] == "start"]
        losers = [row for row in judged if row[0] != "start"]
        if losers:  # skipped ones end SKIPPED_OVERLAP; the parked one stays ENQUEUED as the waiter
            rows = dumps([[row[2], row[0], row[6]] for row in losers])
            yield Run("claim_losers", {"rows": rows, "now": r.now, "claimable": r.claimable, **r.rules}, "none")
            yield Run("dispatch_delete", {"ids": dumps([row[1] for row in losers])}, "none")
            parked = [[row[4], None, row[2]] for row in losers if row[0] == "park"]
            if parked:
                yield Run("overlap_slots_take", {"rows": dumps(parked)}, "none")
        if not starts:
            return []
        tokens = {row[2]: token for row, token in zip(starts, r.tokens, strict=False)}
        leases = dumps([[row[1], tokens[row[2]]] for row in starts])
        lease = {"leases": leases, "lease_until": r.lease_until, "worker_id": r.worker_id, "now": r.now}
        yield Run("claim_lease", lease, "none")
        start = {"ids": dumps(list(tokens)), "now": r.now, "claimable": r.claimable, **r.rules}
        started = {row[0]: row for row in (yield Run("claim_start", start))}
        per_tenant: dict[str, int] = {}
        for row in starts:
            per_tenant[row[3]] = per_tenant.get(row[3], 0) + 1
        counts = dumps([[t, n] for t, n in per_tenant.items()])
        yield Run("tenant_claims_count", {"counts": counts, "minute": r.minute}, "none")
        taken = [[row[4], row[2], None] for row in starts if row[5] != OverlapPolicy.ALLOW]
        if taken:
            yield Run("overlap_slots_take", {"rows": dumps(taken)}, "none")
        return [(occ, tokens[occ], *started[occ][1:]) for occ in tokens if occ in started]

    def relay(self, params: dict[str, Any]) -> Body[tuple[int, list[Any]]]:
        taken = [row[0] for row in (yield Run("relay_take", params))]
        if not taken:
            return 0, []
        enqueued = yield Run("relay_enqueue", {**params, "ids": dumps(taken)})
        if not enqueued:
            return 0, []
        # One lag per row relay_dispatch queued (ON CONFLICT skips one already there).
        queued = yield Run("relay_dispatch", {"ids": dumps([row[0] for row in enqueued]), "now": params["now"]})
        return len(queued), [lag for (lag,) in queued]

    def schedules_insert(self, params: dict[str, Any]) -> tuple[Run, ...]:
        # SQLite cannot chain INSERTs in one statement: three, all reading the same JSON
        # rows. Only the first can fail on a taken name or id.
        return tuple(
            Run(name, params, "none")
            for name in ("schedule_insert_many", "schedule_version_insert_many", "schedule_labels_insert_many")
        )

    def materialize_insert(self, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
        return (yield from _insert_then_queue("materialize_insert", "outbox_insert", "scheduled", params))

    def materialize_insert_enqueued(self, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
        return (
            yield from _insert_then_queue("materialize_insert_enqueued", "dispatch_insert_enqueued", "enqueued", params)
        )

    def slot_release(self, params: dict[str, Any]) -> tuple[Run, ...]:
        return (Run("overlap_unpark", params, "none"), Run("overlap_release", params, "none"))

    def lock_leases(self, params: dict[str, Any]) -> Body[None]:
        return  # one writer: no row locks
        yield  # a generator that yields nothing

    def reap_pick(self, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
        rows: list[Sequence[Any]] = yield Run("reap_pick", params)
        return rows

    def end_leases(self, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
        # No row locks to save here (one writer): read, then delete what ends. Not one
        # DELETE … RETURNING as in PostgreSQL: SQLite evaluates a RETURNING subquery
        # into occurrences as a full scan per row (EXPLAIN QUERY PLAN: SCAN o; a
        # finish 4 × slower in bench.store_ab).
        rows: list[Sequence[Any]] = yield Run("leases_held", {"tokens": params["tokens"]})
        ending = [row for row in rows if row[5] == params["running"]]
        if ending:
            yield Run("dispatch_delete", {"ids": dumps([row[0] for row in ending])}, "none")
        return ending


def _insert_then_queue(insert: str, queue: str, state: str, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
    """The materializer's insert in two statements (SQLite cannot chain an INSERT on
    another's RETURNING, as PostgreSQL's one statement does): the occurrences, then the
    outbox or dispatch rows (``queue``) of those inserted in ``params[state]``; the
    (id, state) of each occurrence inserted."""
    inserted: list[Sequence[Any]] = yield Run(insert, params)
    queued = [oid for oid, written in inserted if written == params[state]]
    if queued:
        yield Run(queue, {"ids": dumps(queued), state: params[state]}, "none")
    return inserted


class SqliteStore(SqlStore):
    """The ``Store`` port on one SQLite file: the engine over ``SqliteDriver``."""

    driver: SqliteDriver

    def __init__(
        self,
        path: str | Path,
        *,
        readonly: bool = False,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
        owner_only: bool = False,
    ) -> None:
        """``create``: a missing store may be made (``clockd run``, writing verbs);
        ``owner_only``: the daemon's rule — refuse files it does not own or others can
        write, and check the database's integrity at open (``clockd.store.sqlite.files``)."""
        super().__init__(SqliteDriver(Path(path), readonly, busy_timeout, create, owner_only))
        self.path, self.readonly, self.busy_timeout = self.driver.path, readonly, busy_timeout

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r}, readonly={self.readonly})"


def _integrity(exc: Exception) -> Integrity | None:
    """A constraint error as the engine's ``Integrity`` (its ``kind`` from the message:
    SQLite names the columns of the unique index, or says FOREIGN KEY)."""
    if not isinstance(exc, sqlite3.IntegrityError):
        return None
    return Integrity(next((kind for needle, kind in _CONSTRAINTS if needle in str(exc)), "other"), exc)


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


def _on_read_only_fs(path: Path, *, probe: bool = False) -> bool:
    """Is the file system holding ``path`` (its nearest existing directory) read-only, so
    that every write fails with EROFS? ``probe``: also try to create a file there — a file
    system that turned read-only after an error (ext4 ``errors=remount-ro``) still says
    ``rw`` to ``statvfs``; only for a write that already failed (it costs a create)."""
    if str(path) == ":memory:":
        return False
    for candidate in path.parents:
        try:
            if os.statvfs(candidate).f_flag & os.ST_RDONLY:
                return True
        except FileNotFoundError:
            continue
        except OSError:
            return False
        if not probe or candidate != path.parent:  # never a stray file outside the store's directory
            return False
        probe_path = candidate / f".clockd-write-probe-{os.getpid()}"
        try:
            os.close(os.open(probe_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        except OSError as exc:
            return exc.errno == errno.EROFS
        with contextlib.suppress(OSError):
            os.unlink(probe_path)
        return False
    return False


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


__all__ = ["KNOWN_VERSION", "MIGRATIONS", "SqliteDriver", "SqliteStore"]
