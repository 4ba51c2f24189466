"""``clockctl version`` (and ``clockctl --version``): the release, the commit and the IANA zone data in use."""

from __future__ import annotations

from typing import Annotated

import typer

from clockctl.output import OutputFormat, console, emit_json

# buildinfo (importlib.metadata, git) and the zone data are read by the verb only: every
# clockctl call imports this module to register it (start-up).


def version_text() -> str:
    from clockd.buildinfo import describe

    return describe("clockctl")


def register(app: typer.Typer) -> None:
    @app.command("version")
    def version(
        output: Annotated[
            OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")
        ] = OutputFormat.table,
    ) -> None:
        """Print the clockctl version, the git commit it was built from and the IANA time zone release in use.

        JSON (-o json): {"clockctl": "0.1.0", "commit": "0123456789ab", "tzdata": "2026a"}."""
        if output is OutputFormat.json:
            from clockd import __version__
            from clockd.buildinfo import commit
            from clockd.core.zones import tzdata_version

            emit_json({"clockctl": __version__, "commit": commit(), "tzdata": tzdata_version()})
            return
        console.print(version_text())
