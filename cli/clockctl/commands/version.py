"""``clockctl version``: the release and the IANA zone data in use."""

from __future__ import annotations

import typer

from clockctl.output import console
from clockd import __version__
from clockd.core.zones import tzdata_version


def register(app: typer.Typer) -> None:
    @app.command("version")
    def version() -> None:
        """Print the clockctl version and the IANA time zone release in use."""
        console.print(f"clockctl {__version__} (tzdata {tzdata_version()})")
