"""Facts packaging/*.sh need, read from the one place each lives (stdlib only: runs before any venv).

python3 packaging/meta.py version   # clockd.__version__, from clockd/__init__.py
python3 packaging/meta.py deps      # pyproject's [project] dependencies, one per line
python3 packaging/meta.py hash FILE…  # sha256 over the names and contents of FILE…
python3 packaging/meta.py depends "A (>= 1), B" "A (>= 2)"  # one Depends line, highest bound per package
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def version() -> str:
    text = (ROOT / "clockd" / "__init__.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    if found is None:
        raise SystemExit('packaging/meta.py: no __version__ = "x.y.z" line in clockd/__init__.py')
    return found.group(1)


def deps() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return list(project.get("dependencies", []))


def digest(names: list[str]) -> str:
    h = hashlib.sha256()
    for name in sorted(names):
        path = ROOT / name
        h.update(name.encode() + b"\0")
        if path.is_file():
            h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def depends(lines: list[str]) -> str:
    """Merge dpkg-shlibdeps outputs: each package once, with the highest ``>=`` bound."""
    best: dict[str, str | None] = {}
    for line in lines:
        for item in filter(None, (part.strip() for part in line.split(","))):
            found = re.fullmatch(r"(\S+)(?: \(>= ([^)]+)\))?", item)
            if found is None:
                raise SystemExit(f"packaging/meta.py: cannot merge the dependency {item!r}")
            name, bound = found.group(1), found.group(2)
            old = best.get(name)
            if name not in best or (bound is not None and (old is None or _newer(bound, old))):
                best[name] = bound
    return ", ".join(name if bound is None else f"{name} (>= {bound})" for name, bound in sorted(best.items()))


def _newer(a: str, b: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", a, "gt", b], check=False).returncode == 0


def main(argv: list[str]) -> None:
    if argv[:1] == ["version"]:
        sys.stdout.write(version() + "\n")
    elif argv[:1] == ["deps"]:
        sys.stdout.write("".join(d + "\n" for d in deps()))
    elif argv[:1] == ["depends"]:
        sys.stdout.write(depends(argv[1:]) + "\n")
    elif argv[:1] == ["hash"]:
        sys.stdout.write(digest(argv[1:]) + "\n")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
