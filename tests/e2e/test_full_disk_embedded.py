"""A full disk under the embedded store (issue "Trust boundaries" 6): a small real tmpfs
(root only; unmounted in teardown), a real clockd, a real job.

* ``clockd run`` on a full disk exits 4 with a message, no traceback;
* a job that succeeded while no write could land is recorded SUCCEEDED once space
  returns (not DEAD "lease expired"), and ``/healthz`` says the store is degraded meanwhile;
* a read-only disk (issue 19, drill 4): the kernel refuses ``mount -o remount,ro`` while
  clockd holds its files open for writing, so the disk turns read-only only with clockd
  stopped. Then ``clockd run`` exits 4 naming the cause, ``clockctl`` reads, its writes
  exit 4 naming the cause, and once the disk is writable again clockd catches up on the
  runs of the read-only window (``clockctl reconcile``: all accounted for, none twice);
* a disk that turns read-only under the running clockd (ext4 ``errors=remount-ro``, an
  error triggered through sysfs): clockd lives on, ``/healthz`` and ``clockctl`` name the cause.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import now, reconcile
from tests.e2e.conftest import BIN, Clockd, wait_for
from tests.soak.checker import job_argv

pytestmark = pytest.mark.e2e
PY = sys.executable


@contextlib.contextmanager
def mounted(mountpoint: Path, *mount_args: str) -> Iterator[Path]:
    """``mount *mount_args mountpoint`` (a fresh directory), unmounted on the way out."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a file system (CI runs as root)")
    mountpoint.mkdir()
    subprocess.run(["mount", *mount_args, str(mountpoint)], check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted(tmp_path / "disk", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs") as disk:
        yield disk


def fill(disk: Path) -> Path:
    """Write a file until the disk is full; return it (delete it to free the space)."""
    filler = disk / "filler"
    # Unbuffered: the write that fails is the last one, and closing has nothing left to flush.
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def test_clockd_on_a_full_disk_exits_4_with_a_message(small_disk: Path) -> None:
    fill(small_disk)
    env = {**os.environ, "CLOCKD_HOME": str(small_disk / "home"), "CLOCKD_METRICS_ADDR": "off"}
    env.pop("CLOCKD_STORE", None)
    result = subprocess.run([str(BIN / "clockd"), "run"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("clockd: error: ") and str(small_disk / "home") in result.stderr


def health(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def degraded(port: int) -> tuple[int, dict[str, Any]] | None:
    answer = health(port)
    return answer if answer[0] == 503 else None


def healthy(port: int) -> tuple[int, dict[str, Any]] | None:
    answer = health(port)
    return answer if answer[0] == 200 else None


def recorded(daemon: Clockd, name: str) -> dict[str, Any] | None:
    runs = daemon.runs(name)
    return runs[0] if runs and runs[0]["state"] in ("SUCCEEDED", "DEAD") else None


def test_a_run_that_succeeded_while_the_disk_was_full_is_recorded_as_succeeded(
    small_disk: Path, tmp_path: Path
) -> None:
    daemon = Clockd(small_disk / "home", {"CLOCKD_METRICS_ADDR": "127.0.0.1:0"})
    daemon.log_path = tmp_path / "clockd.log"  # not on the small disk
    go = tmp_path / "go"
    started = tmp_path / "started"
    job = (
        f"import os, time; open({str(started)!r}, 'w').close()\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)"
    )
    daemon.start("--visibility-timeout", "3s", "--heartbeat", "1s")
    port = daemon.metrics_port
    filler: Path | None = None
    try:
        daemon.ctl("add", "--at", "now+1s", "--name", "during", "--retries", "0", "--", PY, "-c", job)
        wait_for("the job to start", started.exists, 30)
        filler = fill(small_disk)
        go.touch()  # the job succeeds now; its outcome cannot be written
        _, doc = wait_for("healthz to report the store degraded", lambda: degraded(port), 30)
        assert doc["store_writable"] is False and "disk full" in doc["store_error"]
        # Well past the lease: the outcome is still held, and nothing was reaped.
        wait_for("the worker to retry its write", lambda: daemon.log().count('"action": "record_failed"') >= 1, 30)
        wait_for("the lease to lapse", lambda: daemon.log().count('"action": "heartbeat_failed"') >= 4, 30)
        filler.unlink()
        filler = None
        run = wait_for("the run to be recorded", lambda: recorded(daemon, "during"), 60)
        assert run["state"] == "SUCCEEDED", run
        wait_for("healthz to recover", lambda: health(port)[0] == 200, 30)
    finally:
        if filler is not None:
            filler.unlink()
        daemon.stop()


def clockd_run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "clockd"), "run"], env=env, capture_output=True, text=True, timeout=60)


def remount(disk: Path, how: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LC_ALL": "C"}  # mount's own words, untranslated
    return subprocess.run(["mount", "-o", f"remount,{how}", str(disk)], capture_output=True, text=True, env=env)


def executions(log: Path) -> list[str]:
    """The occurrence ids the job itself logged (``job_argv``), one per execution."""
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def test_a_read_only_disk_clockctl_reads_writes_exit_4_and_clockd_catches_up(small_disk: Path, tmp_path: Path) -> None:
    daemon = Clockd(small_disk / "home")
    daemon.log_path = tmp_path / "clockd.log"  # not on the small disk
    runs = tmp_path / "runs.log"
    read_only = False
    daemon.start()
    try:
        daemon.ctl("add", "--every", "1s", "--name", "tick", "--misfire", "catch_up", "--", *job_argv(runs))
        start_at = now() + timedelta(seconds=1)
        wait_for("jobs to fire every second", lambda: len(executions(runs)) >= 2, 15)
        # Files open for writing (the database, its WAL, the lock) keep the file system
        # writable: a running clockd never has its disk turn read-only under it this way.
        refused = remount(small_disk, "ro")
        assert refused.returncode != 0 and "busy" in refused.stderr, refused
        assert daemon.stop() == 0
        assert remount(small_disk, "ro").returncode == 0
        read_only, stopped_at = True, now()

        result = clockd_run(daemon.env)
        assert result.returncode == 4, result.stderr
        assert "Read-only file system" in result.stderr and "Traceback" not in result.stderr, result.stderr
        added = daemon.ctl("add", "--every", "1m", "--name", "probe", "--noop", check=False)
        assert added.returncode == 4, added.stderr
        assert added.stderr.count("\n") == 1 and "Traceback" not in added.stderr, added.stderr
        assert "read-only (Read-only file system)" in added.stderr and "nothing was written" in added.stderr
        listed = daemon.ctl("list")  # reading verbs keep working
        assert "tick" in listed.stdout and "probe" not in listed.stdout, listed.stdout
        assert daemon.runs("tick"), "the runs before the disk turned read-only are still there"
        wait_for("a read-only window of 3 s", lambda: now() >= stopped_at + timedelta(seconds=3), 10)

        assert remount(small_disk, "rw").returncode == 0
        read_only = False
        daemon.log_path = tmp_path / "clockd-after.log"
        daemon.start()
        writable_at = now()
        daemon.ctl("add", "--every", "1m", "--name", "probe", "--noop")
        # Every instant of the window, read-only part included, ran once (catch_up) and succeeded.
        # At least 5.5 s after start_at, so the window holds 5 instants of the 1 s grid: on a
        # loaded machine `add` returned late, the read-only part started early, and the window
        # held 4 (a fresh-clone CI run failed the sanity check below that way).
        end = max(writable_at + timedelta(seconds=1), start_at + timedelta(seconds=5.5))
        wait_for("clockd to run past the window", lambda: now() >= end + timedelta(seconds=2), 10)
        report = wait_for("the window to be accounted for", lambda: _reconciled(daemon, start_at, end), 15, 0.5)
        assert report["expected"] >= 5, report
        doubled = [occ for occ, n in Counter(executions(runs)).items() if n > 1]
        assert doubled == [], f"occurrences that ran twice: {doubled}"
    finally:
        if read_only:
            remount(small_disk, "rw")
        daemon.stop()


def _reconciled(daemon: Clockd, start: datetime, end: datetime) -> dict[str, int] | None:
    try:
        return reconcile(daemon.env, start, end)
    except AssertionError:
        return None


def failed_claims(daemon: Clockd) -> list[str]:
    """The worker's claims that failed naming the read-only file system (it retries them)."""
    return [
        line
        for line in daemon.log().splitlines()
        if '"action": "claim_failed"' in line and "Read-only file system" in line
    ]


@contextlib.contextmanager
def clockd_on_ext4(image: Path, tmp_path: Path) -> Iterator[tuple[Clockd, Callable[[str], None]]]:
    """``image`` mounted ``errors=remount-ro`` and a clockd (metrics on) whose home is on
    it, its log beside, not on it; and the trigger of an ext4 error (with a message), which
    turns that disk read-only under the clockd. The clockd is killed on the way out, not
    stopped: a stopping worker that holds outcomes retries recording them for ~30 s (it
    may, the disk may come back), longer than these drills."""
    mountpoint = tmp_path / "disk"
    with mounted(mountpoint, "-o", "loop,errors=remount-ro", str(image)):
        device = Path(subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(mountpoint)], capture_output=True,
                                     text=True, check=True).stdout.strip()).name  # fmt: skip
        daemon = Clockd(mountpoint / "home", {"CLOCKD_METRICS_ADDR": "127.0.0.1:0"})
        daemon.log_path = tmp_path / "clockd.log"  # not on the disk that turns read-only
        daemon.start()

        def fs_error(message: str) -> None:
            Path(f"/sys/fs/ext4/{device}/trigger_fs_error").write_text(message)

        try:
            yield daemon, fs_error
        finally:
            if daemon.proc is not None and daemon.proc.poll() is None:
                daemon.kill()


@pytest.fixture
def ext4_image(tmp_path: Path) -> Path:
    """A 32 MiB ext4 file system in a file (mounted over a loop device by the drill)."""
    if shutil.which("mkfs.ext4") is None or not Path("/dev/loop-control").exists():
        pytest.skip("needs mkfs.ext4 and loop devices")
    image = tmp_path / "disk.img"
    with image.open("wb") as f:
        f.truncate(32 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    return image


def test_a_disk_that_turns_read_only_under_clockd_degrades_it_and_clockctl_exits_4(
    ext4_image: Path, tmp_path: Path
) -> None:
    """ext4's ``errors=remount-ro`` (Debian's default for /): an error turns the file system
    read-only under the running clockd — for good, until it is unmounted and checked, so
    coming back is the other drill's (clockd stopped, the disk writable again)."""
    runs = tmp_path / "runs.log"
    with clockd_on_ext4(ext4_image, tmp_path) as (daemon, fs_error):
        port = daemon.metrics_port
        daemon.ctl("add", "--every", "1s", "--name", "tick", "--", *job_argv(runs))
        wait_for("jobs to fire every second", lambda: len(executions(runs)) >= 2, 15)
        fs_error("clockd read-only disk drill")
        _, doc = wait_for("healthz to report the store not writable", lambda: degraded(port), 15)
        assert doc["store_writable"] is False and "Read-only file system" in doc["store_error"], doc
        wait_for("the worker to log and retry", lambda: len(failed_claims(daemon)) >= 2, 10)
        added = daemon.ctl("add", "--every", "1m", "--name", "probe", "--noop", check=False)
        assert added.returncode == 4, added.stderr
        assert added.stderr.count("\n") == 1 and "Traceback" not in added.stderr, added.stderr
        assert "read-only (Read-only file system)" in added.stderr, added.stderr
        assert "tick" in daemon.ctl("list").stdout  # reading verbs keep working
        assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log()[-2000:]
        assert "Traceback" not in daemon.log()
    # Checked (the journal replayed) and mounted again: every write clockd acknowledged
    # before the error is there (the store commits with synchronous = FULL; NORMAL lost
    # the `tick` schedule added two seconds before the error).
    checked = subprocess.run(["e2fsck", "-fy", str(ext4_image)], capture_output=True, text=True)
    assert checked.returncode < 4, checked.stdout + checked.stderr  # 0-3: clean or corrected
    with mounted(tmp_path / "disk-checked", "-o", "loop", str(ext4_image)) as checked_disk:
        listed = Clockd(checked_disk / "home").ctl("list", "-o", "json")
        assert [s["name"] for s in json.loads(listed.stdout)] == ["tick"], listed.stdout


def test_an_idle_clockd_on_a_disk_turned_read_only_says_so_on_healthz(ext4_image: Path, tmp_path: Path) -> None:
    """Nothing scheduled, so no mode writes and none can see its writes fail: ``/healthz``
    probes a write itself (before, it said ``store_writable: true`` on a read-only disk
    until some mode next wrote — never, for an idle clockd)."""
    with clockd_on_ext4(ext4_image, tmp_path) as (daemon, fs_error):
        port = daemon.metrics_port
        _, doc = wait_for("healthz to answer healthy", lambda: healthy(port), 15)
        assert doc["store_writable"] is True, doc
        fs_error("clockd idle read-only disk drill")
        _, doc = wait_for("healthz to report the store not writable", lambda: degraded(port), 15)
        assert doc["store_writable"] is False and "Read-only file system" in doc["store_error"], doc
        assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log()[-2000:]
        assert "Traceback" not in daemon.log()
