"""clockctl's start-up (issue 20): what ``clockctl list`` loads, and the one-verb app.

``clockctl list`` through the frozen executable must answer within 0.5 s
(``tests/packaging/test_dist.py`` times it). Most of a call is imports and typer
building commands, so the list path must load nothing that only other verbs, the HTTP
API or cluster mode need, and typer must build the one verb being run. A module that
creeps back in fails here by name, long before the timing test would notice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import cast

import click
import pytest
from typer.main import get_command
from typer.testing import CliRunner

from clockctl.app import VALUED_OPTIONS, app, for_verb, verb_of
from tests.cli.conftest import BIN
from tests.harness.home import existing_store

# What a read on the embedded store never needs: the PostgreSQL and etcd drivers, the
# HTTP client and server, the schedule-file format and its yaml, the validator's target
# checks, the daemon's modes, and the other verbs' machinery. pydantic: typer 0.29 coerced
# every option through it (60-130 ms a call); typer is pinned below that (pyproject).
HEAVY = (
    "pydantic",
    "pydantic_core",
    "psycopg",
    "psycopg_pool",
    "psycopg_binary",
    "aetcd",
    "grpc",
    "google.protobuf",
    "httpx",
    "httpcore",
    "yaml",
    "jinja2",
    "starlette",
    "uvicorn",
    "multipart",
    "python_multipart",
    "prometheus_client",
    "clockd.api",
    "clockd.client",
    "clockd.ui",
    "clockd.daemon",
    "clockd.modes",
    "clockd.coord.etcd",
    "clockd.store.postgres",
    "clockd.formats.schedfile",
    "clockd.formats.crontab",
    "clockd.runner.targets",
    "clockd.runner.process",
    "clockd.services.explain",
    "clockctl.remote",
    "rich.progress",
    "rich.live",
)

# Runs clockctl as the console script does and writes what it loaded, whatever it exits with.
PROBE = """
import json, sys
from clockctl.app import main
try:
    main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as out:
        json.dump(sorted(sys.modules), out)
"""


def _loaded(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOCKD_")}
    env.update(CLOCKD_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    modules = tmp_path / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(modules), *args], env=env, capture_output=True, text=True, timeout=60
    )
    return result, set(json.loads(modules.read_text()))


def _heavy(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_list_on_the_embedded_store_loads_none_of_the_heavy_modules(tmp_path: Path) -> None:
    home = tmp_path / "home"
    existing_store(home)
    env = {**os.environ, "CLOCKD_HOME": str(home)}
    env.pop("CLOCKD_STORE", None)
    added = subprocess.run(
        [str(BIN / "clockctl"), "add", "*/5 * * * *", "--name", "backup", "--", "/bin/true"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    listed, loaded = _loaded(tmp_path, "list")
    assert listed.returncode == 0, listed.stderr
    assert "backup" in listed.stdout and "*/5 * * * *" in listed.stdout
    assert _heavy(loaded) == []
    # The probe is honest: the store, the use cases and typer were loaded.
    assert {"clockd.store.sqlite.store", "clockd.services.ops", "typer"} <= loaded


def test_a_verb_that_needs_them_still_loads_them(tmp_path: Path) -> None:
    """The lazy imports are inside the verbs, not gone: export writes the schedule-file format."""
    existing_store(tmp_path / "home")
    exported, loaded = _loaded(tmp_path, "export")
    assert exported.returncode == 0, exported.stderr
    assert {"clockd.formats.schedfile", "yaml"} <= loaded


@pytest.mark.parametrize(
    ("args", "verb"),
    [
        (["list"], "list"),
        (["list", "-o", "json"], "list"),
        (["--store", "sqlite:///x.db", "list"], "list"),
        (["--store=sqlite:///x.db", "--context", "prod", "dlq", "list"], "dlq"),
        (["--context", "runs", "list"], "list"),  # an option's value is not the verb
        (["--help", "list"], None),  # the whole app's help
        (["--version"], None),
        (["--stor", "x", "list"], None),  # a mistyped option: the whole app says so
        (["--store"], None),
        ([], None),
    ],
)
def test_verb_of(args: list[str], verb: str | None) -> None:
    assert verb_of(args) == verb


def test_the_valued_options_are_the_global_options_that_take_a_value() -> None:
    group = get_command(app)
    valued = {
        opt
        for param in group.params
        if param.param_type_name == "option" and not getattr(param, "is_flag", False)
        for opt in param.opts
    }
    assert valued == VALUED_OPTIONS


def test_each_verb_alone_answers_as_the_whole_app() -> None:
    """Help of every command, group and subcommand is the same from the one-verb app."""
    runner = CliRunner()
    verbs = get_command(app).commands  # type: ignore[attr-defined]  # a group: the root has a callback
    assert {"list", "add", "dlq", "token", "version"} <= set(verbs)
    for name, command in verbs.items():
        pruned = for_verb([name])
        assert pruned is not app and set(cast(click.Group, get_command(pruned)).commands) == {name}  # a group, as above
        calls = [[name, "--help"]] + [[name, sub, "--help"] for sub in getattr(command, "commands", {})]
        for args in calls:
            whole = runner.invoke(app, args, prog_name="clockctl")
            alone = runner.invoke(pruned, args, prog_name="clockctl")
            assert (alone.exit_code, alone.output) == (whole.exit_code, whole.output), args
    assert for_verb(["no-such-verb"]) is app
    assert for_verb(["--help"]) is app
