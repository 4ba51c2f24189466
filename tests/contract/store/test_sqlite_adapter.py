"""What only the SQLite adapter does: the file, its pragmas, and translating driver errors."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clockd.core.ids import new_schedule_id
from clockd.core.model import AttemptOutcome, OccurrenceState, Schedule
from clockd.errors import SchemaMismatch, StoreLocked, StoreUnavailable
from clockd.store import Completion, CursorAdvance, NewOccurrence
from clockd.store.codec import to_us
from clockd.store.sqlite import SqliteStore
from clockd.store.sqlite.store import KNOWN_VERSION

from .support import FENCE, LEASE, MIN, T0, add_schedule, definition, enqueue


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "clockd.db")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


async def test_open_creates_missing_directories_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "clockd.db"
    store = SqliteStore(path)
    applied = [f"{KNOWN_VERSION:04d}"]
    await store.open()
    try:
        assert path.exists()
        conn = raw(path)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        versions = [f"{v:04d}" for (v,) in conn.execute("SELECT version FROM schema_migrations")]
        assert versions[-1:] == applied
        conn.close()
    finally:
        await store.close()


async def test_instants_are_stored_as_integer_microseconds(sqlite_store: SqliteStore) -> None:
    created = await add_schedule(sqlite_store, "a", next_run_at=T0)
    conn = raw(sqlite_store.path)
    row = conn.execute("SELECT next_run_at, typeof(next_run_at) FROM schedules WHERE id = ?", (created.id,)).fetchone()
    conn.close()
    assert row == (int(T0.timestamp()) * 1_000_000, "integer")


async def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"this is not a database, just some text that is long enough" * 100)
    store = SqliteStore(path)
    with pytest.raises(StoreUnavailable, match=r"notes\.txt.*not a clockd SQLite database"):
        await store.open()
    await store.close()


async def test_a_directory_in_place_of_the_file(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    with pytest.raises(StoreUnavailable, match="cannot open"):
        await store.open()


async def test_a_write_lock_held_past_the_busy_timeout_is_store_locked(tmp_path: Path) -> None:
    path = tmp_path / "clockd.db"
    store = SqliteStore(path, busy_timeout=0.05)
    await store.open()
    holder = raw(path)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreLocked, match=r"clockd\.db.*locked"):
            await add_schedule(store, "a")
        # Reads go on under WAL while someone else writes.
        assert await store.list_schedules() == []
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    await add_schedule(store, "a")
    await store.close()


async def _nearly_full(store: SqliteStore) -> tuple[Schedule, list[NewOccurrence], list[CursorAdvance]]:
    """A schedule, then the file capped two pages above its size: the 2,000 occurrences
    returned (and their cursor advance) do not fit."""
    schedule = await add_schedule(store, "a", next_run_at=T0)

    def cap(conn: sqlite3.Connection) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 2}")

    await store._call(cap, write=False)
    big = [
        NewOccurrence(
            id=f"{i:08d}-0000-4000-8000-{'x' * 200}",
            schedule_id=schedule.id,
            version=1,
            scheduled_for=T0 + i * MIN,
            available_at=T0 + i * MIN,
            queue="default",
            tenant="default",
            max_attempts=3,
        )
        for i in range(2000)
    ]
    return schedule, big, [CursorAdvance(schedule.id, 1, T0, T0 + 2000 * MIN)]


async def test_disk_full_commits_nothing_and_says_so(sqlite_store: SqliteStore) -> None:
    schedule, big, cursor = await _nearly_full(sqlite_store)
    with pytest.raises(StoreUnavailable, match="disk full"):
        await sqlite_store.materialize(FENCE, big, cursor, T0)
    assert await sqlite_store.list_occurrences(schedule.id) == []
    fresh = await sqlite_store.get_schedule_by_id(schedule.id)
    assert fresh is not None and fresh.next_run_at == T0
    # The store keeps working once there is room again.
    await sqlite_store._call(lambda conn: conn.execute("PRAGMA max_page_count = 1073741823"), write=False)
    result = await sqlite_store.materialize(FENCE, big[:10], cursor, T0)
    assert result.inserted == 10


async def test_readonly_store_reads_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "clockd.db"
    writer = SqliteStore(path)
    await writer.open()
    await add_schedule(writer, "a")
    reader = SqliteStore(path, readonly=True)
    await reader.open()
    try:
        assert [s.name for s in await reader.list_schedules()] == ["a"]
        with pytest.raises(StoreUnavailable):
            await reader.create_schedule(new_schedule_id(), definition("b"), 0, T0, T0)
    finally:
        await reader.close()
        await writer.close()


async def test_readonly_open_of_an_unmigrated_database_is_a_schema_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    raw(path).close()
    reader = SqliteStore(path, readonly=True)
    with pytest.raises(SchemaMismatch, match="older"):
        await reader.open()


async def test_calls_after_close_are_refused(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "clockd.db")
    await store.open()
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreUnavailable, match="not open"):
        await store.list_schedules()


async def test_database_work_runs_on_one_thread_off_the_event_loop(sqlite_store: SqliteStore) -> None:
    loop_thread = threading.get_ident()
    threads = await asyncio.gather(
        *(sqlite_store._call(lambda conn: threading.get_ident(), write=False) for _ in range(5))
    )
    assert len(set(threads)) == 1
    assert threads[0] != loop_thread


async def test_concurrent_openers_migrate_once(tmp_path: Path) -> None:
    path = tmp_path / "clockd.db"
    stores = [SqliteStore(path) for _ in range(4)]
    await asyncio.gather(*(s.open() for s in stores))
    conn = raw(path)
    assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == KNOWN_VERSION
    conn.close()
    for s in stores:
        await s.close()


async def test_a_0007_store_upgrades_and_its_running_claim_ends_in_place(tmp_path: Path) -> None:
    """Schema 0008 moves the running attempt's start to its lease (dispatch.leased_at): a
    claim a 0007 clockd made (lease, RUNNING, a 'running' attempt row) keeps its start,
    is listed once while it runs and is completed in place by the finish. (The finish
    stands for the 0007 clockd's own: only the claiming process holds the token. Its
    output makes it one this clockd records in an attempts row too; a silent first
    success would be kept on the occurrence, schema 0013.)"""
    path = tmp_path / "clockd.db"
    old = SqliteStore(path)
    old.driver.migrations = [m for m in old.driver.migrations if m.version <= 7]
    await old.open()
    try:
        # This release's statements write the 0007 store's rows, and they name the columns
        # schemas 0018 and 0019 add: there for the writes, dropped before the upgrade.
        conn = raw(path)
        conn.execute("ALTER TABLE occurrences ADD COLUMN overlap TEXT")
        conn.execute("ALTER TABLE dispatch ADD COLUMN overlap TEXT")
        conn.close()
        schedule, oid = await enqueue(old, await add_schedule(old))
    finally:
        await old.close()
    conn = raw(path)
    conn.execute("ALTER TABLE occurrences DROP COLUMN overlap")
    conn.execute("ALTER TABLE dispatch DROP COLUMN overlap")
    with conn:  # what a 0007 clockd's claim wrote
        conn.execute("BEGIN")
        lease = (to_us(T0 + LEASE),)
        conn.execute("UPDATE dispatch SET lease_token = 'tok', lease_until = ?, worker_id = 'old'", lease)
        conn.execute("UPDATE occurrences SET state = 'RUNNING', attempts = 1, started_at = ?", (to_us(T0),))
        conn.execute(
            "INSERT INTO attempts (occurrence_id, attempt, lease_token, worker_id, started_at, outcome) "
            "VALUES (?, 1, 'tok', 'old', ?, 'running')",
            (oid, to_us(T0)),
        )
    conn.close()

    store = SqliteStore(path)
    await store.open()
    try:
        conn = raw(path)
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == KNOWN_VERSION
        assert conn.execute("SELECT leased_at FROM dispatch").fetchall() == [(to_us(T0),)]
        conn.close()
        (shown,) = await store.list_attempts(oid)
        assert (shown.outcome, shown.worker_id, shown.started_at) == (AttemptOutcome.RUNNING, "old", T0)
        done = Completion("tok", AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED, exit_code=0, output="ok")
        assert await store.finish([done], T0 + MIN) == {"tok"}
        (ended,) = await store.list_attempts(oid)
        assert (ended.outcome, ended.worker_id, ended.started_at, ended.finished_at) == (
            AttemptOutcome.SUCCEEDED, "old", T0, T0 + MIN)  # fmt: skip
        occurrence = await store.get_occurrence(oid)
        assert occurrence is not None and occurrence.schedule_id == schedule.id
        assert occurrence.state is OccurrenceState.SUCCEEDED
    finally:
        await store.close()


async def test_concurrent_writes_share_one_transaction_and_fail_alone(sqlite_store: SqliteStore) -> None:
    from .test_concurrent_writes import concurrent_creates_with_failures

    stats = sqlite_store.driver.batch_stats
    await concurrent_creates_with_failures(sqlite_store)
    # The first create ran alone; the 24 concurrent ones (failing ones among them) in one.
    assert (stats.writes, stats.batches, stats.largest) == (25, 2, 24)


async def test_a_disk_full_batch_acknowledges_exactly_what_it_wrote(sqlite_store: SqliteStore) -> None:
    schedule, big, cursor = await _nearly_full(sqlite_store)
    before, full, after = await asyncio.gather(
        add_schedule(sqlite_store, "before"),
        sqlite_store.materialize(FENCE, big, cursor, T0),
        add_schedule(sqlite_store, "after"),
        return_exceptions=True,
    )
    assert sqlite_store.driver.batch_stats.largest == 3
    assert isinstance(full, StoreUnavailable) and "disk full" in str(full)
    assert await sqlite_store.list_occurrences(schedule.id) == []
    live = {s.name for s in await sqlite_store.list_schedules()}
    for name, outcome in (("before", before), ("after", after)):
        # Acknowledged exactly when written: SQLite may end the whole transaction on a full disk.
        if isinstance(outcome, BaseException):
            assert isinstance(outcome, StoreUnavailable) and name not in live, (name, outcome)
        else:
            assert name in live


# A process that creates schedules 32 at a time and prints each name once its create returned.
_BURST = """
import asyncio, sys
from datetime import UTC, datetime
from clockd.core.ids import new_schedule_id
from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
from clockd.store import AuditEntry
from clockd.store.sqlite import SqliteStore

