"""Real ``clockd run --mode …`` processes for the distributed benchmarks, and what the
kernel says about them (CPU time and resident memory from ``/proc``).

Every process is started in its own session and stopped by PID (SIGTERM, then SIGKILL)
in ``stop()``, which ``Cluster`` calls from ``__exit__`` also when a scenario fails.
With ``BENCH_PROFILE=DIR`` each process is sampled by ``py-spy record`` (raw folded
stacks in ``DIR/<scenario>-<process>.txt``) while it runs. ``BENCH_CLOCKD=PATH`` runs
another ``clockd`` executable (an installed release, a patched build) instead of the
venv's; ``BENCH_KEEP_LOGS=1`` keeps every process's JSON log.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.servers import cpu_seconds as cpu_seconds  # re-exported: bench.api reads CPU through it
from bench.servers import log

BIN = Path(sys.executable).parent


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a live process, in KiB: resident now and its peak."""
    rss = hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


@dataclass
class Proc:
    name: str
    modes: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    profiler: subprocess.Popen[bytes] | None = None
    peak_kib: int = 0
    last_cpu: float = 0.0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def actions(self, action: str) -> int:
        count = 0
        with contextlib.suppress(FileNotFoundError), self.log_path.open(errors="replace") as f:
            for line in f:
                if f'"{action}"' not in line:
                    continue
                with contextlib.suppress(json.JSONDecodeError):
                    if json.loads(line).get("action") == action:
                        count += 1
        return count

    def sample(self) -> None:
        """Remember CPU time and peak RSS while the process lives (read before stopping it)."""
        if not self.alive():
            return
        with contextlib.suppress(OSError, ValueError):
            self.last_cpu = cpu_seconds(self.pid)
            self.peak_kib = max(self.peak_kib, memory_kib(self.pid)[1])

    def cpu(self) -> float:
        self.sample()
        return self.last_cpu

    def tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass
