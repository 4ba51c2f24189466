"""Builders shared by the store contract tests: fixed instants, definitions, and the
short paths (plan → materialize → relay → claim) most tests start from."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypedDict, Unpack

import psycopg

from clockd.core.ids import new_schedule_id, occurrence_id
from clockd.core.model import (
    CommandTarget,
    MisfirePolicy,
    OccurrenceState,
    OverlapPolicy,
    RetryPolicy,
    Schedule,
    ScheduleDef,
    ScheduleKind,
    Target,
)
from clockd.core.notify import Notification
from clockd.store import Claim, CursorAdvance, Fence, NewOccurrence, Store

T0 = datetime(2026, 3, 1, tzinfo=UTC)
MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)
US = timedelta(microseconds=1)
LEASE = timedelta(seconds=30)
FENCE = Fence("shard:0", 1)
QUEUE = "default"


class StoreProxy:
    """The store under test, every call passed through; a subclass overrides the calls it
    watches (the materializer tests' ``materialize``)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class Backend:
    """One database under test, and the stores opened on it (closed at teardown)."""

    def __init__(self, kind: str, opener: Callable[[], Store]) -> None:
        self.kind = kind
        self._opener = opener
        self._stores: list[Store] = []

    async def open_store(self) -> Store:
        """A new store on the same database, opened (and so migrated)."""
        store = self._opener()
        await store.open()
        self._stores.append(store)
        return store

    def new_store(self) -> Store:
        """A new store on the same database, not opened yet (closed at teardown)."""
        store = self._opener()
        self._stores.append(store)
        return store

    async def fake_migration(self, version: int, name: str) -> None:
        """Record migration ``version`` as applied, as a newer release would."""
        raise NotImplementedError

    async def execute(self, statement: str, *params: object) -> list[tuple[Any, ...]]:
        """Run one SQL statement on the database itself, ``?`` placeholders, instants
        as ``datetime`` (what a test checks about storage, or an older clockd wrote)."""
        raise NotImplementedError

    async def query_plan(self, name: str, params: dict[str, Any]) -> str:
        """The plan of the dialect's named query ``name`` with ``params`` (SQLite's
        ``EXPLAIN QUERY PLAN``; PostgreSQL's ``EXPLAIN`` with sequential scans off: a test's
        few rows would make a scan win on size alone), one line per step."""
        raise NotImplementedError

    async def index_names(self, table: str) -> set[str]:
        """The names of ``table``'s indexes (PostgreSQL: with its partitions')."""
        rows = await self.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
            if self.kind == "sqlite"
            else "SELECT indexname FROM pg_indexes WHERE tablename = ? "
            "OR tablename IN (SELECT relid::text FROM pg_partition_tree(?::regclass))",
            *((table,) if self.kind == "sqlite" else (table, table)),
        )
        return {str(row[0]) for row in rows}

    async def aclose(self) -> None:
        for store in reversed(self._stores):
            await store.close()


class SettingsBesidesTenant(TypedDict, total=False):
    """The fields of a ``ScheduleDef`` besides its name, tenant and what it runs when
    (``kind``, ``expr``, ``tz``, ``target``)."""

    queue: str
    timeout: timedelta | None
    retry: RetryPolicy
    misfire: MisfirePolicy
    max_lateness: timedelta
    overlap: OverlapPolicy
    window: timedelta
    labels: tuple[tuple[str, str], ...]
    catch_up_limit: int
    notify: tuple[Notification, ...]


class Settings(SettingsBesidesTenant, total=False):
    """The fields of a ``ScheduleDef`` besides its name and what it runs when (for
    builders that set those themselves)."""

    tenant: str


class ChangesBesidesTenant(SettingsBesidesTenant, total=False):
    """The fields of a ``ScheduleDef`` a test may set besides its name and tenant (for
    helpers that take the tenant as a keyword of their own)."""

    kind: ScheduleKind
    expr: str
    tz: str
    target: Target


class Changes(ChangesBesidesTenant, total=False):
    """The fields of a ``ScheduleDef`` a test may set besides its name (``definition``'s
    keywords)."""

    tenant: str


def definition(name: str = "backup", **changes: Unpack[Changes]) -> ScheduleDef:
    fields: dict[str, object] = {
        "name": name,
        "kind": ScheduleKind.CRON,
        "expr": "*/1 * * * *",
        "tz": "UTC",
        "target": CommandTarget(argv=("echo", "hi")),
        "retry": RetryPolicy(retries=2),
    }
    fields.update(changes)
    return ScheduleDef(**fields)  # type: ignore[arg-type]  # the defaults and the changes: ScheduleDef's fields


async def add_schedule(
    store: Store,
    name: str = "backup",
    *,
    next_run_at: datetime | None = T0,
    shard: int = 0,
    now: datetime = T0 - MIN,
    **changes: Unpack[Changes],
) -> Schedule:
    return await store.create_schedule(new_schedule_id(), definition(name, **changes), shard, next_run_at, now)


