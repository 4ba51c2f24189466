"""``clockctl version``: the release, the commit and the IANA zone data in use."""

from __future__ import annotations

import typer

from clockctl.output import console
from clockd.buildinfo import describe


def register(app: typer.Typer) -> None:
    @app.command("version")
    def version() -> None:
        """Print the clockctl version, the git commit it was built from and the IANA time zone release in use."""
        console.print(describe("clockctl"))