class Cluster:
    """clockd processes of one scenario, on one database and one etcd cluster name."""

    dsn: str
    etcd: list[str]
    label: str
    common: tuple[str, ...] = ()
    procs: dict[str, Proc] = field(default_factory=dict)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="clockd-bench-")))

    def __post_init__(self) -> None:
        self._stopping = False
        self.cluster_name = f"bench-{self.label}-{os.getpid()}-{int(time.time() * 1000) % 100000}"

    @property
    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "CLOCKD_METRICS_ADDR": "off",
            "CLOCKD_API_ADDR": "127.0.0.1:0",  # an ephemeral port: processes never collide
            "CLOCKD_LOG_FORMAT": "json",
            "CLOCKD_STORE": self.dsn,
        }
        env.pop("CLOCKD_CONFIG", None)
        env["CLOCKD_HOME"] = str(self.workdir)
        return env

    def migrate(self) -> None:
        subprocess.run(
            [os.environ.get("BENCH_CLOCKD") or str(BIN / "clockd"), "migrate"],
            env=self.env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def spawn(self, name: str, modes: str, *extra: str, env: dict[str, str] | None = None) -> Proc:
        log_path = self.workdir / f"{name}.log"
        argv = [
            os.environ.get("BENCH_CLOCKD") or str(BIN / "clockd"), "run", "--mode", modes,
            "--etcd", ",".join(self.etcd), "--cluster", self.cluster_name, "--node-id", name, "--log-level", "info",
            *self.common, *extra,
        ]  # fmt: skip
        popen = subprocess.Popen(
            argv,
            # PGAPPNAME: pg_stat_activity names each process's connections (the server CPU
            # by process the sustained run logs).
            env={**self.env, "PGAPPNAME": f"bench-{name}", **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc = Proc(name, modes, popen, log_path)
        self.procs[name] = proc
        return proc

    def wait_ready(self, timeout: float = 60.0, shards: int = 64) -> float:
        """Until every process logged ``started`` and the materializers hold ``shards``
        shards between them (and a leader is elected, if one was asked for). Returns the
        seconds it took."""
        began = time.monotonic()
        deadline = began + timeout
        while True:
            dead = [p for p in self.procs.values() if not p.alive()]
            if dead:
                raise RuntimeError(f"clockd {dead[0].name} exited {dead[0].popen.returncode}:\n{dead[0].tail()}")
            started = all(p.actions("started") for p in self.procs.values())
            held = sum(p.actions("shard_acquired") - p.actions("shard_released")
                       for p in self.procs.values() if "materializer" in p.modes)  # fmt: skip
            wants_leader = any("leader" in p.modes for p in self.procs.values())
            leader = not wants_leader or any(p.actions("leadership_acquired") for p in self.procs.values())
            wants_shards = any("materializer" in p.modes for p in self.procs.values())
            if started and leader and (not wants_shards or held >= shards):
                return time.monotonic() - began
            if time.monotonic() > deadline:
                state = {p.name: (p.actions("started"), p.actions("shard_acquired")) for p in self.procs.values()}
                raise RuntimeError(f"clockd processes not ready after {timeout:.0f}s: {state}")
            time.sleep(0.1)

    def profile(self, directory: str) -> None:
        """Attach ``py-spy record`` to every process (raw folded stacks), if py-spy exists."""
        spy = shutil.which("py-spy") or str(BIN / "py-spy")
        if not os.path.exists(spy):
            log("BENCH_PROFILE set but py-spy is not installed (.venv/bin/pip install py-spy)")
            return
        Path(directory).mkdir(parents=True, exist_ok=True)
        for proc in self.procs.values():
            out = Path(directory) / f"{self.label}-{proc.name}.txt"
            proc.profiler = subprocess.Popen(
                [spy, "record", "--format", "raw", "--rate", "50", "--nonblocking", "-o", str(out), "-p",
                 str(proc.pid)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip

    def sample(self, *, strict: bool = True) -> None:
        """Sample every process; a process that exited on its own fails the scenario
        (``strict``), or is only remembered (``died()``) so the others keep being measured."""
        for proc in self.procs.values():
            proc.sample()
            if strict and not proc.alive() and not self._stopping:
                raise RuntimeError(f"clockd {proc.name} exited {proc.popen.returncode}:\n{proc.tail()}")

    def died(self) -> dict[str, str]:
        """Processes that exited on their own: name → exit code and last log line."""
        return {
            p.name: f"exit {p.popen.returncode}: {p.tail(1).strip()[:160]}"
            for p in self.procs.values()
            if not p.alive() and not self._stopping
        }

    def peak_rss_mb(self) -> dict[str, float]:
        """Peak resident memory (VmHWM) of every process so far, in MB (10^6 bytes: the
        unit of issue 18's goal)."""
        for proc in self.procs.values():
            proc.sample()
        return {p.name: p.peak_kib * 1024 / 1e6 for p in self.procs.values()}

    def stop(self) -> None:
        """SIGTERM every process (by PID), wait, SIGKILL what is left; profilers too."""
        self._stopping = True
        for proc in self.procs.values():
            proc.sample()
        for proc in self.procs.values():
            if proc.alive():
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.kill()
                proc.popen.wait(10)
        for proc in self.procs.values():
            if proc.profiler is not None:
                # py-spy writes its file when the target exits; give it a moment, then stop it.
                try:
                    proc.profiler.wait(15)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        proc.profiler.send_signal(signal.SIGINT)
                    try:
                        proc.profiler.wait(10)
                    except subprocess.TimeoutExpired:
                        proc.profiler.kill()
                        proc.profiler.wait(5)

    def cleanup(self) -> None:
        if os.environ.get("BENCH_KEEP_LOGS"):
            log(f"clockd logs kept in {self.workdir}")
            return
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.stop()
        finally:
            if exc is not None:
                for proc in self.procs.values():
                    log(f"--- {proc.name} log tail ---\n{proc.tail()}")
            self.cleanup()


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (NaN when empty)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def row(
    name: str,
    value: float | int | str,
    unit: str = "",
    target: str = "",
    ok: bool | None = None,
    ratio: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A figure in the ``bench`` table format (``ratio``: to the bare-SQL figure)."""
    out: dict[str, Any] = {"name": name, "value": value, "unit": unit, "target": target, "ok": ok}
    if ratio is not None:
        out["ratio"] = ratio
    out.update(extra)
    return out
