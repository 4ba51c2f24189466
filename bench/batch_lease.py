"""What a lease per claimed *batch* would save the drain's database (issue 18: the 500,000
drain at ~12,000–17,000/s against a goal of 30,000). A measurement for the next design
round, not product code: nothing here changes what clockd runs.

Today every claimed queue row carries its own lease: the claim rewrites the ``dispatch``
row (``lease_token``, ``lease_until``, ``worker_id``, ``leased_at``; not HOT — a new entry
in ``dispatch_pkey``, ``dispatch_occurrence_id_key`` and ``dispatch_lease_token``) and
starts the occurrence (RUNNING); the finish finds each row again by its token
(``leases_end``: a probe of ``dispatch_lease_token``, the occurrence read, the row
deleted) and ends the occurrence (``finish_occurrences``).

The **batch lease** measured beside it: the claim *deletes* the queue rows it picked,
writes one lease row for the whole batch (``claim_batches``: token, worker, until, and
its occurrences' ids, which a reaper of expired batches would need) and the batch's
token on each occurrence it starts (a column no index names: the update stays HOT); the
finish ends the occurrences still RUNNING under that token — one statement — and drops
the batch row. The claim is ``claim_plain`` with its ``leased``
and ``started`` steps rewritten (the pick, the tenant probe and the checks are today's
text); the finish is written here.

    python -m bench.batch_lease [--rounds R] [--rows N] [--schedules S] [--clients K]

Each round: a fresh database on a durable PostgreSQL with ``pg_stat_statements``
(``bench.servers``), the two extra objects added to the schema, N due no-op occurrences
of S schedules staged as the materializer and relay write them (``bench.worker.stage``),
``VACUUM ANALYZE``; then one client claims 500 rows at a time — today's claim and finish,
the batch lease's, in turn — until the queue is empty, and every row must end SUCCEEDED.
Each side's finishes end 500 claims at a time, the first 250, so that every finish spans
two claimed batches (a worker's flushes do not line up with its claims): the batch row
is lowered by one finish and dropped by the next.
Figures per execution from each side's own statements: database time (execution +
planning), buffers, WAL bytes; and the client's wall time per execution (claim + finish
round trips, the engine's work included). Only the ratios within a round are evidence.
With ``--clients K`` (K > 1) K clients at once, each its own store as workers are, drain
a queue per side (the first side changing from round to round), and the drain's rate is
printed too. Figures of 2026-12-07: README, "Where a drain's server time goes".

Not modelled (what a build would have to write, and where the cost could come back):
retries (a RETRY_WAIT row goes back into the queue: an insert instead of today's
update), the reaper (over expired batch rows, through the ids each carries: an
index on the token would end the HOT updates), heartbeats (one row per batch: cheaper),
``release``, the runs lists and counts that read a running
attempt from its queue row today (the worker and start would come from the batch row and
the occurrence), overlap slots and capped tenants (their claim, ``claim_lease``, leases
rows the same way), and the SQLite store.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString

BATCH = 500
SIDES = ("today", "batch lease")

# claim_start's lease and start (the fragment claim_plain includes) run from this line
# through the one that sets started_at; batch_claim puts the batch lease's in their place.
LEASE_STEP = "), leased AS (\n    UPDATE dispatch\n"
STARTED_AT = "        started_at = coalesce(o.started_at, %(now)s)\n"
BATCH_LEASED: LiteralString = """), leased AS (
    DELETE FROM dispatch USING starters AS s
    WHERE dispatch.id = s.id
    RETURNING dispatch.occurrence_id, (%(tokens)b::text[])[s.start_no] AS lease_token, s.start_no
), batch AS (
    INSERT INTO claim_batches (token, worker_id, lease_until, leased_at, open, occurrence_ids)
    SELECT (%(tokens)b::text[])[1], %(worker_id)s, %(lease_until)s, %(now)s, count(*), array_agg(l.occurrence_id)
    FROM leased AS l HAVING count(*) > 0
), started AS (
    UPDATE occurrences AS o
    SET state = %(running_state)s::text, attempts = o.attempts + 1,
        started_at = coalesce(o.started_at, %(now)s), lease_batch = (%(tokens)b::text[])[1]
"""
SCHEMA: tuple[LiteralString, ...] = (
    "ALTER TABLE occurrences ADD COLUMN lease_batch text",
    "CREATE TABLE claim_batches (token text PRIMARY KEY, worker_id text NOT NULL,"
    " lease_until timestamptz NOT NULL, leased_at timestamptz NOT NULL, open integer NOT NULL,"
    " occurrence_ids text[] NOT NULL)",
)
# finish_by_index's settings, in a statement of its own shape (pg_stat_statements keys
# statements by their parse tree, comments aside: the same text would share one entry).
BATCH_BY_INDEX: LiteralString = """/* batch lease: by index */
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true), 'batch lease'"""
BATCH_FINISH: LiteralString = """/* batch lease: finish */
WITH ended AS (
    UPDATE occurrences AS o
    SET state = c.next_state, finished_at = %(now)s::timestamptz, exit_code = c.exit_code,
        last_error = c.error, reason = c.reason, inline_attempt_worker = c.inline_worker
    FROM unnest(%(occurrence_ids)b::text[], %(batches)b::text[], %(exit_codes)b::integer[], %(errors)b::text[],
                %(next_states)b::text[], %(reasons)b::text[], %(inline_workers)b::text[])
         AS c(occurrence_id, batch, exit_code, error, next_state, reason, inline_worker)
    WHERE o.id = c.occurrence_id AND o.lease_batch = c.batch AND o.state = %(running)s
    RETURNING c.batch
), tally AS (
    SELECT batch, count(*) AS n FROM ended GROUP BY batch
), lowered AS (  -- a batch with runs still open keeps its row, one fewer each
    UPDATE claim_batches AS b SET open = b.open - t.n FROM tally AS t WHERE b.token = t.batch AND b.open > t.n
), dropped AS (  -- and goes with its last (the two touch different rows: one statement may)
    DELETE FROM claim_batches AS b USING tally AS t WHERE b.token = t.batch AND b.open <= t.n
)
SELECT count(*) FROM ended"""
# Today's statements of the claim and the finish, by the name comment each text starts with.
TODAY = ("/* claim_plain */", "/* leases_end */", "/* finish_occurrences */", "/* finish_by_index */")


def batch_claim(plain: str) -> str:
    """``claim_plain``'s text with the batch lease's ``leased`` and ``started`` steps."""
    start = plain.find(LEASE_STEP)
    end = plain.find(STARTED_AT, start) + len(STARTED_AT)
    if (
        start < 0
        or end < len(STARTED_AT)
        or plain.count(LEASE_STEP) != 1
        or "UPDATE occurrences" not in plain[start:end]
    ):
        raise SystemExit("bench.batch_lease: claim_plain no longer has claim_start's lease step: update the rewrite")
    return "/* batch lease: claim */\n" + plain[:start] + BATCH_LEASED + plain[end:]


def side_of(query: str) -> str | None:
    """Which side a ``pg_stat_statements`` text belongs to (None: neither)."""
    if query.startswith("/* batch lease"):
        return SIDES[1]
    return SIDES[0] if query.startswith(TODAY) else None


async def one_round(
    dsn: str, rows: int, schedules: int, only: str | None = None, clients: int = 1
) -> dict[str, dict[str, float]]:
    """One database. ``only`` None: one client drains the queue with the two sides taking
    turns, claim by claim. ``only`` a side: ``clients`` clients at once (each its own store,
    as workers are) drain it with that side alone. Per side, per execution; ``rate``: the
    executions per second of the whole drain."""
    import psycopg

    from bench.servers import planning_tracked
    from bench.worker import stage
    from clockd.store.postgres import PostgresStore
    from clockd.store.postgres.store import Q

    setup = PostgresStore(dsn)
    await setup.migrate()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for tracking in planning_tracked(dsn):  # before the store's sessions open
            await conn.execute(tracking)
        for statement in SCHEMA:
            await conn.execute(statement)
    await setup.open()
    try:
        staged = await stage(setup, rows, schedules)
    finally:
        await setup.close()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE")
        await conn.execute("SELECT pg_stat_statements_reset()")
    queries = Q._queries  # the bench swaps one statement's text between claims (not a product path)
    plain = queries["claim_plain"]
    variant = batch_claim(plain)
    done = dict.fromkeys(SIDES, 0)
    wall = dict.fromkeys(SIDES, 0.0)
    sides = SIDES if only is None else (only,)

    async def drainer() -> None:
        from clockd.store.postgres.store import SESSION_OPTIONS

        store = PostgresStore(dsn)
        await store.open()
        try:
            async with await psycopg.AsyncConnection.connect(dsn, options=SESSION_OPTIONS) as finisher:
                # Claims not yet finished, with their batch's token: each flush ends BATCH of
                # them, the first only half as many, so that every flush spans two claims —
                # a worker's flushes do not line up with its claims.
                pending: dict[str, list[tuple[Any, str]]] = {side: [] for side in sides}
                for turn in range(staged):  # ends when the queue is empty, far sooner
                    side = sides[turn % len(sides)]
                    began = time.perf_counter()
                    queries["claim_plain"] = plain if side == SIDES[0] else variant  # one side at a time
                    claims = await store.claim(["default"], "bench", BATCH, timedelta(minutes=5), datetime.now(UTC))
                    wall[side] += time.perf_counter() - began  # the flush counts its own
                    if not claims:
                        for left, items in pending.items():
                            await flush(store, finisher, left, items)
                        return
                    mine = pending[side]
                    mine += [(c, claims[0].lease_token) for c in claims]  # the batch's token: tokens[1]
                    cut = BATCH // 2 if len(mine) == len(claims) else BATCH
                    await flush(store, finisher, side, mine[:cut])
                    del mine[:cut]
        finally:
            await store.close()

    async def flush(store: Any, finisher: Any, side: str, items: list[tuple[Any, str]]) -> None:
        if not items:
            return
        began = time.perf_counter()
        count = await (_finish_today(store, items) if side == SIDES[0] else _finish_batch(finisher, items))
        if count != len(items):
            raise SystemExit(f"bench.batch_lease: {side} ended {count} of {len(items)} claims")
        done[side] += count
        wall[side] += time.perf_counter() - began

    began = time.perf_counter()
    try:
        await asyncio.gather(*(drainer() for _ in range(clients)))
    finally:
        queries["claim_plain"] = plain
    span = time.perf_counter() - began
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM occurrences WHERE state <> 'SUCCEEDED'")
        left = await cur.fetchone()
        if left is None or int(left[0]) or sum(done.values()) != staged:
            raise SystemExit(f"bench.batch_lease: {left} occurrences not SUCCEEDED, {done} of {staged} ended")
        cur = await conn.execute(
            "SELECT query, total_exec_time + total_plan_time, shared_blks_hit + shared_blks_read, wal_bytes"
            " FROM pg_stat_statements WHERE calls > 0"
        )
        found_rows = await cur.fetchall()
    out: dict[str, dict[str, float]] = {
        side: {"db_us": 0.0, "buffers": 0.0, "wal": 0.0, "wall_us": wall[side] / done[side] * 1e6,
               "rate": staged / span}
        for side in sides
    }  # fmt: skip
    for query, ms, buffers, wal in found_rows:
        owner = side_of(str(query))
        if owner in out:
            figures = out[owner]
            figures["db_us"] += float(ms) * 1000 / done[owner]
            figures["buffers"] += float(buffers) / done[owner]
            figures["wal"] += float(wal) / done[owner]
    return out


async def _finish_today(store: Any, items: Sequence[tuple[Any, str]]) -> int:
    from clockd.core.model import AttemptOutcome, OccurrenceState
    from clockd.store import Completion

    ended = [Completion(c.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED) for c, _ in items]
    return len(await store.finish(ended, datetime.now(UTC)))


async def _finish_batch(finisher: Any, items: Sequence[tuple[Any, str]]) -> int:
    from clockd.core.model import OccurrenceState

    k = len(items)
    async with finisher.transaction():
        await finisher.execute(BATCH_BY_INDEX)
        cur = await finisher.execute(
            BATCH_FINISH,
            {"now": datetime.now(UTC), "running": OccurrenceState.RUNNING.value,
             "occurrence_ids": [c.occurrence_id for c, _ in items], "batches": [b for _, b in items],
             "exit_codes": [None] * k,
             "errors": [None] * k, "next_states": [OccurrenceState.SUCCEEDED.value] * k,
             "reasons": [None] * k, "inline_workers": ["bench"] * k},
        )  # fmt: skip
        found = await cur.fetchone()
    return int(found[0]) if found else 0


def _report(rounds: list[dict[str, dict[str, float]]], clients: int) -> None:
    print(f"| per execution (median of rounds), {clients} client(s) | today | batch lease | batch lease / today |")
    print("|---|---|---|---|")
    figures = [("db_us", "database time, µs (execution + planning)"), ("buffers", "buffers"), ("wal", "WAL bytes"),
               ("wall_us", "a client's wall time, µs")]  # fmt: skip
    if clients > 1:  # each side drained a queue of its own: the drain's rate is comparable
        figures.append(("rate", "the drain, executions/s"))
    for key, label in figures:
        today = statistics.median(r[SIDES[0]][key] for r in rounds)
        batch = statistics.median(r[SIDES[1]][key] for r in rounds)
        ratios = " ".join(f"{r[SIDES[1]][key] / r[SIDES[0]][key]:.2f}" for r in rounds)
        print(f"| {label} | {today:,.1f} | {batch:,.1f} | {batch / today:.2f} (rounds: {ratios}) |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_lease", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=120_000, help="due occurrences staged per round")
    parser.add_argument("--schedules", type=int, default=20_000)
    parser.add_argument(
        "--clients", type=int, default=1,
        help="1: the two sides take turns on one queue; more: that many clients at once drain a queue per side",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.rows < 2 * BATCH or args.schedules < 1 or args.clients < 1:
        parser.error(f"--rounds ≥ 1, --rows ≥ {2 * BATCH}, --schedules ≥ 1 and --clients ≥ 1")
    from bench.servers import log, servers

    rounds: list[dict[str, dict[str, float]]] = []
    with servers() as found:
        for r in range(args.rounds):
            # Alone, the sides take turns on one queue; at once, each drains its own, the
            # first side changing from round to round.
            plan: list[str | None] = [None] if args.clients == 1 else list(SIDES[:: 1 if r % 2 == 0 else -1])
            got: dict[str, dict[str, float]] = {}
            for only in plan:
                dsn = found.new_database("batch_lease")
                try:
                    got.update(asyncio.run(one_round(dsn, args.rows, args.schedules, only, args.clients)))
                finally:
                    found.drop_database(dsn)
            log(
                f"round {r + 1}: "
                + "; ".join(
                    f"{side} {f['db_us']:.1f} µs, {f['buffers']:.1f} buffers, {f['wal']:.0f} B WAL, "
                    f"wall {f['wall_us']:.1f} µs" + (f", drain {f['rate']:,.0f}/s" if args.clients > 1 else "")
                    for side, f in got.items()
                )
            )
            rounds.append(got)
    _report(rounds, args.clients)


if __name__ == "__main__":
    main()
