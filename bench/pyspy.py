"""Summarise ``py-spy record --format raw`` files (folded stacks) that ``--profile DIR``
leaves: the functions with the most samples, inclusive and self.

Run: ``python -m bench.pyspy DIR/drill-worker-1.txt [--top 25] [--match clockd]``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def _short(frame: str) -> str:
    """``func (path/to/file.py:123)`` → ``file.py:func``; the line is dropped so a
    function's samples add up."""
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    path = m.group("file")
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{m.group('func')}"


def _stacks(path: Path) -> list[tuple[list[str], int]]:
    """(frames outermost first, sample count) of every stack of a raw py-spy file."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = [_short(f) for f in stack.split(";") if f and not f.startswith("process ")]
        frames = [f for f in frames if not f.startswith("thread ")]
        if frames:
            out.append((frames, int(count_text)))
    return out


def share(path: Path, needles: tuple[str, ...]) -> tuple[float, int]:
    """(share of the samples whose stack has a frame containing one of ``needles``,
    number of samples)."""
    total = hit = 0
    for frames, count in _stacks(path):
        total += count
        if any(n in f for f in frames for n in needles):
            hit += count
    return (hit / total if total else float("nan")), total


def summarise(path: Path, top: int, match: str | None) -> str:
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for frames, count in _stacks(path):
        total += count
        for f in set(frames):
            inclusive[f] += count
        own[frames[-1]] += count
    out = [f"{path.name}: {total} samples"]
    out.append("  inclusive:")
    shown = 0
    for f, c in inclusive.most_common():
        if match and match not in f:
            continue
        out.append(f"    {100 * c / max(total, 1):5.1f}%  {f}")
        shown += 1
        if shown >= top:
            break
    out.append("  self:")
    for f, c in own.most_common(top):
        out.append(f"    {100 * c / max(total, 1):5.1f}%  {f}")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pyspy", description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--match", help="inclusive list: only frames containing this text")
    args = parser.parse_args()
    for path in args.files:
        sys.stdout.write(summarise(path, args.top, args.match) + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
