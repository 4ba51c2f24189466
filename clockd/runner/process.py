r"""Process runner: runs a ``CommandTarget`` as a local process (the ``Runner`` port's adapter).

What a job gets, and why:

* **No shell unless asked.** ``argv`` goes to ``execve`` as it is, never re-split.
  ``shell=True`` runs ``/bin/sh -c argv[0]``; any further items become the shell's
  ``$0``, ``$1``, … (what ``subprocess`` does with ``shell=True`` and a sequence).
  Without a ``/``, ``argv[0]`` is looked up on the job's own ``PATH``.
* **Environment**: a minimal one built from the daemon's (``clockd.runner.jobenv``:
  ``PATH``, ``HOME``, ``LANG``, ``TZ`` and what ``job_env_passthrough`` lists, never
  ``CLOCKD_STORE``/``CLOCKD_ETCD``/``PG*``), then the ``env_from_file`` pairs, then
  the target's ``env`` (secret references resolved, ``clockd.runner.secrets``) on top, then
  ``CLOCKD_OCCURRENCE_ID``, ``CLOCKD_SCHEDULE`` (the schedule's name),
  ``CLOCKD_SCHEDULED_FOR`` (ISO 8601 in UTC, ending in ``Z``) and ``CLOCKD_ATTEMPT``
  (1-based) on top of that, so a schedule cannot spoof them. The secrets a job
  references are masked (``***``) in its stored output where they appear verbatim.
* **Run as a user** (``user``, optionally ``group``; ``clockd.runner.identity``):
  the job gets that user's uid, gid (or ``group``'s), supplementary groups
  (``os.getgrouplist``) through ``Popen``'s ``user``/``group``/``extra_groups``, and
  a *clean* environment: ``HOME``, ``USER``, ``LOGNAME``, ``SHELL`` from the
  password database and ``PATH=/usr/local/bin:/usr/bin:/bin``, then the
  ``env_from_file`` pairs, the target's ``env`` and the ``CLOCKD_*`` variables. Its
  working directory defaults to the user's home (``/`` if that does not exist).
  The tenant must be allowed that user (``allowed_users``), the user must exist on
  this worker, and a worker that is not root refuses to switch: all three are
  permanent ``ERROR``\ s whose message says why, never a silent run as the
  daemon's user. A job without ``user`` runs as the worker's own user, which the
  tenant must be allowed too.
* **Resource limits** (``memory_limit``, ``cpu_limit``, ``nproc_limit``): set by the
  job's first process on itself just before it execs the job (the start gate, below;
  ``clockd.runner.limits``), and (memory, nproc) on the attempt's cgroup where there
  is one.
* **stdin** is ``/dev/null`` (for a job behind the start gate, below, a pipe that
  ends at once), or a pipe fed the target's ``stdin`` text (UTF-8) and then closed (a
  job that exits without reading it is not an error); stdout and
  stderr share one pipe (interleaved as written). The pipe is read by protocol
  callbacks as data arrives, never paused, so a job flooding its output never
  blocks on a full pipe; only the last
  ``output_limit`` bytes are kept, and a truncated tail starts with a
  ``[clockd: N earlier bytes dropped]`` line. Decoding is UTF-8 with
  ``errors="replace"``.
* **Its own session and process group** (``start_new_session=True``): timeout,
  ``stop`` and cancellation signal the whole group with ``killpg``, so grandchildren
  die too. Termination is SIGTERM to the group, up to ``kill_grace`` for the main
  process *and* the rest of the group to go (zombies awaiting their reaper do not
  count), then SIGKILL to whatever is left. A process that leaves the group on
  purpose (``setsid``) escapes it — but not the attempt's **cgroup**
  (``clockd.runner.cgroups``, where the host has one): every member is signalled too,
  killed with ``cgroup.kill``, and the run returns once the group is empty. If ``stop`` is already
  set when ``run()`` is called, nothing is started (``STOPPED``).
* **The main process's exit ends the run.** Processes it leaves behind in the
  background are *not* killed (cron semantics); their output is read for at most
  ``drain_timeout`` after the exit, then the pipe is closed. The same bound applies
  after a kill, so a pipe held by an escaped process never hangs the runner.
* **Could not start** (executable, interpreter or working directory missing,
  permission denied, bad argument, user refused, secret unreadable): outcome
  ``ERROR``; ``permanent`` unless the cause is a passing shortage (``EAGAIN``,
  ``ENOMEM`` without a ``memory_limit``, ``EMFILE``, ``ENFILE``, ``ETXTBSY``), which
  a retry may fix. Messages name secret *references*, never their values.
* **Cancelling** ``run()`` (even while the process is being started) SIGKILLs the
  process group and waits (bounded) for the reap before ``CancelledError``
  propagates: an abandoned run must not leave a job running unaccounted for.

Mechanism: ``loop.subprocess_exec`` with a small ``SubprocessProtocol`` — the same
machinery as ``asyncio.create_subprocess_exec``, without its ``StreamReader``. Two
reasons: on Python 3.11, ``Process.wait()`` only returns once the pipes are closed
too (a grandchild holding stdout would hang it), while ``process_exited`` tells us
when the main process is gone; and appending to the ring in the callback needs no
reader task per job. ``Popen`` starts the child with vfork/exec in C, so no Python
runs in a forked copy of the daemon (``os.fork`` is unsafe with gRPC channels open),
and no ``preexec_fn`` is ever given: it would make CPython fork the whole daemon.
A job that needs a cgroup or resource limits starts behind a **start gate**
(``_Gate``): its first process is ``/bin/sh``, which sets the limits on itself and
waits for one line on its stdin; the daemon moves it into the job's cgroup, writes
the line, and the shell execs the job — so the job's first instruction runs inside
its group and under its limits. Only a job with a ``user``/``group`` is started with
a real fork (in C, up to exec: CPython does not vfork when it must setuid/setgid);
gRPC's fork handlers would run in those children and crashed some of them;
``clockd.coord.etcd`` switches them off. Looking up users and
reading secret files may block (NSS, slow disks), so that preparation runs in a
thread, and only for jobs that need it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from subprocess import DEVNULL, PIPE, STDOUT
from typing import Any

from clockd.core.model import AttemptOutcome, CommandTarget, NoopTarget
from clockd.runner import RunRequest, RunResult, cgroups, jobenv, limits, secrets
from clockd.runner import identity as ids
from clockd.runner.cgroups import Cgroups

log = logging.getLogger(__name__)

SHELL = "/bin/sh"

# errnos of a failed start that a later attempt may not hit again.
_TRANSIENT_START_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.ETXTBSY})
# After SIGKILL the main process should be reaped at once; a process stuck in the
# kernel (uninterruptible sleep) must still not hold the worker forever.
_REAP_BOUND = 5.0
# Polling the process group during the grace: first and largest interval.
_POLL_MIN, _POLL_MAX = 0.01, 0.1
# The longest wait between two looks at a job's CPU time (cpu_limit with a cgroup).
_CPU_POLL_MAX = 5.0
# The PATH of a job that runs as a user (a clean environment).
USER_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True, slots=True)
class _Prepared:
    env: dict[str, str]
    cwd: str | None
    spawn: dict[str, Any]  # extra Popen arguments: user, group, extra_groups
    secrets: tuple[str, ...] = ()  # resolved secret values, masked in the stored output
    rlimits: tuple[limits.Limit, ...] = ()  # the job's setrlimit calls (clockd.runner.limits)


class ProcessRunner:
    """Runs ``CommandTarget``\\ s as local processes; ``NoopTarget`` succeeds at once.

    ``drain_timeout``: how long output is still read after the main process has
    exited or been killed, for pipes kept open by processes it left behind.
    One instance serves any number of concurrent runs; it holds no per-run state.
    """

    def __init__(
        self,
        *,
        drain_timeout: float = 1.0,
        policy: ids.UserPolicy | None = None,
        environ: Mapping[str, str] | None = None,
        env_passthrough: tuple[str, ...] = (),
        cgroups: Cgroups | None = None,
    ) -> None:
        self._drain_timeout = drain_timeout
        self._policy = policy or ids.UserPolicy()
        self._environ = environ  # None: os.environ at each run
        self._passthrough = env_passthrough  # daemon variables jobs inherit (jobenv)
        self._cgroups = cgroups  # None: process groups only (see clockd.runner.cgroups)

    async def aclose(self) -> None:
        """At shutdown: remove the cgroups this runner made (waiting, bounded, for their
        last processes: ``Cgroups.close``)."""
        if self._cgroups is not None:
            await asyncio.to_thread(self._cgroups.close)

    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        target = request.target
        if isinstance(target, NoopTarget):
            return RunResult(AttemptOutcome.SUCCEEDED)
        if not isinstance(target, CommandTarget):
            return _cannot_start(f"the process runner cannot run a {target.kind} target", time.monotonic())
        if stop.is_set():
            return RunResult(AttemptOutcome.STOPPED, error="stopped before start")
        return await self._run_command(request, target, stop)

    async def _run_command(self, request: RunRequest, target: CommandTarget, stop: asyncio.Event) -> RunResult:
        started = time.monotonic()
        if not target.argv:
            return _cannot_start("command has an empty argv", started)
        argv = [SHELL, "-c", *target.argv] if target.shell else list(target.argv)
        try:
            if _needs_thread(target):
                prepared = await asyncio.to_thread(self._prepare, request, target)
            else:
                prepared = self._prepare(request, target)
        except (ids.Refused, secrets.SecretError) as exc:
            return _cannot_start(exc.message, started)
        group = self._cgroups.create(target.memory_limit, target.nproc_limit) if self._cgroups else None
        if target.nproc_limit is not None and (group is None or "pids" not in group.limited):
            uid = prepared.spawn.get("user", os.geteuid())
            if uid == 0:  # RLIMIT_NPROC does not bind root: say so instead of pretending
                log.warning(
                    "nproc_limit %d has no effect on this job: it runs as root and no pids cgroup "
                    "controller is available here (%s)",
                    target.nproc_limit,
                    self._cgroups.support.describe() if self._cgroups else "no cgroups",
                    extra={"action": "nproc_limit_ineffective", "occurrence_id": request.occurrence_id},
                )
        try:
            return await self._spawn_and_wait(request, target, stop, argv, prepared, group, started)
        finally:
            if group is not None and self._cgroups is not None:
                self._cgroups.release(group)

    async def _spawn_and_wait(
        self,
        request: RunRequest,
        target: CommandTarget,
        stop: asyncio.Event,
        argv: list[str],
        prepared: _Prepared,
        group: cgroups.JobGroup | None,
        started: float,
    ) -> RunResult:
        loop = asyncio.get_running_loop()
        capture = _Capture(loop, request.output_limit)
        # With a cgroup, cpu_limit is the whole group's budget (watched below), not
        # RLIMIT_CPU per process.
        cpu_budget = target.cpu_limit if group is not None and group.cpu_seconds() is not None else None
        wanted = list(prepared.rlimits) if cpu_budget is None else limits.without_cpu(list(prepared.rlimits))
        # A job with a cgroup or rlimits starts behind the start gate, never with a
        # preexec_fn: see the module docstring and clockd.runner.cgroups for why.
        gate = _Gate() if group is not None or wanted else None
        if gate is not None:
            argv = gate.wrap(argv, wanted)
        spawn = asyncio.ensure_future(
            loop.subprocess_exec(
                lambda: capture,
                *argv,
                stdin=DEVNULL if target.stdin is None and gate is None else PIPE,
                stdout=PIPE,
                stderr=STDOUT,
                cwd=prepared.cwd,
                env=prepared.env,
                start_new_session=True,
                **prepared.spawn,
            )
        )
        program = argv[0] if gate is None else gate.program
        try:
            # Shielded: cancelled mid-start, asyncio would kill only the leader and
            # leave whatever it had already started running.
            transport, _ = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            await _abandon_start(spawn, capture, group)
            raise
        except OSError as exc:
            return _start_failed(exc, program, prepared.cwd, started, target.memory_limit)
        except ValueError as exc:  # NUL byte in an argument, "=" in an env name, …
            return _cannot_start(f"cannot start {program}: {exc}", started)

        pgid = transport.get_pid()  # leader of its own session: pgid == pid
        if gate is not None and group is not None:
            group.adopt(pgid)
        _feed_stdin(transport, target.stdin, gate=gate is not None)
        extra = {"occurrence_id": request.occurrence_id, "attempt": request.attempt}
        log.debug(
            "started %s as pid %d",
            target.describe(),
            pgid,
            extra={"action": "runner_start", "pid": pgid, **extra},
        )
        outcome: AttemptOutcome | None = None
        error: str | None = None
        try:
            stop_wait = loop.create_task(stop.wait())
            first: set[asyncio.Future[Any]] = {capture.exited, stop_wait}
            budget = None
            if cpu_budget is not None and group is not None:
                budget = loop.create_task(_cpu_budget(group, cpu_budget))
                first.add(budget)
            try:
                await asyncio.wait(
                    first,
                    timeout=request.timeout,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                stop_wait.cancel()
                if budget is not None:
                    budget.cancel()

            if not capture.exited.done():
                if stop.is_set():
                    outcome, error = AttemptOutcome.STOPPED, "stopped"
                elif budget is not None and budget.done() and not budget.cancelled():
                    outcome = AttemptOutcome.FAILED
                    error = (
                        f"cpu_limit {cpu_budget}s reached: the job's processes used "
                        f"{budget.result():.1f}s of CPU time together"
                    )
                else:
                    outcome = AttemptOutcome.TIMED_OUT
                    error = f"timed out after {request.timeout:g}s"
                log.info(
                    "%s pid %d: %s",
                    outcome.value,
                    pgid,
                    error,
                    extra={"action": "runner_terminate", "pid": pgid, **extra},
                )
                await _terminate(pgid, capture, request.kill_grace, group)

            await _wait_done(capture.eof, self._drain_timeout)
            if not capture.eof.done():
                log.warning(
                    "pid %d: output pipe still held after %gs, stopped reading",
                    pgid,
                    self._drain_timeout,
                    extra={"action": "runner_pipe_held", "pid": pgid, **extra},
                )
        except BaseException:
            # Cancelled (or worse): never leave the job running behind our back, nor
            # what it left behind while we were terminating it.
            if not capture.exited.done() or outcome is not None:
                _killpg(pgid, signal.SIGKILL)
                if group is not None:
                    group.kill()
                # Reaped before we give up: when the caller moves on, the job is over.
                await _wait_done(capture.exited, _REAP_BOUND)
            raise
        finally:
            transport.close()

        returncode = transport.get_returncode()
        exit_code, sig = _status(returncode)
        if gate is not None and outcome is None:
            failed = gate.exec_failure(exit_code, capture.output(), prepared.cwd)
            if failed is not None:
                return _cannot_start(failed[0], started, permanent=failed[1])
        if outcome is None:
            if returncode == 0:
                outcome = AttemptOutcome.SUCCEEDED
            else:
                outcome = AttemptOutcome.FAILED
                error = f"killed by {_signame(sig)}" if sig is not None else f"exit code {exit_code}"
                error += _limit_hint(target, sig)
        duration = time.monotonic() - started
        log.debug(
            "pid %d finished: %s",
            pgid,
            outcome.value,
            extra={
                "action": "runner_finish",
                "pid": pgid,
                "outcome": outcome.value,
                "exit_code": exit_code,
                "signal": sig,
                "duration": duration,
                **extra,
            },
        )
        return RunResult(
            outcome,
            exit_code=exit_code,
            signal=sig,
            output=secrets.scrub(capture.output(), list(prepared.secrets)),
            error=error,
            duration=duration,
        )

    def _prepare(self, request: RunRequest, target: CommandTarget) -> _Prepared:
        """Identity, policy, secrets and environment of one run (may block: NSS, files).

        Raises :class:`~clockd.runner.identity.Refused` or
        :class:`~clockd.runner.secrets.SecretError`, whose messages are safe to record."""
        if target.user:
            who = ids.job_identity(target.user, target.group)
        else:
            who = ids.worker_identity()
        self._policy.check(request.tenant, who)
        base = os.environ if self._environ is None else self._environ
        resolver = secrets.Resolver(self._policy.reader(request.tenant, who), base)
        from_file = resolver.env_file(target.env_from_file) if target.env_from_file else []
        env_values = [(key, resolver.resolve(value)) for key, value in target.env]
        env: dict[str, str]
        cwd = target.cwd
        spawn: dict[str, Any] = {}
        if target.user:
            env = {
                "HOME": who.home,
                "USER": who.name,
                "LOGNAME": who.name,
                "SHELL": who.shell,
                "PATH": USER_PATH,
            }
            if cwd is None:
                cwd = who.home if os.path.isdir(who.home) else "/"
            if who.switch:
                spawn = {"user": who.uid, "group": who.gid, "extra_groups": list(who.groups)}
        else:
            env = jobenv.base_environment(base, self._passthrough)
        env.update(from_file)
        env.update(env_values)
        env["CLOCKD_OCCURRENCE_ID"] = request.occurrence_id
        env["CLOCKD_SCHEDULE"] = request.schedule_name
        env["CLOCKD_SCHEDULED_FOR"] = _iso_utc(request.scheduled_for)
        env["CLOCKD_ATTEMPT"] = str(request.attempt)
        wanted = limits.rlimits(target.memory_limit, target.cpu_limit, target.nproc_limit)
        return _Prepared(env, cwd, spawn, tuple(resolver.values), tuple(wanted))


def _feed_stdin(transport: asyncio.SubprocessTransport, text: str | None, *, gate: bool = False) -> None:
    """Hand the job its stdin text (after the line that opens its start gate, with
    ``gate``): the transport buffers what the pipe cannot take yet and closes it after
    the last byte, so a job that never reads cannot block us."""
    if text is None and not gate:
        return
    pipe = transport.get_pipe_transport(0)
    if not isinstance(pipe, asyncio.WriteTransport):  # pragma: no cover - stdin=PIPE gives one
        return
    pipe.write((b"\n" if gate else b"") + (text or "").encode())
    pipe.write_eof()


def _needs_thread(target: CommandTarget) -> bool:
    """Does preparing this target look anything up or read any file?"""
    return bool(target.user or target.env_from_file or any("${" in v for _, v in target.env))


def _limit_hint(target: CommandTarget, sig: int | None) -> str:
    if sig == signal.SIGXCPU and target.cpu_limit is not None:
        return f" (cpu_limit {target.cpu_limit}s reached)"
    if target.memory_limit is not None and sig in (None, signal.SIGSEGV, signal.SIGABRT, signal.SIGKILL):
        return f" (runs under memory_limit {limits.format_size(target.memory_limit)})"
    return ""


class _Capture(asyncio.SubprocessProtocol):
    """Keeps the tail of the output; resolves ``exited`` and ``eof``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self._limit = max(0, limit)
        self._tail = bytearray()
        self._total = 0
        self.exited: asyncio.Future[None] = loop.create_future()
        self.eof: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        chunk = data.encode() if isinstance(data, str) else data
        self._total += len(chunk)
        if len(chunk) >= self._limit:
            self._tail[:] = memoryview(chunk)[len(chunk) - self._limit :]
            return
        self._tail += chunk
        excess = len(self._tail) - self._limit
        if excess > 0:
            del self._tail[:excess]  # cheap: CPython moves the start, not the bytes

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if not self.eof.done():
            self.eof.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def output(self) -> str:
        tail = bytes(self._tail)
        dropped = self._total - len(tail)
        if dropped == 0:
            return tail.decode("utf-8", errors="replace")
        # The cut may fall inside a character: skip its continuation bytes.
        skip = 0
        while skip < min(3, len(tail)) and 0x80 <= tail[skip] < 0xC0:
            skip += 1
        dropped += skip
        text = tail[skip:].decode("utf-8", errors="replace")
        return f"[clockd: {dropped} earlier bytes dropped]\n{text}"


