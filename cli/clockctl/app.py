"""clockctl: add, preview, inspect and change clockd schedules.

Each command lives in ``clockctl.commands.<noun>`` and registers itself on ``app``.
Errors map to exit codes in one place (``clockctl.output.handle_errors``):
1 not found or conflict, 2 bad input, 4 store unavailable or locked, 5 etcd.
With ``--server`` (or ``CLOCKD_SERVER``, or a context) the verbs go through the HTTP
API (``clockctl.remote``) with the same output and exit codes.

Start-up (``clockctl list`` within 0.5 s through the frozen executable, issue 20): the
command modules import what a verb needs inside the verb, and :func:`main` hands typer
only the verb the arguments name (:func:`for_verb`), so one call builds one command's
parameters instead of every command's. ``tests/cli/test_startup.py`` guards both.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from typing import Annotated

import typer
from rich.markup import escape

# typer 0.28 (pinned) parses with its own copy of click; its errors are that copy's classes.
from typer import exceptions as typer_errors
from typer._click import exceptions as click_errors
from typer.main import get_command_name, solve_typer_info_defaults

from clockctl import context
from clockctl.commands import register_all
from clockctl.commands.version import version_text
from clockctl.output import console, err_console, fail

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

# The global options that take a value (``--store URL``): what may stand between
# ``clockctl`` and its verb. A test checks this against ``_global``'s options.
VALUED_OPTIONS = frozenset({"--store", "--server", "--token", "--context"})


def verb_of(args: Sequence[str]) -> str | None:
    """The verb ``args`` name, if only global options with their values come before it
    (anything else before it — ``--help``, a typo — and the whole app answers)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            return arg
        name = arg.split("=", 1)[0]
        if name not in VALUED_OPTIONS:
            return None
        i += 1 if "=" in arg else 2
    return None


def for_verb(args: Sequence[str]) -> typer.Typer:
    """``app`` with only the command or group ``args`` name, else ``app`` itself.

    typer builds the click parameters of every registered command on each call (their
    signatures, type hints and help); the one being run is all a call needs. The copy
    keeps the global options, and the verb's own help, errors and subcommands are the
    same as in the whole app; a name ``app`` does not know gets the whole app (its
    "No such command" and suggestions)."""
    verb = verb_of(args)
    if verb is None:
        return app
    commands = [c for c in app.registered_commands if _command_name(c) == verb]
    groups = [g for g in app.registered_groups if solve_typer_info_defaults(g).name == verb]
    if not commands and not groups:
        return app
    pruned = copy.copy(app)
    pruned.registered_commands = commands
    pruned.registered_groups = groups
    return pruned


def _command_name(info: typer.models.CommandInfo) -> str | None:
    # As typer names a command (typer.main.get_command_from_info).
    if info.name:
        return info.name
    return None if info.callback is None else get_command_name(info.callback.__name__)


def main(args: list[str] | None = None) -> None:
    """The ``clockctl`` program (the console script, and ``clockd ctl``).

    click's own errors (an unknown option, a value not among an option's choices, a
    number out of range) get clockctl's one-line ``error:`` message and exit 2, as every
    other bad input does, instead of click's usage block: click runs in non-standalone
    mode and :func:`usage_error` prints what it raises."""
    argv = sys.argv[1:] if args is None else args
    command = typer.main.get_command(for_verb(argv))
    try:
        result = command.main(args=argv, prog_name="clockctl", standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:
        exc.show()  # `clockctl` or a group alone: its help, as click prints it
        sys.exit(exc.exit_code)
    except click_errors.ClickException as exc:
        sys.exit(usage_error(exc))
    except typer_errors.Abort:  # Ctrl-D at a prompt
        err_console.print("aborted")
        sys.exit(1)
    # Non-standalone click returns a typer.Exit's code, or the verb's return value (None).
    sys.exit(result if isinstance(result, int) else 0)


def usage_error(exc: click_errors.ClickException) -> int:
    """Print ``exc`` as one line on stderr, with where to read more; return its exit code
    (2 for a usage error)."""
    ctx = getattr(exc, "ctx", None)
    where = f" (see {ctx.command_path} --help)" if isinstance(exc, click_errors.UsageError) and ctx is not None else ""
    message = " ".join(exc.format_message().split())  # click wraps some messages over lines
    return fail(escape(message) + where, exc.exit_code).exit_code
