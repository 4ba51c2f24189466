"""The store's engine, A/B against another tree, in process (docs/store.md, "Sync sqlite3
meets async psycopg": how the figures there were taken).

    git archive 4af1c75 | tar -x -C /tmp/old
    python -m bench.store_ab /tmp/old --rounds 4

Each round runs one workload per store and tree, the trees alternating, each in a fresh
process with ``sys.path`` starting at its tree and a fresh database (SQLite in a temporary
directory, PostgreSQL 15 from ``tests/harness``): 100 schedules by ``apply_schedules``,
4,000 occurrences materialized in 100 transactions, relayed, claimed in batches of 100,
finished in batches, then 200 ``backlog`` reads. Prints median seconds per phase.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import overlap, relayed

HERE = str(Path(__file__).resolve().parent.parent)
PHASES = ("apply", "materialize", "relay", "claim", "finish", "reads")
T0 = datetime(2026, 3, 1, tzinfo=UTC)
MIN = timedelta(minutes=1)


async def workload(where: str) -> dict[str, float]:
    """One run through whatever ``clockd`` comes first on ``sys.path``."""
    from clockd.core.ids import new_schedule_id, occurrence_id
    from clockd.core.model import AttemptOutcome, CommandTarget, OccurrenceState, ScheduleDef, ScheduleKind
    from clockd.store import Completion, CursorAdvance, Fence, NewOccurrence, NewSchedule

    store: Any
    if where == "sqlite":
        from clockd.store.sqlite import SqliteStore

        store = SqliteStore(Path(tempfile.mkdtemp()) / "clockd.db")
    else:
        from clockd.store.postgres import PostgresStore

        store = PostgresStore(where)
        await store.migrate()
    await store.open()
    out: dict[str, float] = {}
    target = CommandTarget(argv=("true",))
    news = [
        NewSchedule(
            new_schedule_id(),
            ScheduleDef(name=f"s{i}", kind=ScheduleKind.CRON, expr="* * * * *", tz="UTC", target=target),
            0,
            T0,
        )
        for i in range(100)
    ]
    started = time.perf_counter()
    created = (await store.apply_schedules(news, [], T0)).created
    out["apply"] = time.perf_counter() - started
    started = time.perf_counter()
    for s in created:
        instants = [T0 + k * MIN for k in range(40)]
        occurrences = [
            NewOccurrence(occurrence_id(s.id, 1, at), s.id, 1, at, at, "default", s.definition.tenant, 3,
                          **overlap(NewOccurrence, s))
            for at in instants
        ]  # fmt: skip
        await store.materialize(Fence("shard:0", 1), occurrences, [CursorAdvance(s.id, 1, T0, T0 + 40 * MIN)], T0)
    out["materialize"] = time.perf_counter() - started
    started = time.perf_counter()
    while relayed(await store.relay(T0 + 60 * MIN, 1000, T0)):
        pass
    out["relay"] = time.perf_counter() - started
    batches = []
    started = time.perf_counter()
    while claims := await store.claim(["default"], "w1", 100, 5 * MIN, T0 + 60 * MIN):
        batches.append(claims)
    out["claim"] = time.perf_counter() - started
    started = time.perf_counter()
    for claims in batches:
        done = [
            Completion(c.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED, exit_code=0) for c in claims
        ]
        await store.finish(done, T0 + 61 * MIN)
    out["finish"] = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(200):
        await store.backlog(T0)
    out["reads"] = time.perf_counter() - started
    await store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("old", help="the other tree (a directory holding clockd/)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--worker", metavar="WHERE", help=argparse.SUPPRESS)  # one run, in this process
    args = parser.parse_args()
    if args.worker:
        sys.path.insert(0, args.old)
        import clockd

        assert Path(clockd.__file__).resolve().is_relative_to(Path(args.old).resolve()), clockd.__file__
        print(json.dumps(asyncio.run(workload(args.worker))))
        return
    import psycopg
    from psycopg import sql

    from tests.harness.postgres import PostgresServer

    trees = {"old": args.old, "new": HERE}
    results: dict[tuple[str, str], list[dict[str, float]]] = {(k, t): [] for k in ("sqlite", "postgres") for t in trees}
    server = PostgresServer().start()
    try:
        for r in range(args.rounds):
            for kind in ("sqlite", "postgres"):
                for tree in ("old", "new") if r % 2 == 0 else ("new", "old"):
                    where = "sqlite"
                    if kind == "postgres":
                        with psycopg.connect(server.dsn(), autocommit=True) as conn:
                            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(f"ab_{tree}_{r}")))
                        where = server.dsn(f"ab_{tree}_{r}")
                    argv = [sys.executable, "-m", "bench.store_ab", trees[tree], "--worker", where]
                    ran = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=HERE)
                    results[(kind, tree)].append(json.loads(ran.stdout))
    finally:
        server.stop()
    for kind in ("sqlite", "postgres"):
        print(f"\n| phase ({kind}, {args.rounds} rounds) | old median | new median | new/old | old min | new min |")
        print("|---|---|---|---|---|---|")
        for phase in PHASES:
            old = [run[phase] for run in results[(kind, "old")]]
            new = [run[phase] for run in results[(kind, "new")]]
            ratio = statistics.median(new) / statistics.median(old)
            print(f"| {phase} | {statistics.median(old):.3f} | {statistics.median(new):.3f} | {ratio:.2f} "
                  f"| {min(old):.3f} | {min(new):.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