async def _terminate(pgid: int, capture: _Capture, grace: float, group: cgroups.JobGroup | None = None) -> None:
    """SIGTERM the process group and every member of the job's cgroup; after ``grace``
    (or as soon as all of it is gone) SIGKILL them; with a cgroup, return once it is empty."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace

    def alive() -> bool:
        return _group_alive(pgid) or (group is not None and group.populated())

    _killpg(pgid, signal.SIGTERM)
    if group is not None:
        group.signal(signal.SIGTERM)
    await _wait_done(capture.exited, grace)
    # The main process may be gone while grandchildren still run (or ignore TERM).
    interval = _POLL_MIN
    while alive() and (remaining := deadline - loop.time()) > 0:
        await asyncio.sleep(min(interval, remaining))
        interval = min(interval * 2, _POLL_MAX)
    if alive():
        log.warning(
            "process group %d outlived SIGTERM by %gs: SIGKILL",
            pgid,
            grace,
            extra={"action": "runner_kill", "pid": pgid},
        )
        _killpg(pgid, signal.SIGKILL)
        if group is not None:
            group.kill()
    await _wait_done(capture.exited, _REAP_BOUND)
    if group is not None:
        await _until_empty(group, _REAP_BOUND)


async def _until_empty(group: cgroups.JobGroup, bound: float) -> None:
    """Wait (bounded) until no process of the cgroup runs: killed means gone."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    interval = _POLL_MIN
    while group.populated() and (remaining := deadline - loop.time()) > 0:
        await asyncio.sleep(min(interval, remaining))
        interval = min(interval * 2, _POLL_MAX)


