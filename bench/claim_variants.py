"""The claim's database time per claimed row, clockd's claim against variants of it
(issue 18: "where the time goes, to be measured rather than assumed").

``python -m bench.claim_variants [--rounds R] [--schedules N] [--per K] [--tenants T]``: on a durable
PostgreSQL with ``pg_stat_statements`` (``bench.servers``), each round makes a fresh
database with N schedules and K due occurrences each in the queue (materialized and
relayed by the store, untimed), then claims through the store 500 rows at a time — the
variants taking turns, claim by claim, and every claimed batch finished as the worker
finishes it — until the queue is empty. The figure is each variant's
``total_exec_time + total_plan_time`` over its rows (planning counts: every claim is
planned afresh, see ``clockd.store.postgres.store``), from its own ``pg_stat_statements``
entry (a comment names it), per round and the median over rounds; only the ratios within
a round are evidence on a shared machine. Every run allows overlap and no tenant is
capped: the case ``claim_plain`` (schema 0019) serves; the queue is one tenant's, or with
``--tenants T`` the schedules' are dealt out to T tenants and the ``clockd`` variant is
``claim_shared``, the round-robin without judging (since 2026-12-06; before, such a claim
was ``claim_lease``'s, the ``judged`` variant).

Variants (each runs in ``claim_plain``'s place; rewrites of this release's statements,
not product code):

* ``clockd``: ``claim_plain`` as it is (the claim with nothing to judge, schema 0019).
* ``judged``: ``claim_lease``, the claim that judges fairness, caps and overlap, as every
  claim was made before schema 0019 (and as clockd makes one that has anything to judge).
* ``judged, schedule probe``: ``claim_lease`` before schema 0018, reading every
  candidate's policy from its schedule's spec (a join to ``schedules``), as rows written
  before 0018 are judged still.
* ``judged, no re-fetch``: ``claim_lease`` with the pick carrying the queue rows' columns
  out instead of ``cand`` reading them again by id (a lateral probe of ``occurrences`` per
  row keeps the plan a nested loop: as a plain join the planner, estimating the pick at a
  million rows, hashed whole tables).
* ``plain, no re-fetch`` (one tenant only: claim_shared's pick may list a row twice):
  ``claim_plain`` with the same change — its pick lists a row once, so ``cand`` is the
  rows as the pick locked them: one probe of ``dispatch_pkey`` and ~3 buffers per claimed
  row fewer. Measured and not taken (README, "The claim's candidates from its pick"): the
  plan made from the batch's real size instead of the re-read's few rows reads whole the
  partitions of ``occurrences`` whose statistics say small, and turning sequential scans
  off for the claim cost more than the re-read.
* ``plain, by ctid`` (one tenant only): ``claim_plain`` finding the queue rows it locked by
  their tuple ids instead of their keys — the pick returns each row's ``ctid``, ``cand``
  reads them by a TID scan and ``leased`` updates them the same way (a row this statement
  has locked cannot move). No ``dispatch_pkey`` descent is left in the claim (2.0 → 0.0
  per claimed row, 9.0 → 3.0 buffers in ``bench.drain_census``), but the time did not
  follow: 0.95 × here, and in the census's drain 40.9 against 40.6 and 49.4 against
  47.3 µs per execution, planning 2.9 against 2.3–2.5 µs (2026-12-07; README, "Where a
  drain's server time goes"). Not taken.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from datetime import UTC, datetime, timedelta
from typing import LiteralString

BATCH = 500
PLAIN = "claim_plain"
SHARED = "claim_shared"  # the plain claim of tenants sharing a queue (runs in PLAIN's place)
JUDGED = "claim_lease"

_PICK_FAIR = """    SELECT f.id FROM ready AS r
    CROSS JOIN LATERAL (
        SELECT dispatch.id FROM dispatch"""
_PICK_OLDEST = """    SELECT g.id FROM unnest(%(queues)b::text[]) AS q(queue)
    CROSS JOIN LATERAL (
        SELECT dispatch.id FROM dispatch"""
_COLUMNS = "dispatch.id, dispatch.occurrence_id, dispatch.tenant, dispatch.visible_at"
_OWN = "dispatch.id, dispatch.tenant, dispatch.visible_at, dispatch.overlap"  # what claim_plain's cand reads
_PLAIN_CAND = """    SELECT d.id, d.tenant, d.visible_at, d.overlap FROM dispatch AS d
    WHERE d.id = ANY(ARRAY(SELECT id FROM picked))"""
_CAND = """    FROM dispatch AS d
    JOIN occurrences AS o ON o.id = d.occurrence_id
    WHERE d.id = ANY(ARRAY(SELECT id FROM picked)) AND o.state = ANY(%(claimable)b::text[])"""
_POLICY = """coalesce(o.overlap, (SELECT s.spec->>'overlap' FROM schedules AS s WHERE s.id = o.schedule_id),
                    %(default_overlap)s::text) AS overlap"""


def _replaced(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise SystemExit(f"bench.claim_variants: the claim no longer has {old[:60]!r}: update the variants")
    return text.replace(old, new)


def variants(plain: str, claim: str, one_tenant: bool = True) -> dict[str, str]:
    """The variants of this release's claim (``plain``: ``claim_plain``, or ``claim_shared``
    when not ``one_tenant``; ``claim``: ``claim_lease``), each behind a comment naming it."""
    probe = _replaced(claim, _POLICY, "coalesce(s.spec->>'overlap', %(default_overlap)s::text) AS overlap")
    probe = _replaced(
        probe, "    JOIN occurrences AS o ON o.id = d.occurrence_id\n    WHERE d.id",
        "    JOIN occurrences AS o ON o.id = d.occurrence_id\n    JOIN schedules AS s ON s.id = o.schedule_id\n"
        "    WHERE d.id",
    )  # fmt: skip
    carried = _replaced(claim, _PICK_FAIR, _PICK_FAIR.replace("f.id", "f.*").replace("dispatch.id", _COLUMNS))
    carried = _replaced(carried, _PICK_OLDEST, _PICK_OLDEST.replace("g.id", "g.*").replace("dispatch.id", _COLUMNS))
    carried = _replaced(
        carried, _CAND,
        """    FROM picked AS d
    CROSS JOIN LATERAL (SELECT o.schedule_id, o.scheduled_for, o.overlap FROM occurrences AS o
                        WHERE o.id = d.occurrence_id AND o.state = ANY(%(claimable)b::text[]) LIMIT 1) AS o""",
    )  # fmt: skip
    found = {"clockd": plain, "judged": claim, "judged, schedule probe": probe, "judged, no re-fetch": carried}
    if one_tenant:
        own = _replaced(plain, _PICK_OLDEST, _PICK_OLDEST.replace("g.id", "g.*").replace("dispatch.id", _OWN))
        own = _replaced(own, _PLAIN_CAND, "    SELECT id, tenant, visible_at, overlap FROM picked")
        found["plain, no re-fetch"] = own
        by_tid = _replaced(plain, _PICK_OLDEST, _PICK_OLDEST.replace("g.id", "g.id, g.ctid").replace(
            "SELECT dispatch.id", "SELECT dispatch.id, dispatch.ctid"))  # fmt: skip
        by_tid = _replaced(by_tid, _PLAIN_CAND, _PLAIN_CAND.replace("d.id, d.tenant", "d.id, d.ctid AS tid, d.tenant")
                           .replace("d.id = ANY(ARRAY(SELECT id", "d.ctid = ANY(ARRAY(SELECT ctid"))  # fmt: skip
        by_tid = _replaced(
            by_tid,
            "    SELECT c.id, row_number() OVER (ORDER BY c.visible_at, c.id) AS start_no",
            "    SELECT c.id, c.tid, row_number() OVER (ORDER BY c.visible_at, c.id) AS start_no",
        )
        by_tid = _replaced(
            by_tid, "    DELETE FROM dispatch USING starters AS s\n    WHERE dispatch.id = s.id\n",
            "    DELETE FROM dispatch USING starters AS s\n"
            "    WHERE dispatch.ctid = ANY(ARRAY(SELECT tid FROM starters)) AND dispatch.id = s.id\n",
        )  # fmt: skip
        found["plain, by ctid"] = by_tid
    return {name: f"/* claim variant: {name} */\n{text}" for name, text in found.items()}


async def one_round(dsn: str, schedules: int, per: int, tenants: int = 1) -> dict[str, float]:
    """One database: the queue filled, then emptied by the variants in turn. µs per row."""
    import psycopg

    from bench.servers import planning_tracked
    from clockd.core.ids import new_schedule_id, occurrence_id
    from clockd.core.model import AttemptOutcome, NoopTarget, OccurrenceState, ScheduleDef, ScheduleKind
    from clockd.store import Completion, CursorAdvance, Fence, NewOccurrence, NewSchedule
    from clockd.store.postgres import PostgresStore
    from clockd.store.postgres.store import Q

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for statement in planning_tracked(dsn):  # before the store's sessions open
            await conn.execute(statement)
    store = PostgresStore(dsn)
    await store.migrate()
    await store.open()
    t0 = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
    noop = NoopTarget()
    news = [
        NewSchedule(
            new_schedule_id(),
            ScheduleDef(
                name=f"c{i}",
                kind=ScheduleKind.CRON,
                expr="* * * * *",
                tz="UTC",
                target=noop,
                tenant=f"t{i % tenants}" if tenants > 1 else "default",
            ),
            0,
            t0,
        )
        for i in range(schedules)
    ]
    created = (await store.apply_schedules(news, [], t0)).created
    step = 800  # schedules per materializer batch
    for i in range(0, len(created), step):
        batch = created[i : i + step]
        rows = [
            NewOccurrence(occurrence_id(s.id, 1, at), s.id, 1, at, at, "default", s.definition.tenant, 3,
                          overlap=s.definition.overlap)
            for s in batch
            for at in (t0 + timedelta(seconds=k) for k in range(per))
        ]  # fmt: skip
        cursors = [CursorAdvance(s.id, 1, t0, t0 + timedelta(seconds=per)) for s in batch]
        await store.materialize(Fence("shard:0", 1), rows, cursors, t0)
    while (await store.relay(t0 + timedelta(hours=1), 10_000, t0)).moved:
        pass
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE")
        await conn.execute("SELECT pg_stat_statements_reset()")
    texts = variants(Q[PLAIN] if tenants == 1 else Q[SHARED], Q[JUDGED], tenants == 1)
    names = list(texts)
    queries = Q._queries  # the bench swaps one statement's text between claims (private: not a product path)
    original = queries[PLAIN]
    turn = 0
    try:
        while True:
            text: LiteralString = texts[names[turn % len(names)]]  # our own SQL, rewritten above
            queries[PLAIN] = text
            turn += 1
            claims = await store.claim(["default"], "bench", BATCH, timedelta(minutes=5), datetime.now(UTC))
            if not claims:
                break
            ended = [Completion(c.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED) for c in claims]
            await store.finish(ended, datetime.now(UTC))
    finally:
        queries[PLAIN] = original
        await store.close()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT query, sum(total_exec_time + total_plan_time), sum(rows) FROM pg_stat_statements "
            "WHERE query LIKE '/* claim variant: %%' GROUP BY query"
        )
        found = await cur.fetchall()
    out: dict[str, float] = {}
    for query, ms, rows in found:
        name = str(query).split("*/", 1)[0].removeprefix("/* claim variant: ").strip()
        out[name] = float(ms) * 1000 / max(int(rows), 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.claim_variants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--schedules", type=int, default=20_000)
    parser.add_argument("--per", type=int, default=6, help="due occurrences per schedule")
    parser.add_argument("--tenants", type=int, default=1, help="tenants the schedules are dealt out to")
    args = parser.parse_args()
    from bench.servers import log, servers

    results: dict[str, list[float]] = {}
    with servers() as found:
        for r in range(args.rounds):
            dsn = found.new_database("claim")
            try:
                got = asyncio.run(one_round(dsn, args.schedules, args.per, args.tenants))
            finally:
                found.drop_database(dsn)
            log(f"round {r + 1}: " + ", ".join(f"{name} {us:.1f} µs/row" for name, us in got.items()))
            for name, us in got.items():
                results.setdefault(name, []).append(us)
    base = statistics.median(results.get("clockd", [float("nan")]))
    print(f"{'variant':<24} {'µs per claimed row (rounds)':<36} {'median':>8} {'× clockd':>9}")
    for name, values in results.items():
        med = statistics.median(values)
        rounds = " ".join(f"{v:.1f}" for v in values)
        print(f"{name:<24} {rounds:<36} {med:>8.1f} {med / base:>9.2f}")


if __name__ == "__main__":
    main()