class OccurrenceChanges(TypedDict, total=False):
    """``planned``'s keywords: what a test may set on an occurrence."""

    available_at: datetime | None
    max_attempts: int
    state: OccurrenceState
    reason: str | None
    overlap: OverlapPolicy | None


def planned(
    schedule: Schedule,
    at: datetime,
    *,
    available_at: datetime | None = None,
    max_attempts: int = 3,
    state: OccurrenceState = OccurrenceState.SCHEDULED,
    reason: str | None = None,
    overlap: OverlapPolicy | Literal["schedule's"] | None = "schedule's",
) -> NewOccurrence:
    """The occurrence the materializer would write at ``at``: its row carries the
    schedule's overlap policy (schema 0018) unless ``overlap`` says otherwise (None: a row
    written before 0018, which the claim judges by its schedule's spec)."""
    return NewOccurrence(
        id=occurrence_id(schedule.id, schedule.version, at),
        schedule_id=schedule.id,
        version=schedule.version,
        scheduled_for=at,
        available_at=at if available_at is None else available_at,
        queue=schedule.definition.queue,
        tenant=schedule.definition.tenant,
        max_attempts=max_attempts,
        state=state,
        reason=reason,
        overlap=schedule.definition.overlap if overlap == "schedule's" else overlap,
    )


async def queued(
    store: Store,
    name: str,
    count: int,
    *,
    at: datetime = T0,
    step: timedelta = US,
    tenant: str = "default",
    **changes: Unpack[ChangesBesidesTenant],
) -> tuple[Schedule, list[str]]:
    """A schedule with ``count`` occurrences ``step`` apart from ``at``, all in the queue
    (materialized and relayed in one batch each)."""
    schedule = await add_schedule(store, name, next_run_at=at, tenant=tenant, **changes)
    occurrences = [planned(schedule, at + i * step) for i in range(count)]
    cursor = CursorAdvance(schedule.id, schedule.version, at, at + count * step)
    assert (await store.materialize(FENCE, occurrences, [cursor], T0 - MIN)).inserted == count
    assert (await store.relay(at + count * step + MIN, count, T0 - MIN)).moved == count
    return schedule, [o.id for o in occurrences]


async def materialize_next(
    store: Store,
    schedule: Schedule,
    *,
    at: datetime | None = None,
    next_run_at: datetime | None = None,
    fence: Fence = FENCE,
    **occurrence: Unpack[OccurrenceChanges],
) -> tuple[Schedule, str]:
    """Materialize the occurrence at the schedule's cursor (or ``at``) and move the cursor
    one minute on. Returns the re-read schedule and the occurrence id."""
    when = schedule.next_run_at if at is None else at
    assert when is not None
    new = planned(schedule, when, **occurrence)
    cursor = CursorAdvance(schedule.id, schedule.version, schedule.next_run_at, next_run_at or when + MIN)
    result = await store.materialize(fence, [new], [cursor], T0)
    assert result.inserted == 1, result
    fresh = await store.get_schedule_by_id(schedule.id)
    assert fresh is not None
    return fresh, new.id


async def enqueue(store: Store, schedule: Schedule, **occurrence: Unpack[OccurrenceChanges]) -> tuple[Schedule, str]:
    """Materialize the next occurrence and relay it into the queue."""
    schedule, oid = await materialize_next(store, schedule, **occurrence)
    assert (await store.relay(T0 + timedelta(days=365), 1000, T0)).moved == 1
    return schedule, oid


async def queue_rows(store: Store) -> int:
    """Every row in the queue: claimable, leased or staged for later (``backlog.queued``
    counts only the claimable ones)."""
    return sum(q.ready + q.running + q.staged for q in await store.queue_stats(T0))


async def claim_one(store: Store, now: datetime = T0, *, worker: str = "w1", queue: str = QUEUE) -> Claim:
    claims = await store.claim([queue], worker, 10, LEASE, now)
    assert len(claims) == 1, claims
    return claims[0]


async def running(store: Store, name: str = "backup", **changes: Unpack[Changes]) -> tuple[Schedule, Claim]:
    """A schedule with one occurrence claimed at ``T0`` (attempt 1)."""
    schedule = await add_schedule(store, name, **changes)
    schedule, _ = await enqueue(store, schedule)
    return schedule, await claim_one(store)


def batch_of(token: str) -> str:
    """The claimed batch a PostgreSQL lease token belongs to (schema 0022: ``<batch>.<occurrence id>``)."""
    return token.split(".", 1)[0]


async def scalar(dsn: str, query: str, params: tuple[Any, ...] = ()) -> Any:
    """The one value of a PostgreSQL query (psycopg placeholders) run on its own connection."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        row = await (await conn.execute(query, params)).fetchone()
        assert row is not None
        return row[0]


async def foreign_keys(dsn: str, where: str) -> list[str]:
    """Names of the PostgreSQL foreign keys matching ``where`` (a condition on
    ``pg_constraint``, ours), sorted: what a schema test expects to be gone."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(f"SELECT conname FROM pg_constraint WHERE contype = 'f' AND {where} ORDER BY conname")
        return [str(row[0]) for row in await cur.fetchall()]
