"""``make bench``: run every benchmark and print one table of figures against their goals.

Each module exposes ``run(quick: bool) -> list[Figure-like dict]`` with keys
``name``, ``value``, ``unit``, ``target`` (text) and ``ok`` (bool or None), and
optionally ``ratio``: the figure divided by the bare-SQL figure measured in the same
run on the same database (``bench.baseline``).

Options that only the distributed suite reads reach it through the environment
(``BENCH_STORE``, ``BENCH_ETCD``, ``BENCH_SCALE``, ``BENCH_PROFILE``,
``BENCH_SCENARIOS``), so ``python -m bench.distributed`` honours them too.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from typing import Any

SUITES = (
    "bench.time_core",
    "bench.embedded",
    "bench.api",
    "bench.apply",
    "bench.staging",
    "bench.occurrence_keys",
    "bench.queue_layout",
    "bench.materializer",
    "bench.worker",
    "bench.retention",
    "bench.distributed",
)


NAMES = tuple(suite.rsplit(".", 1)[1] for suite in SUITES)  # what --only takes


def chosen(only: set[str], scenarios: list[str] | None) -> set[str]:
    """The suites to run (empty: all of them). A scenario is the distributed suite's, so
    ``--scenario`` alone runs that suite only (it used to run every suite, with that
    scenario alone in the distributed one); beside an ``--only`` that leaves the
    distributed suite out it is an error (ValueError, its message for the user)."""
    unknown = sorted(only - set(NAMES))
    if unknown:  # an unknown name used to run nothing and print "all goals met"
        raise ValueError(f"no suite named {', '.join(unknown)}; the suites: {', '.join(NAMES)}")
    if scenarios and not only:
        return {"distributed"}
    if scenarios and "distributed" not in only:
        raise ValueError("--scenario picks scenarios of the distributed suite, which --only leaves out")
    return only


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="reduced scale, finishes in a few minutes")
    parser.add_argument(
        "--only",
        action="append",
        metavar="SUITE[,SUITE…]",
        help=f"run only these suites (repeatable or comma-separated): {', '.join(NAMES)}",
    )
    parser.add_argument(
        "--store",
        metavar="DSN",
        help="PostgreSQL server to use (a database is created per scenario; default: start a throwaway one)",
    )
    parser.add_argument("--etcd", metavar="URLS", help="etcd endpoints to use (default: start a throwaway one)")
    parser.add_argument(
        "--scale", type=float, metavar="F", help="multiply the distributed sizes by F (e.g. 0.1; default 1)"
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=["bare", "drill", "sustained", "knee", "scale", "commands"],
        help="run only these scenarios of the distributed suite, and without --only no other suite "
        "(the drill also runs bare)",
    )
    parser.add_argument("--profile", metavar="DIR", help="py-spy record every clockd process into DIR")
    args = parser.parse_args()
    try:
        only = chosen({name.strip() for value in args.only or () for name in value.split(",") if name.strip()},
                      args.scenario)  # fmt: skip
    except ValueError as exc:
        parser.error(str(exc))
    for key, value in (
        ("BENCH_STORE", args.store),
        ("BENCH_ETCD", args.etcd),
        ("BENCH_SCALE", None if args.scale is None else str(args.scale)),
        ("BENCH_PROFILE", args.profile),
        ("BENCH_SCENARIOS", ",".join(args.scenario) if args.scenario else None),
    ):
        if value is not None:
            os.environ[key] = value
    from bench.machine import Machine

    machine = Machine()  # the machine's speed, beside the figures (bench.machine)
    rows: list[dict[str, Any]] = []
    for name, short in zip(SUITES, NAMES, strict=True):
        if only and short not in only:
            continue
        started = time.monotonic()
        print(f"== {short} ...", file=sys.stderr, flush=True)
        module = importlib.import_module(name)
        for row in module.run(args.quick):
            rows.append({"suite": short, **row})
        print(f"   {short} took {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    rows += [{"suite": "machine", **row} for row in machine.rows()]
    width = max((len(r["name"]) for r in rows), default=10)
    print(f"\n{'suite':<11} {'figure':<{width}} {'value':>14}      {'goal':<28} {'× bare':>7}  result")
    failed = 0
    for r in rows:
        value = r["value"]
        text = f"{value:,.1f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)
        if isinstance(value, float) and abs(value) < 10:
            text = f"{value:,.3f}"
        ok = r.get("ok")
        verdict = "" if ok is None else ("PASS" if ok else "FAIL")
        failed += ok is False
        unit, goal = r.get("unit", ""), r.get("target", "")
        ratio = r.get("ratio")
        ratio_text = f"{ratio:.2f}×" if isinstance(ratio, float) and ratio == ratio else ""
        print(f"{r['suite']:<11} {r['name']:<{width}} {text:>14} {unit:<4} {goal:<28} {ratio_text:>7}  {verdict}")
    print(f"\n{failed} goal(s) missed" if failed else "\nall goals met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
