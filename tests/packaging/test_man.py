"""Man pages: every clockctl command and option, every clockd flag and every config key is documented."""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import click
import pytest
import typer.main

from clockctl.app import app
from clockd.config import Settings
from clockd.daemon.main import build_parser

MAN = Path(__file__).resolve().parents[2] / "man"


def _text(page: str) -> str:
    # roff escapes: "\-" is a hyphen in the source.
    return (MAN / page).read_text().replace("\\-", "-")


def _commands() -> list[tuple[str, click.Command]]:
    root = typer.main.get_command(app)
    out: list[tuple[str, click.Command]] = []
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]  # a TyperGroup
        if hasattr(cmd, "commands"):
            out.extend((f"{name} {sub}", subcmd) for sub, subcmd in cmd.commands.items())
        out.append((name, cmd))
    return out


def test_every_clockctl_command_and_option_is_in_clockctl_1() -> None:
    page = _text("clockctl.1")
    missing = []
    for name, cmd in _commands():
        if not re.search(rf"\b{re.escape(name)}\b", page):
            missing.append(f"command {name}")
        for param in cmd.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--") and opt != "--help" and opt not in page:
                    missing.append(f"{name} {opt}")
    assert missing == []


def test_every_clockd_flag_is_in_clockd_8() -> None:
    page = _text("clockd.8")
    parser = build_parser()
    missing = []
    assert parser._subparsers is not None
    verbs = parser._subparsers._group_actions[0]
    assert isinstance(verbs, argparse._SubParsersAction)
    for action in verbs.choices.values():
        for sub in action._actions:
            for opt in sub.option_strings:
                if opt.startswith("--") and opt != "--help" and opt not in page:
                    missing.append(opt)
    assert sorted(set(missing)) == []


def test_every_config_key_is_in_clockd_yaml_5() -> None:
    page = _text("clockd.yaml.5")
    keys = [f.name for f in dataclasses.fields(Settings)]
    assert [k for k in keys if f".B {k}\n" not in page] == []


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
@pytest.mark.parametrize("page", sorted(p.name for p in MAN.glob("*.[158]")))
def test_pages_render_without_warnings(page: str) -> None:
    result = subprocess.run(["groff", "-man", "-ww", "-z", str(MAN / page)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == ""


def test_every_schedule_file_field_is_in_clockd_schedules_5() -> None:
    from clockd.formats.schedfile import FIELDS

    page = _text("clockd-schedules.5")
    assert [f.name for f in FIELDS if f".B {f.name}\n" not in page] == []