async def main():
    store = SqliteStore(sys.argv[1])
    await store.open()
    now = datetime.now(UTC)
    names = iter(range(10**9))
    def entry(s):
        return AuditEntry(now, "default", "burst", "schedule.create", s.name, None, s.version)
    async def worker():
        for i in names:
            d = ScheduleDef(name=f"s{i:07d}", kind=ScheduleKind.CRON, expr="0 0 1 1 *", tz="UTC",
                            target=NoopTarget())
            with store.audited(entry):
                await store.create_schedule(new_schedule_id(), d, 0, now, now, idempotency_key=f"k{i}")
            sys.stdout.write(f"s{i:07d}\\n")
            sys.stdout.flush()
    await asyncio.gather(*(worker() for _ in range(32)))

asyncio.run(main())
"""


def test_a_kill_during_a_burst_of_writes_keeps_every_acknowledged_one_whole(tmp_path: Path) -> None:
    path = tmp_path / "clockd.db"
    proc = subprocess.Popen([sys.executable, "-c", _BURST, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    acknowledged: list[str] = []
    try:
        while len(acknowledged) < 400:  # well into the burst: batches are in flight
            line = proc.stdout.readline()
            assert line, f"the burst process ended early ({proc.wait()})"
            acknowledged.append(line.strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        acknowledged += [line.strip() for line in proc.stdout]  # printed before the kill
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    conn = raw(path)
    try:
        names = {n for (n,) in conn.execute("SELECT name FROM schedules")}
        assert set(acknowledged) <= names
        # Nothing half-written: every schedule has its version row, its key and its audit entry.
        assert conn.execute("SELECT count(*) FROM schedules WHERE idempotency_key IS NULL").fetchone() == (0,)
        versions = conn.execute("SELECT count(DISTINCT schedule_id) FROM schedule_versions").fetchone()[0]
        audited = {t for (t,) in conn.execute("SELECT target FROM audit_log")}
        assert versions == len(names) and audited == names
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()
