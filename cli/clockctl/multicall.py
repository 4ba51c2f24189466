"""One executable, two programs: ``clockd`` and ``clockctl``.

The frozen build (``packaging/``) ships a single executable; ``/usr/bin/clockctl``
is a symlink to it. This front picks the program by the name it was called by
(``argv[0]``'s basename) and turns ``clockd ctl ARGS…`` into ``clockctl ARGS…``.
It lives in clockctl because clockctl may import the daemon's package and never
the reverse (import-linter). Each branch imports only its own program, so the
daemon pays nothing for typer and the CLI nothing for the modes.
"""

from __future__ import annotations

import os
import sys


def program(argv: list[str]) -> tuple[str, list[str]]:
    """(``"clockd"`` or ``"clockctl"``, the arguments that program gets)."""
    name = os.path.basename(argv[0]) if argv else "clockd"
    if name.startswith("clockctl"):
        return "clockctl", argv[1:]
    if argv[1:2] == ["ctl"]:
        return "clockctl", argv[2:]
    return "clockd", argv[1:]


def main() -> None:
    which, args = program(sys.argv)
    if which == "clockctl":
        from clockctl.app import main as clockctl_main

        clockctl_main(args)
        return
    from clockd.daemon.main import main as clockd_main

    clockd_main(args)
