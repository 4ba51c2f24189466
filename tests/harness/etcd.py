"""Throwaway etcd servers for tests: one node (``EtcdServer``) or a 3-node cluster
(``EtcdCluster``), on free loopback ports with fresh data directories.

Failure drills act on the real process: ``kill()`` (SIGKILL, data kept), ``restart()``,
``freeze()``/``thaw()`` (SIGSTOP/SIGCONT), ``stop()`` (SIGTERM, data removed).
Command lines follow notes/etcd.md §1.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO

from .procs import (
    find_binary,
    free_port,
    freeze_process,
    tail,
    track,
    track_dir,
    untrack,
    untrack_dir,
)

_START_ATTEMPTS = 3
_HEALTH_TIMEOUT = 20.0


class EtcdError(RuntimeError):
    pass


def _http_json(url: str, body: bytes | None = None, timeout: float = 1.0) -> object:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # loopback only
        return json.loads(resp.read())


class EtcdServer:
    """One etcd member. Alone (the default) it is a single-node cluster; ``EtcdCluster``
    builds members that share an ``initial_cluster``."""

    def __init__(
        self,
        name: str | None = None,
        *,
        binary: str | None = None,
        client_port: int | None = None,
        peer_port: int | None = None,
        initial_cluster: str | None = None,
        cluster_token: str = "clockd-test",
    ) -> None:
        path = binary or find_binary("etcd")
        if path is None:
            raise EtcdError("etcd not found on PATH (run: make servers)")
        self.binary = path
        # A unique member name lets healthy() tell our process from another etcd that
        # grabbed the port while ours was down (ports are free only at probe time).
        self.name = name or f"n0-{secrets.token_hex(4)}"
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self._fixed_ports = client_port is not None
        self.initial_cluster = initial_cluster
        self.cluster_token = cluster_token
        self.root: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.frozen = False
        self._log: IO[bytes] | None = None

    # -- addresses -----------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def endpoints(self) -> list[str]:
        return [self.endpoint]

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def data_dir(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "data"

    @property
    def logfile(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "etcd.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    # -- lifecycle -----------------------------------------------------------------------

    def spawn(self) -> None:
        """Start the process without waiting for health (a cluster spawns all members first)."""
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix=f"clockd-etcd-{self.name}-"))
            track_dir(self.root)
        if self.proc is not None and self.proc.poll() is None:
            raise EtcdError(f"etcd {self.name} already running")
        cluster = self.initial_cluster or f"{self.name}={self.peer_url}"
        argv = [
            self.binary,
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            self.endpoint,
            "--advertise-client-urls",
            self.endpoint,
            "--listen-peer-urls",
            self.peer_url,
            "--initial-advertise-peer-urls",
            self.peer_url,
            "--initial-cluster",
            cluster,
            "--initial-cluster-token",
            self.cluster_token,
            "--initial-cluster-state",
            "new",
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
            "--log-level",
            "warn",
        ]
        if self._log is None:
            self._log = open(self.logfile, "ab")  # kept open for the process' whole life
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )
        track(self.proc.pid)
        self.frozen = False

    def healthy(self) -> bool:
        """Our member answers on the client port and reports {"health":"true"}."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            listing = _http_json(f"{self.endpoint}/v3/cluster/member/list", body=b"{}", timeout=0.5)
            body = _http_json(f"{self.endpoint}/health", timeout=0.5)
        except (OSError, ValueError, urllib.error.URLError):
            return False
        if not isinstance(listing, dict) or not isinstance(body, dict):
            return False
        header = listing.get("header")
        me = header.get("member_id") if isinstance(header, dict) else None
        members = listing.get("members")
        names = (
            {m.get("ID"): m.get("name") for m in members if isinstance(m, dict)} if isinstance(members, list) else {}
        )
        return names.get(me) == self.name and body.get("health") == "true"

    def wait_healthy(self, timeout: float = _HEALTH_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.proc is not None and self.proc.poll() is not None:
                raise EtcdError(f"etcd {self.name} exited with {self.proc.returncode}\n{tail(self.logfile)}")
            if time.monotonic() >= deadline:
                raise EtcdError(f"etcd {self.name} not healthy after {timeout:.0f}s\n{tail(self.logfile)}")
            time.sleep(0.05)

    def start(self) -> EtcdServer:
        """Spawn and wait for GET /health == {"health":"true"}. A lone node whose ports were
        picked by the harness retries with fresh ports if they were taken meanwhile."""
        for attempt in range(_START_ATTEMPTS):
            self.spawn()
            try:
                self.wait_healthy()
                return self
            except EtcdError:
                self.stop()
                if self._fixed_ports or self.initial_cluster or attempt == _START_ATTEMPTS - 1:
                    raise
                self.client_port, self.peer_port = free_port(), free_port()
        raise AssertionError("unreachable")

    def kill(self) -> None:
        """SIGKILL (a crash). The data directory stays for ``restart()``."""
        self._reap(signal.SIGKILL)

    def restart(self, *, wait: bool = True) -> None:
        """Start again on the same ports and data directory (after ``kill()`` or not)."""
        if self.proc is not None and self.proc.poll() is None:
            self._reap(signal.SIGTERM)
        self.spawn()
        if wait:
            self.wait_healthy()

    def freeze(self) -> None:
        """SIGSTOP: the process holds its sockets but answers nothing (a hung server)."""
        if self.proc is not None and self.proc.poll() is None:
            self.frozen = True  # set first: _reap must SIGCONT even if the wait below fails
            freeze_process(self.proc.pid)

    def thaw(self) -> None:
        """SIGCONT after ``freeze()``."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.frozen = False

    def stop(self) -> None:
        """SIGTERM (SIGKILL after 5 s), then remove the data directory. Safe to call twice."""
        self._reap(signal.SIGTERM)
        if self._log is not None:
            self._log.close()
            self._log = None
        self._remove_root()

    def status(self) -> dict[str, object]:
        """POST /v3/maintenance/status (the gRPC gateway): member id, raft leader id, ..."""
        body = _http_json(f"{self.endpoint}/v3/maintenance/status", body=b"{}", timeout=1.0)
        if not isinstance(body, dict):
            raise EtcdError(f"unexpected status reply: {body!r}")
        return body

    def __enter__(self) -> EtcdServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals -----------------------------------------------------------------------

    def _reap(self, sig: signal.Signals) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if self.frozen:
                    os.kill(proc.pid, signal.SIGCONT)
                proc.send_signal(sig)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.frozen = False
        untrack(proc.pid)

    def _remove_root(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            untrack_dir(self.root)
            self.root = None


class EtcdCluster:
    """``size`` etcd members on 127.0.0.1. All are spawned before any is waited for, since
    none becomes healthy until a quorum exists. ``members[i]`` gives per-member control."""

    def __init__(self, size: int = 3, *, binary: str | None = None) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one member")
        self.size = size
        self.binary = binary
        self.members: list[EtcdServer] = []

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    def start(self) -> EtcdCluster:
        last: Exception | None = None
        for _ in range(_START_ATTEMPTS):
            ports = [(free_port(), free_port()) for _ in range(self.size)]
            suffix = secrets.token_hex(4)
            names = [f"c{i + 1}-{suffix}" for i in range(self.size)]
            initial = ",".join(f"{n}=http://127.0.0.1:{peer}" for n, (_, peer) in zip(names, ports, strict=True))
            token = f"clockd-test-{suffix}"
            self.members = [
                EtcdServer(
                    n,
                    binary=self.binary,
                    client_port=c,
                    peer_port=p,
                    initial_cluster=initial,
                    cluster_token=token,
                )
                for n, (c, p) in zip(names, ports, strict=True)
            ]
            try:
                for m in self.members:
                    m.spawn()
                for m in self.members:
                    m.wait_healthy()
                return self
            except EtcdError as exc:  # most likely a port was taken meanwhile
                last = exc
                self.stop()
        raise EtcdError(f"etcd cluster did not start: {last}")

    def stop(self) -> None:
        for m in self.members:
            m.stop()

    def member(self, index: int) -> EtcdServer:
        return self.members[index]

    def leader_index(self, timeout: float = 10.0) -> int:
        """Index of the current raft leader among the live members; waits for an election
        (up to ``timeout`` seconds) when there is none right now."""
        deadline = time.monotonic() + timeout
        while True:
            ids: dict[object, int] = {}
            leaders: set[object] = set()
            for i, m in enumerate(self.members):
                if m.proc is None or m.proc.poll() is not None or m.frozen:
                    continue
                try:
                    st = m.status()
                except (OSError, ValueError, EtcdError):
                    continue
                header = st.get("header")
                if isinstance(header, dict):
                    ids[header.get("member_id")] = i
                leaders.add(st.get("leader"))
            if len(leaders) == 1:
                (leader,) = leaders
                if leader in ids:
                    return ids[leader]
            if time.monotonic() >= deadline:
                raise EtcdError(f"no raft leader among the live members after {timeout:.0f}s")
            time.sleep(0.05)

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
