"""The narrow protocol between the SQL store engine and a dialect driver.

The engine (``clockd.store.engine``) implements the ``Store`` port once. It writes every
transaction as a *body*: a generator that yields **steps** and receives their results,
and never touches a connection. A driver runs a body — on its dedicated thread
(SQLite, synchronous) or on the event loop (PostgreSQL, asynchronous) — so one body
serves both without a thread hop or an ``await`` per statement.

Steps:

* ``Run(name, params, fetch)``: one named block of the dialect's ``queries.sql``;
  ``fetch`` says what comes back (``all`` rows, ``one`` row or None, the row ``count``,
  or ``none``).
* ``Pipeline(runs)``: statements whose results the next does not need; PostgreSQL sends
  them in one round trip (``conn.pipeline()``), SQLite runs them one after the other.
  Returns the list of their results.
* ``Stream(runs)``: writes whose results no one reads, each built only when the driver
  asks for it — PostgreSQL sends each one as it is built, in a pipeline, so that building
  the next one overlaps the database running the one before (``apply_schedules``' create
  batches); SQLite runs them one after the other. All or nothing: a failure of any of
  them undoes every one (a savepoint) and is thrown into the body; an error raised while
  building one (the caller's own) propagates the same way, with nothing of it written.
  Returns the number run.
* ``Script(sql)``: several statements of the package's own SQL (migrations).

A unique or foreign-key violation is thrown *into* the body as ``Integrity`` with a
dialect-free ``kind`` (``schedule_name``, ``schedule_id``, ``idempotency``,
``occurrence_id``, ``foreign_key``, ``other``), so the engine writes each ``Conflict``
message once; left uncaught, the driver re-raises the driver's own error (a bug).

Values: the engine encodes every parameter through the driver (``instant``,
``duration``, ``array``, ``table``, ``text``) and decodes every column it reads
(``read``, ``document``, ``seconds``), so instants are ``timestamptz`` in PostgreSQL and
integer microseconds in SQLite without the engine knowing which.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, LiteralString, Protocol, TypeAlias, TypeVar

from clockd.store import LagStats

T = TypeVar("T")
Fetch: TypeAlias = Literal["all", "one", "count", "none"]
Mode: TypeAlias = Literal["read", "write", "snapshot"]


@dataclass(frozen=True, slots=True)
class Run:
    """Run the named block ``name`` with ``params``; see the module docstring."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    fetch: Fetch = "all"


@dataclass(frozen=True, slots=True)
class Pipeline:
    runs: tuple[Run, ...]


@dataclass(frozen=True, slots=True)
class Stream:
    """Writes sent as they are built, all or nothing; see the module docstring."""

    runs: Iterable[Run]


@dataclass(frozen=True, slots=True)
class Script:
    """Run a script of the package's own SQL, several statements with no parameters (a
    migration; PostgreSQL's migration lock)."""

    sql: LiteralString


Step: TypeAlias = Run | Pipeline | Stream | Script
# A transaction's body: yields steps, receives their results, returns the method's result.
Body: TypeAlias = Generator[Step, Any, T]


class Integrity(Exception):
    """A constraint the statement broke, as a dialect-free ``kind`` (module docstring)."""

    def __init__(self, kind: str, original: BaseException) -> None:
        super().__init__(kind)
        self.kind = kind
        self.original = original


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """What the claim step needs; its rules (states, reason templates) come from core."""

    queues: list[str]
    worker_id: str
    limit: int
    now: Any  # encoded instants
    lease_until: Any
    minute: Any
    tokens: list[str]  # fresh lease tokens, one per possible start, in start order
    claimable: Any  # encoded array of the states a claim starts from
    rules: dict[str, Any]  # policy parameters (default overlap, reason templates, states)


