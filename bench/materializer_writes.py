"""What each index costs the materializer's writes (issue 18: the sustained run's
database time per execution is ~150 µs against a goal of 80, and the materializer's two
write statements, ``materialize_insert_enqueued`` and ``materialize_advance``, take ~80 µs
of it). Measured rather than assumed: the same writes on copies of one database that
differ by one layout change each, on a durable PostgreSQL 15 with ``pg_stat_statements``
(``bench.servers``' settings).

The base database holds the sustained run's schedules (``every`` 1 s, 2 s, 5 s and 10 s,
equal rates per period, ``--rate`` executions a second in all, 64 shards) and
``--history`` seconds of their finished occurrences, written by the materializer's own
statement (then marked SUCCEEDED, the queue emptied, ``VACUUM ANALYZE``). Each variant is
a copy of it (``CREATE DATABASE … TEMPLATE``, ``STRATEGY FILE_COPY``) with its change
made; then the next ``--seconds`` of instants are written as the materializer writes them
while caught up — a full tick every 2 s, one transaction per shard with that shard's
instants of the tick (``materialize_insert_enqueued``), then one per shard moving the
cursors of the schedules that had an instant (``materialize_advance``). The first 10 s
(every schedule fires in them) are written after a ``CHECKPOINT`` and not counted: they
warm the copy's buffers and log the first change of each page whole, as the first writes
after any checkpoint do. The variants take turns in a rotated order, ``--rounds`` times.

Variants (not product code; each names the one change):

* ``as built``: the schema as ``clockd migrate`` leaves it;
* ``without occurrences_recent`` / ``without occurrences_by_schedule``: one of the
  occurrence indexes that are not its key dropped (what the inserts would save; the reads
  that use them would need another way);
* ``occurrences_by_schedule ascending``: that index as ``(schedule_id, scheduled_for)``
  instead of ``scheduled_for DESC`` (a backward scan reads it newest first alike). Each
  insert lands after its schedule's newest entry rather than before it; B-tree page
  splits are tuned for values that grow within a group (PostgreSQL 12's split after the
  new item), not for ones that shrink;
* ``without dispatch_ready`` / ``without dispatch_ready_tenant``: one of the queue's two
  ready indexes dropped (the claim needs one of them; the other serves the per-tenant
  claim or the readers in queue order);
* ``cursor in a table of its own``: the cursor moves on a narrow table (id key, shard,
  state, version, next_run_at and the due index) instead of ``schedules``, whose move is
  not HOT (``next_run_at`` is in ``schedules_due``) and so writes the wide row again and
  an entry into each of its three indexes.

Figures per variant: database µs per row (``total_exec_time`` ÷ rows written or cursors
moved), WAL bytes per row, and the median over the rounds of its ratio to ``as built`` of
the same round. Nothing here has a goal: it says where the materializer's time is.

    python -m bench.materializer_writes [--rate 10000] [--history 60] [--seconds 12] [--rounds 5]
        [--variants "as built,cursor in a table of its own"]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.distributed import PERIODS, SHARDS  # the sustained run's periods and shards
from clockd.core.ids import shard_of

TICK = 2  # seconds between the materializer's full ticks while caught up
WARM_TICKS = max(PERIODS) // TICK  # every schedule fires once in the warm-up

INSERT, ADVANCE = "materialize_insert_enqueued", "materialize_advance"
_CURSOR_TABLE = (
    "CREATE TABLE schedule_cursors AS SELECT id, shard, state, version, next_run_at FROM schedules",
    "ALTER TABLE schedule_cursors ADD PRIMARY KEY (id)",
    "CREATE INDEX schedule_cursors_due ON schedule_cursors (shard, next_run_at, id) WHERE state = 'active'",
    "ANALYZE schedule_cursors",
)


@dataclass(frozen=True, slots=True)
class Variant:
    """A layout change: the statements that make it, the writes it is measured on and the
    table the cursor moves update."""

    changes: tuple[str, ...]
    writes: tuple[str, ...]
    cursors_in: str = "schedules"


VARIANTS: dict[str, Variant] = {
    "as built": Variant((), (INSERT, ADVANCE)),
    "without occurrences_recent": Variant(("DROP INDEX occurrences_recent",), (INSERT,)),
    "without occurrences_by_schedule": Variant(("DROP INDEX occurrences_by_schedule",), (INSERT,)),
    "occurrences_by_schedule ascending": Variant(
        (
            "DROP INDEX occurrences_by_schedule",
            "CREATE INDEX occurrences_by_schedule ON occurrences (schedule_id, scheduled_for)",
        ),
        (INSERT,),
    ),
    "without dispatch_ready": Variant(("DROP INDEX dispatch_ready",), (INSERT,)),
    "without dispatch_ready_tenant": Variant(("DROP INDEX dispatch_ready_tenant",), (INSERT,)),
    "cursor in a table of its own": Variant(_CURSOR_TABLE, (ADVANCE,), "schedule_cursors"),
}


@dataclass(frozen=True, slots=True)
class Schedule:
    id: str
    period: int
    offset: float  # seconds after the base instant of its first fire (its anchor in the period)
    shard: int


def schedules(rate: int) -> list[Schedule]:
    """``rate`` executions a second in all, an equal share from each period (the sustained
    run's mix: ``rate × period / 4`` schedules of each), anchors spread in 100 ms steps."""
    out: list[Schedule] = []
    for period in PERIODS:
        for i in range(rate * period // len(PERIODS)):
            sid = str(uuid.uuid4())
            out.append(Schedule(sid, period, (i % (period * 10)) / 10, shard_of(sid, SHARDS)))
    return out


def first_at(s: Schedule, start: float) -> float:
    """The schedule's first fire at or after ``start`` (seconds after the base instant)."""
    return s.offset + s.period * max(0, -(-(start - s.offset) // s.period))


def instants(found: Sequence[Schedule], start: float, end: float) -> Iterator[tuple[Schedule, float]]:
    """Each schedule's fires in [start, end) (seconds after the base instant)."""
    for s in found:
        at = first_at(s, start)
        while at < end:
            yield s, at
            at += s.period


def ticks(found: Sequence[Schedule], start: float, end: float) -> Iterator[dict[int, list[tuple[Schedule, float]]]]:
    """The instants of each full tick in [start, end), by shard (one transaction each)."""
    at = start
    while at < end:
        by_shard: dict[int, list[tuple[Schedule, float]]] = {}
        for s, when in instants(found, at, at + TICK):
            by_shard.setdefault(s.shard, []).append((s, when))
        yield by_shard
        at += TICK


def ratio_medians(rounds: Sequence[dict[str, float]], base: str = "as built") -> dict[str, float]:
    """Per variant, the median over the rounds of its figure ÷ ``base``'s in that round
    (a round without either is left out)."""
    out: dict[str, float] = {}
    for name in {k for r in rounds for k in r}:
        ratios = [r[name] / r[base] for r in rounds if name in r and r.get(base)]
        if ratios:
            out[name] = statistics.median(ratios)
    return out


class Writer:
    """The materializer's two statements on one database, with the rows of a tick."""

    def __init__(self, conn: Any, base: datetime, cursors: dict[str, float]) -> None:
        from clockd.core.ids import occurrence_id
        from clockd.store.postgres.store import Q

        self.conn, self.base, self.cursors = conn, base, dict(cursors)
        self.occurrence_id: Callable[[str, int, datetime], str] = occurrence_id
        self.insert, self.advance = Q[INSERT], Q[ADVANCE]

    def at(self, seconds: float) -> datetime:
        return self.base + timedelta(seconds=seconds)

    def write(
        self, tick: dict[int, list[tuple[Schedule, float]]], which: Sequence[str], table: str = "schedules"
    ) -> None:
        now = datetime.now(UTC)
        if INSERT in which:
            for rows in tick.values():
                times = [self.at(when) for _, when in rows]
                n = len(rows)
                self.conn.execute(
                    self.insert,
                    {"ids": [self.occurrence_id(s.id, 1, t) for (s, _), t in zip(rows, times, strict=True)],
                     "schedule_ids": [s.id for s, _ in rows], "versions": [1] * n, "tenants": ["default"] * n,
                     "queues": ["default"] * n, "scheduled_for": times, "available_at": times,
                     "states": ["SCHEDULED"] * n, "max_attempts": [1] * n, "reasons": [None] * n,
                     "finished_at": [None] * n, "overlaps": ["allow"] * n, "now": now,
                     "scheduled": "SCHEDULED", "enqueued": "ENQUEUED"},
                )  # fmt: skip
        if ADVANCE in which:
            statement = self.advance.replace("UPDATE schedules AS s", f"UPDATE {table} AS s")
            for rows in tick.values():
                # Each schedule's cursor after its last instant here (a schedule's come in order).
                nxt = {s.id: when + s.period for s, when in rows}
                ids = list(nxt)
                expected = [self.at(self.cursors[i]) for i in ids]
                found = self.conn.execute(
                    statement,
                    {"ids": ids, "versions": [1] * len(ids), "expected": expected,
                     "next_run_at": [self.at(nxt[i]) for i in ids]},
                ).fetchall()  # fmt: skip
                if len(found) != len(ids):
                    raise RuntimeError(f"bench.materializer_writes: {len(found)} of {len(ids)} cursors moved")
                self.cursors.update(nxt)


def run(
    rate: int, history: int, seconds: int, rounds: int, names: Sequence[str] = tuple(VARIANTS)
) -> list[tuple[str, str, float, float, float]]:
    """The figures: (variant, statement, µs per row, WAL bytes per row, × as built)."""
    import psycopg

    from bench.bulk import Template
    from bench.servers import STATS_SETTINGS, log, statement_totals, url_dsn
    from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
    from clockd.store.postgres.store import PostgresStore
    from tests.harness.postgres import PostgresServer

    found = schedules(rate)
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=history)
    # Every cursor at its first instant not in the history (the measured ticks start there).
    cursors = {s.id: first_at(s, history) for s in found}
    pg = PostgresServer(durable=True, settings=STATS_SETTINGS).start()
    try:
        admin = pg.dsn("postgres")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE mw_base")
        dsn = url_dsn(admin, "mw_base")

        async def migrate() -> None:
            await PostgresStore(dsn, max_size=1).migrate()

        asyncio.run(migrate())
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT clockd_history_extend(%s, %s)", (base - timedelta(days=1), base + timedelta(days=8)))
            # The schedule rows as the sustained run's are (bench.bulk: the normalized
            # definition's spec, ~340 bytes): a cursor move writes the whole row again.
            specs = {p: Template.of(ScheduleDef(name="t", kind=ScheduleKind.EVERY, expr=f"{p}s", tz="UTC",
                                                target=NoopTarget())).spec for p in PERIODS}  # fmt: skip
            with conn.cursor().copy(
                "COPY schedules (id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard, "
                "created_at, updated_at, spec) FROM STDIN"
            ) as copy:
                for i, s in enumerate(found):
                    copy.write_row((s.id, "default", f"every{s.period}-{i:06d}", "every", f"{s.period}s", "UTC",
                                    "default", "active", 1, base + timedelta(seconds=cursors[s.id]), s.shard, base,
                                    base, specs[s.period]))  # fmt: skip
            writer = Writer(conn, base, cursors)
            for tick in ticks(found, 0, history):
                writer.write(tick, (INSERT,))
            conn.execute("DELETE FROM dispatch")
            conn.execute(
                "UPDATE occurrences SET state = 'SUCCEEDED', attempts = 1, started_at = scheduled_for, "
                "finished_at = scheduled_for"
            )
            conn.execute("VACUUM ANALYZE")
            (count,) = conn.execute("SELECT count(*) FROM occurrences").fetchone() or (0,)
        log(f"materializer_writes: {len(found):,} schedules, {count:,} occurrences of history")
        work = list(ticks(found, history, history + TICK * WARM_TICKS + seconds))
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        names = ["as built", *(n for n in names if n != "as built")]
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                variant = VARIANTS[name]
                copy_name = f"mw_{r}_{names.index(name)}"
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(f"CREATE DATABASE {copy_name} TEMPLATE mw_base STRATEGY FILE_COPY")
                try:
                    with psycopg.connect(url_dsn(admin, copy_name), autocommit=True) as conn:
                        for statement in variant.changes:
                            conn.execute(statement)
                        # The copy's checkpoint done before, not during, the writes; then the
                        # warm-up's ticks touch every schedule's index entries once (a
                        # page's first change after a checkpoint logs the whole page).
                        conn.execute("CHECKPOINT")
                        writer = Writer(conn, base, cursors)
                        for tick in work[:WARM_TICKS]:
                            writer.write(tick, variant.writes, variant.cursors_in)
                        conn.execute("SELECT pg_stat_statements_reset()")
                        for tick in work[WARM_TICKS:]:
                            writer.write(tick, variant.writes, variant.cursors_in)
                        for statement in variant.writes:
                            ms, rows, wal = statement_totals(conn, f"/* {statement} */%")
                            us = ms * 1000 / max(rows, 1)
                            figures.setdefault((name, statement), []).append((us, wal / max(rows, 1)))
                            log(f"materializer_writes: round {r + 1}, {name}: {statement} {us:.1f} µs a row")
                finally:
                    with psycopg.connect(admin, autocommit=True) as conn:
                        conn.execute(f"DROP DATABASE {copy_name}")
        out: list[tuple[str, str, float, float, float]] = []
        for statement in (INSERT, ADVANCE):
            ratios = ratio_medians(
                [{n: v[r][0] for (n, st), v in figures.items() if st == statement} for r in range(rounds)]
            )
            for name in names:
                if (name, statement) in figures:
                    samples = figures[(name, statement)]
                    out.append((name, statement, statistics.median(v[0] for v in samples),
                                statistics.median(v[1] for v in samples), ratios.get(name, float("nan"))))  # fmt: skip
        return out
    finally:
        pg.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.materializer_writes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=10_000, help="executions a second of the schedules (default 10000)")
    parser.add_argument("--history", type=int, default=60, help="seconds of finished occurrences first (default 60)")
    parser.add_argument("--seconds", type=int, default=12, help="seconds of instants each variant writes (default 12)")
    parser.add_argument("--rounds", type=int, default=5, help="turns of every variant (default 5)")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="the variants to measure, by name, comma-separated (default all)"
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        parser.error(f"--variants: no variant named {unknown[0] if unknown else args.variants!r}; "
                     f"the variants are {', '.join(VARIANTS)}")  # fmt: skip
    for option in ("rate", "history", "seconds", "rounds"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} takes a whole number of at least 1, not {getattr(args, option)}")
    rows = run(args.rate, args.history, args.seconds, args.rounds, names)
    out = sys.stdout
    out.write("\n| variant | statement | database µs per row | WAL bytes per row | × as built (median of rounds) |\n")
    out.write("|---|---|---|---|---|\n")
    for name, statement, us, wal, ratio in rows:
        out.write(f"| {name} | {statement} | {us:.1f} | {wal:,.0f} | {ratio:.2f} |\n")


if __name__ == "__main__":
    main()