async def _cpu_budget(group: cgroups.JobGroup, budget: int) -> float:
    """Return (the CPU seconds used) once the group's processes together used ``budget``.
    The group cannot use more than one second per CPU per second, so the next look is
    due no sooner than the remaining budget spread over every CPU."""
    cpus = os.cpu_count() or 1
    while True:
        used = group.cpu_seconds()
        if used is None:  # the group is gone: nothing left to limit
            await asyncio.Event().wait()
        elif used >= budget:
            return used
        else:
            await asyncio.sleep(min(max(_POLL_MIN, (budget - used) / cpus), _CPU_POLL_MAX))


class _Gate:
    """The start gate of a job with a cgroup or resource limits (see
    ``clockd.runner.cgroups``).

    The job's first process is ``/bin/sh``: it sets the job's rlimits on itself
    (``ulimit``: lowering one's own limits needs no privilege, unlike ``prlimit`` on a
    process of another user) and reads one line from its stdin (a pipe: the shell
    reads it byte by byte, so nothing after the newline is taken); once the daemon has
    moved it into the job's cgroup, ``_feed_stdin`` writes that line
    and the shell execs the job, whose stdin is the rest of the pipe (its
    ``stdin`` text, then end of file). End of file before the line makes the shell
    exit 125 without running anything. The shell's ``$0`` is a name made for this run,
    so a failed ``exec`` is told from the job's own exit 126/127 by the shell's message
    (``<that name>: 1: exec: …``), which nothing the job runs can know. One difference
    from a direct start: a file without ``#!`` that the kernel cannot run is run by
    ``/bin/sh`` (as ``execvp`` does) instead of failing with "Exec format error"."""

    def __init__(self) -> None:
        self.name = f"clockd-start-{os.urandom(8).hex()}"
        self.program = ""

    def wrap(self, argv: list[str], rlimits: list[limits.Limit]) -> list[str]:
        self.program = argv[0]
        script = f"{limits.ulimit_commands(rlimits)} || exit 124; " if rlimits else ""
        return [SHELL, "-c", script + 'read -r _ || exit 125; exec "$@"', self.name, *argv]

    def exec_failure(self, exit_code: int | None, output: str, cwd: str | None) -> tuple[str, bool] | None:
        """(message, permanent) if the shell could not ``exec`` the job, else None."""
        prefix = f"{self.name}: "
        if exit_code not in (124, 126, 127) or not output.startswith(prefix):
            return None
        if exit_code == 124:
            return f"cannot start {self.program}: resource limits could not be applied", True
        reason = output.rstrip("\n").rsplit(": ", 1)[-1]
        program = self.program
        if exit_code == 127:
            if os.sep in program and os.path.exists(os.path.join(cwd or "", program)):
                return f"cannot start {program}: interpreter not found", True
            return f"executable not found: {program}", True
        if reason == "Permission denied":
            return f"cannot start {program}: permission denied", True
        transient = {os.strerror(e) for e in _TRANSIENT_START_ERRNOS}
        return f"cannot start {program}: {reason}", reason not in transient


