"""Process runner: runs a ``CommandTarget`` as a local process (the ``Runner`` port's adapter).

What a job gets, and why:

* **No shell unless asked.** ``argv`` goes to ``execve`` as it is, never re-split.
  ``shell=True`` runs ``/bin/sh -c argv[0]``; any further items become the shell's
  ``$0``, ``$1``, … (what ``subprocess`` does with ``shell=True`` and a sequence).
  Without a ``/``, ``argv[0]`` is looked up on the job's own ``PATH``.
* **Environment**: the daemon's ``os.environ`` (read at each run), then the target's
  ``env`` on top, then ``CLOCKD_OCCURRENCE_ID``, ``CLOCKD_SCHEDULE`` (the schedule's
  name), ``CLOCKD_SCHEDULED_FOR`` (ISO 8601 in UTC, ending in ``Z``) and
  ``CLOCKD_ATTEMPT`` (1-based) on top of that, so a schedule cannot spoof them.
  Inheriting the daemon's environment is cron-like (``PATH``, ``LANG``, ``TZ`` come
  from the unit file); the price is that anything secret in the daemon's
  environment is visible to every job, so keep secrets in files.
* **stdin** is ``/dev/null``; stdout and stderr share one pipe (interleaved as
  written). The pipe is read by protocol callbacks as data arrives, never paused,
  so a job flooding its output never blocks on a full pipe; only the last
  ``output_limit`` bytes are kept, and a truncated tail starts with a
  ``[clockd: N earlier bytes dropped]`` line. Decoding is UTF-8 with
  ``errors="replace"``.
* **Its own session and process group** (``start_new_session=True``): timeout,
  ``stop`` and cancellation signal the whole group with ``killpg``, so grandchildren
  die too. Termination is SIGTERM to the group, up to ``kill_grace`` for the main
  process *and* the rest of the group to go (zombies awaiting their reaper do not
  count), then SIGKILL to whatever is left. A process that leaves the group on
  purpose (``setsid``) escapes; only a cgroup catches that. If ``stop`` is already
  set when ``run()`` is called, nothing is started (``STOPPED``).
* **The main process's exit ends the run.** Processes it leaves behind in the
  background are *not* killed (cron semantics); their output is read for at most
  ``drain_timeout`` after the exit, then the pipe is closed. The same bound applies
  after a kill, so a pipe held by an escaped process never hangs the runner.
* **Could not start** (executable, interpreter or working directory missing,
  permission denied, bad argument): outcome ``ERROR``; ``permanent`` unless the
  cause is a passing shortage (``EAGAIN``, ``ENOMEM``, ``EMFILE``, ``ENFILE``,
  ``ETXTBSY``), which a retry may fix.
* **Cancelling** ``run()`` (even while the process is being started) SIGKILLs the
  process group and waits (bounded) for the reap before ``CancelledError``
  propagates: an abandoned run must not leave a job running unaccounted for.

Mechanism: ``loop.subprocess_exec`` with a small ``SubprocessProtocol`` — the same
machinery as ``asyncio.create_subprocess_exec``, without its ``StreamReader``. Two
reasons: on Python 3.11, ``Process.wait()`` only returns once the pipes are closed
too (a grandchild holding stdout would hang it), while ``process_exited`` tells us
when the main process is gone; and appending to the ring in the callback needs no
reader task per job. ``Popen`` starts the child with vfork/exec in C, so no Python
runs in a forked copy of the daemon (``os.fork`` is unsafe with gRPC channels open).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import time
from datetime import UTC, datetime
from subprocess import DEVNULL, PIPE, STDOUT
from typing import Any

from clockd.core.model import AttemptOutcome, CommandTarget, NoopTarget
from clockd.runner import RunRequest, RunResult

log = logging.getLogger(__name__)

SHELL = "/bin/sh"

# errnos of a failed start that a later attempt may not hit again.
_TRANSIENT_START_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.ETXTBSY})
# After SIGKILL the main process should be reaped at once; a process stuck in the
# kernel (uninterruptible sleep) must still not hold the worker forever.
_REAP_BOUND = 5.0
# Polling the process group during the grace: first and largest interval.
_POLL_MIN, _POLL_MAX = 0.01, 0.1


class ProcessRunner:
    """Runs ``CommandTarget``\\ s as local processes; ``NoopTarget`` succeeds at once.

    ``drain_timeout``: how long output is still read after the main process has
    exited or been killed, for pipes kept open by processes it left behind.
    One instance serves any number of concurrent runs; it holds no per-run state.
    """

    def __init__(self, *, drain_timeout: float = 1.0) -> None:
        self._drain_timeout = drain_timeout

    async def run(self, request: RunRequest, stop: asyncio.Event) -> RunResult:
        target = request.target
        if isinstance(target, NoopTarget):
            return RunResult(AttemptOutcome.SUCCEEDED)
        if stop.is_set():
            return RunResult(AttemptOutcome.STOPPED, error="stopped before start")
        return await self._run_command(request, target, stop)

    async def _run_command(self, request: RunRequest, target: CommandTarget, stop: asyncio.Event) -> RunResult:
        started = time.monotonic()
        if not target.argv:
            return _cannot_start("command has an empty argv", started)
        argv = [SHELL, "-c", *target.argv] if target.shell else list(target.argv)
        loop = asyncio.get_running_loop()
        capture = _Capture(loop, request.output_limit)
        spawn = asyncio.ensure_future(
            loop.subprocess_exec(
                lambda: capture,
                *argv,
                stdin=DEVNULL,
                stdout=PIPE,
                stderr=STDOUT,
                cwd=target.cwd,
                env=_environment(request, target),
                start_new_session=True,
            )
        )
        try:
            # Shielded: cancelled mid-start, asyncio would kill only the leader and
            # leave whatever it had already started running.
            transport, _ = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            await _abandon_start(spawn, capture)
            raise
        except OSError as exc:
            return _start_failed(exc, argv[0], target.cwd, started)
        except ValueError as exc:  # NUL byte in an argument, "=" in an env name, …
            return _cannot_start(f"cannot start {argv[0]}: {exc}", started)

        pgid = transport.get_pid()  # leader of its own session: pgid == pid
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
            try:
                await asyncio.wait(
                    first,
                    timeout=request.timeout,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                stop_wait.cancel()

            if not capture.exited.done():
                if stop.is_set():
                    outcome, error = AttemptOutcome.STOPPED, "stopped"
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
                await _terminate(pgid, capture, request.kill_grace)

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
                # Reaped before we give up: when the caller moves on, the job is over.
                await _wait_done(capture.exited, _REAP_BOUND)
            raise
        finally:
            transport.close()

        returncode = transport.get_returncode()
        exit_code, sig = _status(returncode)
        if outcome is None:
            if returncode == 0:
                outcome = AttemptOutcome.SUCCEEDED
            else:
                outcome = AttemptOutcome.FAILED
                error = f"killed by {_signame(sig)}" if sig is not None else f"exit code {exit_code}"
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
            output=capture.output(),
            error=error,
            duration=duration,
        )


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


async def _terminate(pgid: int, capture: _Capture, grace: float) -> None:
    """SIGTERM the group; after ``grace`` (or as soon as all of it is gone) SIGKILL it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    _killpg(pgid, signal.SIGTERM)
    await _wait_done(capture.exited, grace)
    # The main process may be gone while grandchildren still run (or ignore TERM).
    interval = _POLL_MIN
    while _group_alive(pgid) and (remaining := deadline - loop.time()) > 0:
        await asyncio.sleep(min(interval, remaining))
        interval = min(interval * 2, _POLL_MAX)
    if _group_alive(pgid):
        log.warning(
            "process group %d outlived SIGTERM by %gs: SIGKILL",
            pgid,
            grace,
            extra={"action": "runner_kill", "pid": pgid},
        )
        _killpg(pgid, signal.SIGKILL)
    await _wait_done(capture.exited, _REAP_BOUND)


async def _abandon_start(
    spawn: asyncio.Future[tuple[asyncio.SubprocessTransport, _Capture]], capture: _Capture
) -> None:
    """The run was cancelled while starting: kill what was started, group and all."""
    try:
        transport, _ = await spawn
    except Exception:
        return  # nothing was started
    try:
        _killpg(transport.get_pid(), signal.SIGKILL)
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


def _environment(request: RunRequest, target: CommandTarget) -> dict[str, str]:
    env = dict(os.environ)
    env.update(target.env)
    env["CLOCKD_OCCURRENCE_ID"] = request.occurrence_id
    env["CLOCKD_SCHEDULE"] = request.schedule_name
    env["CLOCKD_SCHEDULED_FOR"] = _iso_utc(request.scheduled_for)
    env["CLOCKD_ATTEMPT"] = str(request.attempt)
    return env


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


def _start_failed(exc: OSError, executable: str, cwd: str | None, started: float) -> RunResult:
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
