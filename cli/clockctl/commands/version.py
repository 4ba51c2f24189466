"""``clockctl version`` (and ``clockctl --version``): the release and the IANA zone data in use."""

from __future__ import annotations

from typing import Annotated

import typer

from clockctl.output import OutputFormat, console, emit_json
from clockd import __version__
from clockd.core.zones import tzdata_version


def version_text() -> str:
    return f"clockctl {__version__} (tzdata {tzdata_version()})"


def register(app: typer.Typer) -> None:
    @app.command("version")
    def version(
        output: Annotated[
            OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")
        ] = OutputFormat.table,
    ) -> None:
        """Print the clockctl version and the IANA time zone release in use.

        JSON (-o json): {"clockctl": "0.1.0", "tzdata": "2026a"}."""
        if output is OutputFormat.json:
            emit_json({"clockctl": __version__, "tzdata": tzdata_version()})
            return
        console.print(version_text())
