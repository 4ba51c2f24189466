"""The worker's own CPU per execution (issue 18): one worker over N due no-op occurrences.

By default the occurrences come from 200 schedules, whose definitions the worker keeps
cached; ``--schedules N`` spreads them over N (as many as the executions: a top-of-hour
burst, where every claim reads the definitions of its schedules).

Each run is a fresh process (``sys.path`` starting at its tree) against a fresh database
on a durable PostgreSQL 15 (``bench.servers``): it creates the schedules (no-op target),
materializes and relays N occurrences due two hours ago (untimed), then starts one
``Worker`` (the daemon's ``DispatchRunner``, concurrency 1,000, the daemon's claim and
flush batches) and stops it once every occurrence is recorded. The figures are the
process's CPU (``getrusage``: user + system, every thread: the driver's too) divided by
the executions, and executions per second of wall time. The database's own CPU is not
in the figure (``bench.distributed`` prints it).

The machine is shared, so only ratios taken in the same run are evidence: with
``BENCH_WORKER_AB=DIR`` (a tree holding ``clockd/``, e.g. ``git archive main | tar -x -C
DIR``) the rounds alternate between that tree and this one, and the suite prints
both medians and their ratio. ``python -m bench.worker [--old DIR] [--rounds R] [-n N]``
prints the same outside ``make bench``. With ``--profile DIR`` (``BENCH_PROFILE``) each
run is recorded by py-spy into ``DIR/worker-TREE-ROUND.txt`` (``python -m bench.pyspy``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import overlap, relayed

HERE = str(Path(__file__).resolve().parent.parent)
BIN = Path(sys.executable).parent
GOAL_US = 30.0  # the worker's share of issue 18's 60 µs per execution across all processes
SCHEDULES = 200


async def workload(dsn: str, count: int, schedules: int = SCHEDULES) -> dict[str, float]:
    """One run through whatever ``clockd`` comes first on ``sys.path``."""
    from clockd.store.postgres import PostgresStore

    store = PostgresStore(dsn)
    await store.migrate()
    await store.open()
    total = await stage(store, count, schedules)
    before = resource.getrusage(resource.RUSAGE_SELF)
    wall = await drain([store], total)
    after = resource.getrusage(resource.RUSAGE_SELF)
    await store.close()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    system = after.ru_stime - before.ru_stime
    return {"cpu_us": cpu / total * 1e6, "sys_us": system / total * 1e6, "rate": total / wall,
            "executions": float(total)}  # fmt: skip


async def stage(store: Any, count: int, schedules: int) -> int:
    """``schedules`` no-op schedules and about ``count`` of their occurrences due two hours
    ago, materialized and relayed into the queue as the daemon's materializer and relay
    write them; the number of occurrences queued (``count`` rounded up to a multiple of
    ``schedules``)."""
    from clockd.core.ids import new_schedule_id, occurrence_id
    from clockd.core.model import NoopTarget, ScheduleDef, ScheduleKind
    from clockd.store import CursorAdvance, Fence, NewOccurrence, NewSchedule

    t0 = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
    news = [
        NewSchedule(
            new_schedule_id(),
            ScheduleDef(name=f"w{i}", kind=ScheduleKind.CRON, expr="* * * * *", tz="UTC", target=NoopTarget()),
            0,
            t0,
        )
        for i in range(schedules)
    ]
    created = (await store.apply_schedules(news, [], t0)).created
    per = -(-count // schedules)
    until = t0 + timedelta(seconds=per)
    instants = [t0 + timedelta(seconds=k) for k in range(per)]
    for first in range(0, len(created), 1_000):  # a materializer's batches
        batch = created[first : first + 1_000]
        occurrences = [
            NewOccurrence(occurrence_id(s.id, 1, at), s.id, 1, at, at, "default", s.definition.tenant, 3,
                          **overlap(NewOccurrence, s))
            for s in batch
            for at in instants
        ]  # fmt: skip
        cursors = [CursorAdvance(s.id, 1, t0, until) for s in batch]
        await store.materialize(Fence("shard:0", 1), occurrences, cursors, t0)
    while relayed(await store.relay(t0 + timedelta(hours=1), 10_000, t0)):
        pass
    return per * schedules


async def drain(stores: Sequence[Any], total: int) -> float:
    """A ``Worker`` per store (the daemon's ``DispatchRunner``, concurrency 1,000, the
    daemon's claim and flush batches), all at once, over the queue until ``total``
    executions are recorded; the wall seconds it took."""
    from clockd.core.clock import SystemClock
    from clockd.modes.worker import Worker, WorkerSettings
    from clockd.wiring import make_runner

    workers = [Worker(store, make_runner(), SystemClock(), WorkerSettings(concurrency=1000)) for store in stores]
    stopping = asyncio.Event()
    started = time.perf_counter()
    tasks = {asyncio.create_task(worker.run(stopping)) for worker in workers}
    while sum(worker.completed for worker in workers) < total and not any(task.done() for task in tasks):
        await asyncio.wait(tasks, timeout=0.05)  # coarse: the poll's own CPU stays out of the figure
    stopping.set()
    await asyncio.gather(*tasks)
    return time.perf_counter() - started


def _one(tree: str, dsn: str, count: int, profile: Path | None, schedules: int = SCHEDULES) -> dict[str, float]:
    """One run of ``tree`` in a fresh process (sampled by py-spy into ``profile``)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "result.json"
        argv = [sys.executable, "-m", "bench.worker", "--child", tree, "--dsn", dsn, "-n", str(count),
                "--schedules", str(schedules), "--out", str(out)]  # fmt: skip
        if profile is not None:
            spy = BIN / "py-spy"
            argv = [str(spy), "record", "--format", "raw", "--rate", "250", "--nonblocking", "-o", str(profile), "--",
                    *argv]  # fmt: skip
        ran = subprocess.run(argv, capture_output=True, text=True, cwd=HERE)
        if ran.returncode != 0:
            raise RuntimeError(f"bench.worker run of {tree} exited {ran.returncode}:\n{ran.stderr[-2000:]}")
        result: dict[str, float] = json.loads(out.read_text())
    return result


def measure(
    trees: dict[str, str], rounds: int, count: int, profile: str | None = None, schedules: int = SCHEDULES
) -> dict[str, list[dict[str, float]]]:
    """``rounds`` runs per tree, alternating the order, each on a fresh database; with
    ``profile`` (a directory) each run is sampled into ``DIR/worker-TREE-ROUND.txt``."""
    from bench.servers import log, servers

    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with servers() as found:
        for r in range(rounds):
            names = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in names:
                dsn = found.new_database(f"worker_{name}")
                try:
                    spy = None if profile is None else Path(profile) / f"worker-{name}-{r + 1}.txt"
                    run = _one(trees[name], dsn, count, spy, schedules)
                finally:
                    found.drop_database(dsn)
                log(
                    f"round {r + 1} {name}: {run['cpu_us']:.1f} µs/execution (system {run['sys_us']:.1f}), "
                    f"{run['rate']:,.0f}/s"
                )
                results[name].append(run)
    return results


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def run(quick: bool) -> list[dict[str, Any]]:
    count, rounds = (4_000, 2) if quick else (40_000, 4)
    old = os.environ.get("BENCH_WORKER_AB")
    trees = {"this": HERE} | ({"old": old} if old else {})
    results = measure(trees, rounds, count, os.environ.get("BENCH_PROFILE"))
    cpu = _median(results["this"], "cpu_us")
    rows: list[dict[str, Any]] = [
        {"name": "worker CPU per execution", "value": cpu, "unit": "µs", "target": f"≤ {GOAL_US:.0f} µs (noop, PG)",
         "ok": cpu <= GOAL_US},
        {"name": "one worker, executions/s", "value": _median(results["this"], "rate"), "unit": "/s",
         "target": "report", "ok": None},
    ]  # fmt: skip
    if old:
        before = _median(results["old"], "cpu_us")
        rows.append({"name": "worker CPU per execution, old tree", "value": before, "unit": "µs",
                     "target": f"this/old = {cpu / before:.2f}", "ok": None})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", help="another tree (a directory holding clockd/) to alternate with")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("-n", type=int, default=40_000, help="executions per run")
    parser.add_argument(
        "--schedules",
        type=int,
        default=SCHEDULES,
        help=f"distinct schedules the executions come from (default {SCHEDULES}: their definitions stay cached; "
        "as many as -n: a top-of-hour burst, each claim reads its definition)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one run, in this process
    parser.add_argument("--profile", metavar="DIR", help="py-spy record each run into DIR")
    parser.add_argument("--dsn", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, args.child)
        import clockd

        where = Path(clockd.__file__).resolve()
        assert where.is_relative_to(Path(args.child).resolve()), where
        Path(args.out).write_text(json.dumps(asyncio.run(workload(args.dsn, args.n, args.schedules))))
        return
    trees = {"this": HERE} | ({"old": args.old} if args.old else {})
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    results = measure(trees, args.rounds, args.n, args.profile, args.schedules)
    sys.stdout.write("\n| tree | CPU µs/execution (median) | min | executions/s (median) |\n|---|---|---|---|\n")
    for name, runs in results.items():
        cpus = [r["cpu_us"] for r in runs]
        rate = _median(runs, "rate")
        sys.stdout.write(f"| {name} | {statistics.median(cpus):.1f} | {min(cpus):.1f} | {rate:,.0f} |\n")
    if args.old:
        ratio = _median(results["this"], "cpu_us") / _median(results["old"], "cpu_us")
        sys.stdout.write(f"\nthis/old CPU per execution: {ratio:.2f}\n")


if __name__ == "__main__":
    main()
