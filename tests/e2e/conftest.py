"""Real ``clockd`` processes on a temporary ``CLOCKD_HOME``, driven with real ``clockctl``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

BIN = Path(sys.executable).parent
T = TypeVar("T")


def wait_for(
    what: str, probe: Callable[[], T | Literal[False] | None], timeout: float = 20.0, every: float = 0.05
) -> T:
    """Poll ``probe`` until it returns something truthy, or fail saying what never happened.
    (``probe`` may be ``cond and value``: its ``False`` is not what it waits for.)"""
    deadline = time.monotonic() + timeout
    last: T | Literal[False] | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def api_url_in(text: str) -> str | None:
    """The loopback URL of the last ``api listening on …`` line in ``text`` (a log, or one
    line's message), or None: how a test started with ``--api-addr 127.0.0.1:0`` learns
    the port clockd bound."""
    found = re.findall(r"api listening on (http://127\.0\.0\.1:\d+)", text)
    return str(found[-1]) if found else None


class Clockd:
    """One clockd process plus clockctl against the same CLOCKD_HOME."""

    def __init__(self, home: Path, extra_env: dict[str, str] | None = None) -> None:
        self.home = home
        self.env = {
            **os.environ,
            "CLOCKD_HOME": str(home),
            "CLOCKD_METRICS_ADDR": "off",
            "CLOCKD_API_ADDR": "127.0.0.1:0",
            "CLOCKD_LOG_FORMAT": "json",
            # The tests' HTTP servers listen on loopback, which the egress policy denies
            # by default (clockd's own PostgreSQL and etcd stay denied by address and port).
            "CLOCKD_HTTP_ALLOW": "*=127.0.0.1",
            **(extra_env or {}),
        }
        self.env.pop("CLOCKD_STORE", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = home / "clockd.log"

    @property
    def metrics_port(self) -> int:
        """The port clockd's metrics server bound, from its ``metrics_listening`` line (the
        last start's). Tests give ``CLOCKD_METRICS_ADDR=127.0.0.1:0`` and read it here after
        the start: a port picked before clockd binds it (``free_port``) can be taken by
        another test's server meanwhile, and clockd then exits saying it is in use."""
        found = re.findall(r'"msg": "metrics on http://127\.0\.0\.1:(\d+)/metrics"', self.log())
        assert found, f"clockd logged no loopback metrics address:\n{self.log()[-2000:]}"
        return int(found[-1])

    def api_url(self, within: float = 30) -> str:
        """The URL clockd's API serves, from its last ``api_listening`` line (waited for up
        to ``within`` s). Tests give ``--api-addr 127.0.0.1:0`` (the default here) and read
        it here, for the reason ``metrics_port`` gives."""
        return wait_for("the api to listen", lambda: api_url_in(self.log()), within)

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [str(BIN / "clockd"), "run", *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for("clockd to start", lambda: '"action": "started"' in self.log() or self.proc_exited(), 20)
        assert self.proc.poll() is None, f"clockd exited early:\n{self.log()}"
        return self.proc

    def proc_exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL clockd itself (not its jobs' process groups: they are separate sessions)."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self, timeout: float = 60) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(BIN / "clockctl"), *args], env=self.env, capture_output=True, text=True, timeout=60
        )
        if check and result.returncode != 0:
            raise AssertionError(f"clockctl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result

    def ctl_json(self, *args: str) -> Any:
        """Run clockctl with ``-o json`` (placed before a ``--`` command separator)."""
        cut = args.index("--") if "--" in args else len(args)
        return json.loads(self.ctl(*args[:cut], "-o", "json", *args[cut:]).stdout)

    def runs(self, name: str) -> list[dict[str, Any]]:
        docs: list[dict[str, Any]] = self.ctl_json("runs", name, "-n", "100")
        return docs


@pytest.fixture
def clockd(tmp_path: Path) -> Iterator[Clockd]:
    daemon = Clockd(tmp_path / "home")
    daemon.home.mkdir()
    yield daemon
    daemon.stop(timeout=30)
