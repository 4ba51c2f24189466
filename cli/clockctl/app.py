"""clockctl: add, preview, inspect and change clockd schedules.

Each command lives in ``clockctl.commands.<noun>`` and registers itself on ``app``.
Errors map to exit codes in one place (``clockctl.output.handle_errors``):
1 not found or conflict, 2 bad input, 4 store unavailable or locked, 5 etcd.
With ``--server`` (or ``CLOCKD_SERVER``, or a context) the verbs go through the HTTP
API (``clockctl.remote``) with the same output and exit codes.
"""

from __future__ import annotations

from typing import Annotated

import typer

from clockctl import context
from clockctl.commands import register_all
from clockctl.commands.version import version_text
from clockctl.output import console

app = typer.Typer(
    name="clockctl",
    help="Add, preview, inspect and change clockd schedules.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _global(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar="CLOCKD_STORE",
            metavar="URL",
            help="sqlite:///PATH or postgresql://… (default: sqlite at $CLOCKD_HOME/clockd.db)",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="print the version (as clockctl version) and exit"
        ),
    ] = False,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            metavar="URL",
            help="run through the clockd HTTP API at URL instead of the store (CLOCKD_SERVER)",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", metavar="TOKEN", help="bearer token for --server (CLOCKD_TOKEN)"),
    ] = None,
    context_name: Annotated[
        str | None,
        typer.Option(
            "--context",
            metavar="NAME",
            help="a named server and token from ~/.config/clockd/client.yaml (default: its current-context)",
        ),
    ] = None,
) -> None:
    """Add, preview, inspect and change clockd schedules."""
    context.state["store"] = store
    context.state["server"] = server
    context.state["token"] = token
    context.state["context"] = context_name


def _print_version(value: bool) -> None:
    if value:
        console.print(version_text())
        raise typer.Exit(0)


register_all(app)


def main() -> None:
    app()