class HistoryPartitions(Protocol):
    """A dialect's upkeep of history kept in partitions, for ``SqlStore.prune`` (which
    decides what to drop). Each step runs in a transaction of its own."""

    def extend(self, params: dict[str, Any]) -> Body[int]:
        """Make the weekly partitions from the week holding ``since`` to the one holding
        ``upto`` that do not exist; the number made."""
        ...

    def census(self, params: dict[str, Any]) -> Body[list[tuple[datetime, int, int]]]:
        """(week, occurrences, live) of each weekly partition whose week ended by ``before``;
        live: those not both terminal and finished before ``before``."""
        ...

    def drop(self, params: dict[str, Any]) -> Body[bool]:
        """Drop the partitions of ``week`` unless one of its occurrences is queued; true if
        dropped."""
        ...


class Driver(Protocol):
    """What a dialect gives the engine. See the module docstring."""

    display: str  # where the store is, for messages
    # History kept in partitions (PostgreSQL schema 0017); None: the dialect has none, and
    # history goes by the row delete alone (prune runs no partition step at all).
    history: HistoryPartitions | None

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def migrate(self) -> list[str]: ...

    async def server_time(self) -> datetime: ...

    async def call(self, fn: Any, *, write: bool) -> Any:
        """Run ``fn(connection)`` as one transaction (tests reach the raw connection so)."""
        ...

    async def transaction(self, body: Body[T], mode: Mode) -> T:
        """Run ``body`` as one transaction: ``read`` (SQLite ``BEGIN``; PostgreSQL
        autocommit statements), ``write`` (``BEGIN IMMEDIATE`` / a transaction), or
        ``snapshot`` (one consistent read-only snapshot). Driver errors come out as
        ``ClockdError``s; nothing half-written survives."""
        ...

    # -- values --------------------------------------------------------------------------

    def instant(self, value: datetime) -> Any: ...

    def opt_instant(self, value: datetime | None) -> Any: ...

    def read(self, value: Any) -> datetime: ...

    def opt_read(self, value: Any) -> datetime | None: ...

    def duration(self, value: timedelta) -> Any: ...

    def seconds(self, value: Any) -> float:
        """A lag column (PostgreSQL: seconds; SQLite: microseconds) in seconds."""
        ...

    def array(self, values: Sequence[Any]) -> Any: ...

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
        """Rows as parameters: PostgreSQL one array per column (named ``columns``, read
        with ``unnest``), SQLite one JSON array of rows (named ``name``, ``json_each``)."""
        ...

    def document(self, value: Any) -> dict[str, Any]:
        """A JSON column (PostgreSQL jsonb arrives decoded; SQLite text)."""
        ...

    def text(self, value: str) -> str:
        """Text as the column can hold it (PostgreSQL: NUL becomes U+FFFD)."""
        ...

    def lag_stats(self, row: Sequence[Any]) -> LagStats:
        """``start_lag``'s row (percentile_cont in PostgreSQL, neighbours in SQLite)."""
        ...

    # -- steps a dialect writes its own way (fewer statements where it can) -----------------

    def claim(self, request: ClaimRequest) -> Body[list[Sequence[Any]]]:
        """Pick, judge and lease; rows (occurrence_id, lease_token, attempt, schedule_id,
        version, scheduled_for, max_attempts) in start order."""
        ...

    def relay(self, params: dict[str, Any]) -> Body[tuple[int, list[Any]]]:
        """``Store.relay``'s move (``params``: ``until``, ``limit``, ``now``, ``expected``,
        ``next``): the number of rows it queued, and ``now - available_at`` (a lag column,
        see ``seconds``) of at least those it queued late."""
        ...

    def schedules_insert(self, params: dict[str, Any]) -> tuple[Run, ...]:
        """The statements of a batch of ``apply_schedules``' creates (``params``:
        ``table("schedules", …)`` of the engine's create columns, ``state``, ``reason``,
        ``now``), fetching nothing: the schedule rows, their overlap slots, first versions
        and labels. The engine runs them in a ``Stream`` (all or nothing): an ``Integrity``
        error (a taken name or id; a driver may also refuse a label pair given twice in one
        definition) leaves none of them written, and the engine redoes the batch row by row."""
        ...

    def materialize_insert(self, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
        """Insert the occurrences and the outbox rows of the SCHEDULED ones; the (id, state)
        of each occurrence inserted."""
        ...

    def materialize_insert_enqueued(self, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
        """``direct_dispatch``'s insert: the occurrences, SCHEDULED ones written ENQUEUED
        (``enqueued_at`` = ``now``), and the ``dispatch`` rows of those inserted ENQUEUED
        (what the relay would write for them); the (id, state) of each occurrence inserted."""
        ...

    def slot_release(self, params: dict[str, Any]) -> tuple[Run, ...]:
        """The statements by which overlap slots held by ended occurrences (``ids``) pass
        to their waiter (back in the queue at ``now``) or become free; they fetch nothing
        and run in order, so a caller puts them at the end of its ``Pipeline``."""
        ...

    def end_leases(self, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
        """finish's claims that end: ``leases_held``'s rows (same columns) for ``tokens``
        whose occurrence is ``running``, their leases ended (SQLite: the ``dispatch`` rows
        deleted; PostgreSQL: taken out of their batch)."""
        ...

    def lock_leases(self, params: dict[str, Any]) -> Body[None]:
        """Before finish and release read the leases of ``tokens``: take whatever locks the
        dialect's leases need (PostgreSQL: the batch rows, in one order; SQLite, one
        writer: none)."""
        ...

    def reap_pick(self, params: dict[str, Any]) -> Body[list[Sequence[Any]]]:
        """The reaper's pick (``params``: ``now``, ``limit``): the lost runs of expired
        leases, locked, as rows (queue row id or None, occurrence id, attempt, max attempts,
        tenant, token, worker id, the attempt's start). SQLite: the oldest ``limit`` expired
        queue rows; PostgreSQL: every lost run of the oldest expired batches that hold
        ``limit`` open runs (whole batches, the first whatever its size)."""
        ...


def _advance(body: Body[Any], value: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Resume ``body`` with a step's result (or throw its ``Integrity`` in): (True, the
    body's result) when it returned, else (False, its next step). An ``Integrity`` the body
    let through comes out as the driver's own error (a bug, kept visible)."""
    try:
        return False, (body.send(value) if error is None else body.throw(error))
    except StopIteration as stop:
        return True, stop.value
    except Integrity as exc:
        raise exc.original from None


def _failed(body: Body[Any], exc: Exception, integrity: Callable[[Exception], Integrity | None]) -> Integrity:
    """The ``Integrity`` to throw into ``body`` for ``exc``; any other error closes the
    body and propagates (the driver rolls the transaction back)."""
    found = integrity(exc)
    if found is None:
        body.close()
        raise exc
    return found


def drive_sync(body: Body[T], run: Callable[[Step], Any], integrity: Callable[[Exception], Integrity | None]) -> T:
    """Run ``body`` with ``run(step) -> result`` (synchronous drivers). ``integrity(exc)``
    returns an ``Integrity`` for a constraint error, else None."""
    value: Any = None
    error: Integrity | None = None
    while True:
        done, out = _advance(body, value, error)
        if done:
            result: T = out
            return result
        value, error = None, None
        try:
            value = run(out)
        except Exception as exc:
            error = _failed(body, exc, integrity)


async def drive_async(
    body: Body[T], run: Callable[[Step], Awaitable[Any]], integrity: Callable[[Exception], Integrity | None]
) -> T:
    """``drive_sync`` for asynchronous drivers: ``run(step)`` is awaited."""
    value: Any = None
    error: Integrity | None = None
    while True:
        done, out = _advance(body, value, error)
        if done:
            result: T = out
            return result
        value, error = None, None
        try:
            value = await run(out)
        except Exception as exc:
            error = _failed(body, exc, integrity)
