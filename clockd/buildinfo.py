"""What this clockd was built from: the release, the git commit, the IANA zone data.

The release has one home, ``clockd.__version__`` (pyproject reads it; a test
holds it equal to the top release heading of CHANGELOG.md). The commit is baked
into a frozen build as the data file ``clockd/COMMIT`` by ``packaging/build.sh``;
a source checkout asks git; anything else says ``unknown``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from clockd import __version__
from clockd.core.zones import tzdata_version

_HERE = Path(__file__).resolve().parent


def commit() -> str:
    """The short git commit (``-dirty`` when built from a modified tree), or ``unknown``."""
    baked = _HERE / "COMMIT"
    if baked.is_file():
        return baked.read_text(encoding="utf-8").strip() or "unknown"
    try:
        out = subprocess.run(
            ["git", "-C", str(_HERE), "describe", "--always", "--dirty", "--abbrev=12", "--exclude=*"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def describe(prog: str) -> str:
    """One line for ``clockd version`` and ``clockctl version``."""
    return f"{prog} {__version__} (commit {commit()}, tzdata {tzdata_version()})"