async def _abandon_start(
    spawn: asyncio.Future[tuple[asyncio.SubprocessTransport, _Capture]],
    capture: _Capture,
    group: cgroups.JobGroup | None = None,
) -> None:
    """The run was cancelled while starting: kill what was started, group and all."""
    try:
        transport, _ = await spawn
    except Exception:
        return  # nothing was started
    try:
        _killpg(transport.get_pid(), signal.SIGKILL)
        if group is not None:
            group.kill()
        await _wait_done(capture.exited, _REAP_BOUND)
    finally:
        transport.close()


async def _wait_done(fut: asyncio.Future[None], bound: float) -> None:
    """Wait for ``fut`` up to ``bound`` seconds without cancelling it."""
    if not fut.done():
        await asyncio.wait({fut}, timeout=max(0.0, bound))


def _killpg(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # the whole group is already gone
    except PermissionError:
        # A member changed its user (setuid program): nothing more we can do.
        log.warning(
            "cannot signal process group %d",
            pgid,
            extra={"action": "runner_kill_denied", "pid": pgid},
        )


def _group_alive(pgid: int) -> bool:
    """Does any member of the group still run? Zombies do not count.

    ``killpg(pgid, 0)`` also succeeds for zombies: killed grandchildren are orphans,
    and where nobody reaps orphans promptly (a container without an init) they would
    make every termination wait out the whole grace. So on Linux a positive answer is
    checked against ``/proc`` (only during a termination, so the scan is rare).
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.scandir("/proc")
    except OSError:
        return True  # no procfs: trust killpg
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue  # exited meanwhile
            # "pid (comm) state ppid pgrp …"; comm may hold spaces and parentheses.
            fields = stat[stat.rfind(b")") + 2 :].split(b" ", 3)
            if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
                return True
    return False


def _iso_utc(instant: datetime) -> str:
    if instant.tzinfo is None:  # clockd only makes aware instants; a naive one means UTC
        instant = instant.replace(tzinfo=UTC)
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _status(returncode: int | None) -> tuple[int | None, int | None]:
    """(exit_code, signal) from a Popen-style return code (negative = signal)."""
    if returncode is None:  # not reaped within _REAP_BOUND
        return None, None
    if returncode < 0:
        return None, -returncode
    return returncode, None


def _signame(sig: int | None) -> str:
    try:
        return signal.Signals(sig).name if sig is not None else "a signal"
    except ValueError:
        return f"signal {sig}"


def _start_failed(
    exc: OSError, executable: str, cwd: str | None, started: float, memory_limit: int | None = None
) -> RunResult:
    """Translate the OSError of a failed start into a precise, permanent-or-not ERROR."""
    if cwd is not None and exc.filename == cwd:  # Popen names the cwd when chdir failed
        if isinstance(exc, FileNotFoundError):
            message = f"working directory does not exist: {cwd}"
        elif isinstance(exc, NotADirectoryError):
            message = f"working directory is not a directory: {cwd}"
        elif isinstance(exc, PermissionError):
            message = f"cannot enter working directory {cwd}: permission denied"
        else:
            message = f"cannot enter working directory {cwd}: {exc.strerror}"
    elif isinstance(exc, FileNotFoundError):
        if os.sep in executable and os.path.exists(os.path.join(cwd or "", executable)):
            # The file is there, so what is missing is its #! interpreter.
            message = f"cannot start {executable}: interpreter not found"
        else:
            message = f"executable not found: {executable}"
    elif isinstance(exc, PermissionError):
        message = f"cannot start {executable}: permission denied"
    elif exc.errno == errno.ENOMEM and memory_limit is not None:
        # Deterministic: the program cannot even be loaded within its limit.
        message = f"cannot start {executable}: out of memory under memory_limit {limits.format_size(memory_limit)}"
        return _cannot_start(message, started, permanent=True)
    else:
        message = f"cannot start {executable}: {exc.strerror or exc}"
    permanent = exc.errno not in _TRANSIENT_START_ERRNOS
    return _cannot_start(message, started, permanent=permanent)


def _cannot_start(message: str, started: float, *, permanent: bool = True) -> RunResult:
    log.warning("%s", message, extra={"action": "runner_cannot_start", "permanent": permanent})
    return RunResult(
        AttemptOutcome.ERROR,
        error=message,
        duration=time.monotonic() - started,
        permanent=permanent,
    )
