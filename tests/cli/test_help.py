"""--help names every option's value the same way: NAME, N, DURATION, table|json — never
typer's defaults (``<str>``, ``<int range>``), which preview, audit and token printed."""

from __future__ import annotations

from collections.abc import Iterator

import typer
from typer._click import core as click_core  # typer 0.28 (pinned) builds commands with its copy of click

from clockctl.app import app


def _options(command: click_core.Command, path: str) -> Iterator[tuple[str, click_core.Parameter, str]]:
    ctx = click_core.Context(command, info_name=path)
    for param in command.params:
        if param.param_type_name == "option" and not getattr(param, "is_flag", False):
            yield path, param, param.make_metavar(ctx)
    for name, sub in getattr(command, "commands", {}).items():
        yield from _options(sub, f"{path} {name}")


def test_every_option_value_has_a_named_metavar() -> None:
    found = list(_options(typer.main.get_command(app), "clockctl"))
    assert len(found) > 100  # the walk reached every verb
    unnamed = [f"{path} {'/'.join(param.opts)}: {metavar}" for path, param, metavar in found if "<" in metavar]
    assert unnamed == []
