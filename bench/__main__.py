"""``make bench``: run every benchmark and print one table of figures against their goals.

Each module exposes ``run(quick: bool) -> list[Figure-like dict]`` with keys
``name``, ``value``, ``unit``, ``target`` (text) and ``ok`` (bool or None).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from typing import Any

SUITES = ("bench.time_core", "bench.embedded")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="reduced scale, finishes in under 2 minutes")
    parser.add_argument("--only", action="append", help="run only these suites (e.g. embedded)")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for name in SUITES:
        short = name.rsplit(".", 1)[1]
        if args.only and short not in args.only:
            continue
        started = time.monotonic()
        print(f"== {short} ...", file=sys.stderr, flush=True)
        module = importlib.import_module(name)
        for row in module.run(args.quick):
            rows.append({"suite": short, **row})
        print(f"   {short} took {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    width = max((len(r["name"]) for r in rows), default=10)
    print(f"\n{'suite':<11} {'figure':<{width}} {'value':>14}  {'goal':<28} result")
    failed = 0
    for r in rows:
        value = r["value"]
        text = f"{value:,.1f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)
        ok = r.get("ok")
        verdict = "" if ok is None else ("PASS" if ok else "FAIL")
        failed += ok is False
        unit, goal = r.get("unit", ""), r.get("target", "")
        print(f"{r['suite']:<11} {r['name']:<{width}} {text:>10} {unit:<3}  {goal:<28} {verdict}")
    print(f"\n{failed} goal(s) missed" if failed else "\nall goals met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
