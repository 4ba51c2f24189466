"""The real ``clockctl`` on a fresh ``CLOCKD_HOME``, for CLI tests that need nothing more.

``store_and_api`` is the same ``ctl`` twice: on the store, and through a real clockd's
HTTP API (``--server`` by CLOCKD_SERVER / CLOCKD_TOKEN) as a new tenant with a
cluster-admin token (so ``--tenant`` works as on the store). A module opts in with::

    ctl = store_and_api  # (imported from tests.cli.conftest)

and gets one daemon for all its API runs (``api_daemon``, module scope).

``CLOCKCTL_BIN_DIR`` runs the tests against another build (e.g. ``/work/main/.venv/bin``,
to see a new test fail on the code before a fix). ``COLUMNS`` is dropped: output is
piped, as a script reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.home import existing_store

BIN = Path(os.environ.get("CLOCKCTL_BIN_DIR", Path(sys.executable).parent))


@pytest.fixture
def ctl(tmp_path: Path) -> Any:
    env = {**os.environ, "CLOCKD_HOME": str(tmp_path / "home")}
    env.pop("CLOCKD_STORE", None)
    env.pop("COLUMNS", None)
    existing_store(tmp_path / "home")  # clockd has run here: reads find an empty store

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "clockctl"), *args], env=env, capture_output=True, text=True, timeout=60)

    return run


@pytest.fixture(scope="module")
def api_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One clockd (every mode, the api on a free port) for the module's API runs; each test
    gets a token of its own new tenant, so each starts from an empty store as seen."""
    from tests.api.conftest import _wait_listening
    from tests.e2e.conftest import Clockd

    home = tmp_path_factory.mktemp("cli-api") / "home"
    home.mkdir(mode=0o700)
    daemon = Clockd(home)
    daemon.start("--api-addr", "127.0.0.1:0")  # the port it binds: from its log
    try:
        url = daemon.api_url()
        _wait_listening(url)
        yield {"CLOCKD_HOME": str(home), "CLOCKD_SERVER": url}
    finally:
        daemon.stop(timeout=30)


def serve_api(request: pytest.FixtureRequest, role: str = "cluster-admin") -> dict[str, str]:
    """The environment that sends clockctl through the module's daemon's API, as a new tenant
    (its first token made on the daemon's store, ``--store``, as an admin would)."""
    env = dict(request.getfixturevalue("api_daemon"))
    tenant = f"cli-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(
        [str(BIN / "clockctl"), "--store", "sqlite:///", "token", "create", "--tenant", tenant, "--role", role,
         "-o", "json"],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return {**env, "CLOCKD_TOKEN": json.loads(made.stdout)["token"]}


# A fixture parametrized with these runs on the store, then through the API.
STORE_AND_API = ["store", pytest.param("api", marks=pytest.mark.e2e)]


def make_ctl(
    tmp_path: Path, request: pytest.FixtureRequest, *, columns: str | None = None, cwd: Path | None = None
) -> Any:
    """``ctl(*args, **env)``: clockctl on the store (``request.param`` "store") or through
    the module's daemon's HTTP API ("api"): the same output and exit codes. ``ctl.via``
    says which; ``ctl.home`` is the store's CLOCKD_HOME."""
    env = {**os.environ, "CLOCKD_HOME": str(tmp_path / "home")}
    env.pop("CLOCKD_STORE", None)
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = columns
    existing_store(tmp_path / "home")  # clockd has run here: reads find an empty store
    if request.param == "api":
        env.update(serve_api(request))

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "clockctl"), *args], env={**env, **extra}, capture_output=True, text=True, timeout=60, cwd=cwd
        )

    run.home = tmp_path / "home"  # type: ignore[attr-defined]  # test helper attribute
    run.via = request.param  # type: ignore[attr-defined]  # test helper attribute
    return run


@pytest.fixture(params=STORE_AND_API)
def store_and_api(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """``make_ctl`` with the defaults, on the store and through the API."""
    return make_ctl(tmp_path, request)
