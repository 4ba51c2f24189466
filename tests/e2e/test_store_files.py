"""The embedded store's files as a local attacker sees them (issue "Trust boundaries" 1, 5, 7;
read-only verbs never create a store).

Real ``clockd``/``clockctl`` processes; the unprivileged side runs as ``nobody`` (the tests
run as root) in a forked child that has already imported clockctl, since the venv's
interpreter lives where ``nobody`` cannot read.
"""

from __future__ import annotations

import importlib
import os
import pwd
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import BIN, Clockd, wait_for

pytestmark = pytest.mark.e2e


def env_for(home: Path) -> dict[str, str]:
    # An ephemeral API port: the default 127.0.0.1:8470 may be taken by another test's
    # clockd running at the same time (pytest-xdist), and this daemon must fail on its store.
    env = {**os.environ, "CLOCKD_HOME": str(home), "CLOCKD_METRICS_ADDR": "off", "CLOCKD_LOG_FORMAT": "json",
           "CLOCKD_API_ADDR": "127.0.0.1:0"}  # fmt: skip
    env.pop("CLOCKD_STORE", None)
    return env


def clockd_once(home: Path, *args: str, umask: int = 0o022, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``clockd run`` expected to refuse at start (exits by itself)."""
    return subprocess.run(
        [str(BIN / "clockd"), "run", *args], env=env_for(home), capture_output=True, text=True,
        timeout=timeout, umask=umask,
    )  # fmt: skip


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to plant files owned by another user (CI runs as root)")


def nobody() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


def test_under_umask_000_home_is_0700_and_every_store_file_0600(tmp_path: Path) -> None:
    home = tmp_path / "fresh" / "home"
    daemon = Clockd(home)
    daemon.home.parent.mkdir()
    log = (tmp_path / "clockd.log").open("ab")
    daemon.log_path = tmp_path / "clockd.log"
    daemon.proc = subprocess.Popen(
        [str(BIN / "clockd"), "run"], env=daemon.env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, umask=0,
    )  # fmt: skip
    try:
        wait_for("clockd to start", lambda: '"action": "started"' in daemon.log() or daemon.proc_exited(), 20)
        assert not daemon.proc_exited(), daemon.log()
        daemon.ctl("add", "--every", "1h", "--name", "x", "--", "true")  # the WAL holds a write
        assert mode(home) == 0o700
        for name in ("clockd.db", "clockd.db-wal", "clockd.db-shm", "clockd.db.lock"):
            assert (home / name).exists(), name
            assert mode(home / name) == 0o600, f"{name}: {mode(home / name):04o}"
    finally:
        daemon.stop()


def test_a_store_made_world_readable_by_an_older_clockd_is_tightened(tmp_path: Path) -> None:
    home = tmp_path / "home"
    subprocess.run([str(BIN / "clockd"), "migrate"], env=env_for(home), check=True, capture_output=True)
    (home / "clockd.db").chmod(0o644)
    result = subprocess.run([str(BIN / "clockd"), "migrate"], env=env_for(home), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert mode(home / "clockd.db") == 0o600


@pytest.mark.parametrize(
    "plant", ["home_other_writable", "home_owned_by_nobody", "db_owned_by_nobody", "wal_other_writable"]
)
def test_clockd_refuses_a_store_another_user_could_have_changed(tmp_path: Path, plant: str) -> None:
    require_root()
    home = tmp_path / "home"
    subprocess.run([str(BIN / "clockd"), "migrate"], env=env_for(home), check=True, capture_output=True)
    uid = nobody().pw_uid
    target = home
    if plant == "home_other_writable":
        home.chmod(0o777)
    elif plant == "home_owned_by_nobody":
        os.chown(home, uid, -1)
    elif plant == "db_owned_by_nobody":
        # The attack: a copy with an added job, moved over the original.
        target = home / "clockd.db"
        shutil.copy(target, home / "copy.db")
        os.chown(home / "copy.db", uid, -1)
        os.replace(home / "copy.db", target)
    else:
        target = home / "clockd.db-wal"
        target.write_bytes(b"")
        target.chmod(0o666)
    result = clockd_once(home)
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr
    assert str(target) in result.stderr
    owner = "nobody" if "nobody" in plant else "root"
    assert owner in result.stderr


def test_clockd_refuses_a_lock_file_that_is_a_symlink_and_leaves_its_target_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    subprocess.run([str(BIN / "clockd"), "migrate"], env=env_for(home), check=True, capture_output=True)
    precious = tmp_path / "shadow"
    precious.write_text("root-only contents\n")
    precious.chmod(0o600)
    (home / "clockd.db.lock").symlink_to(precious)
    result = clockd_once(home)
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr
    assert "clockd.db.lock" in result.stderr and "symlink" in result.stderr
    assert precious.read_text() == "root-only contents\n"


@pytest.mark.parametrize("content", [b"", os.urandom(4096)], ids=["empty", "garbage"])
def test_an_empty_or_damaged_store_file_is_refused_not_replaced(tmp_path: Path, content: bytes) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    db = home / "clockd.db"
    db.write_bytes(content)
    db.chmod(0o600)
    result = clockd_once(home)
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr
    assert str(db) in result.stderr
    assert db.read_bytes() == content  # nothing was written over it
    listed = subprocess.run([str(BIN / "clockctl"), "list"], env=env_for(home), capture_output=True, text=True)
    assert listed.returncode == 4 and str(db) in listed.stderr


def test_a_store_whose_pages_are_damaged_fails_quick_check_at_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = env_for(home)
    subprocess.run([str(BIN / "clockd"), "migrate"], env=env, check=True, capture_output=True)
    for i in range(30):
        subprocess.run([str(BIN / "clockctl"), "add", "--every", "1h", "--name", f"j{i}", "--", "true"], env=env,
                       check=True, capture_output=True)  # fmt: skip
    db = home / "clockd.db"
    data = bytearray(db.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    # Keep the header page valid, scribble over the b-tree header of every later page.
    for start in range(page, len(data), page):
        data[start : start + 12] = b"\x5a" * 12
    db.write_bytes(bytes(data))
    result = clockd_once(home)
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr
    assert str(db) in result.stderr and "damaged" in result.stderr


def test_read_only_verbs_do_not_create_a_store(tmp_path: Path) -> None:
    target = tmp_path / "typo" / "sub" / "clockd.db"
    env = env_for(tmp_path / "unused")
    for args in (["list"], ["runs", "x"], ["status"], ["show", "x"]):
        result = subprocess.run([str(BIN / "clockctl"), "--store", f"sqlite:///{target}", *args], env=env,
                                capture_output=True, text=True)  # fmt: skip
        assert result.returncode == 4, (args, result.stderr)
        assert result.stderr.strip().endswith(
            f"no clockd store at {target}; is the path right, or has clockd never run here?"
        ), result.stderr
    assert not (tmp_path / "typo").exists()
    added = subprocess.run([str(BIN / "clockctl"), "--store", f"sqlite:///{target}", "add", "--every", "1h",
                            "--name", "x", "--", "true"], env=env, capture_output=True, text=True)  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert mode(target.parent) == 0o700 and mode(target) == 0o600


def test_clockctl_as_another_user_is_told_the_store_is_roots(tmp_path: Path) -> None:
    require_root()
    home = tmp_path / "home"
    subprocess.run([str(BIN / "clockd"), "migrate"], env=env_for(home), check=True, capture_output=True)
    tmp_path.chmod(0o755)
    from typer.testing import CliRunner

    from clockctl.app import app

    runner = CliRunner()
    runner.invoke(app, ["--store", f"sqlite:///{home}/clockd.db", "list"])  # imports everything as root first
    # ... and what `add` imports only when it runs (the validator's target checks load
    # grp): nobody may be unable to read the interpreter's own extension modules (a
    # pyenv Python under /root), so, alone, the child's `add` died on "No module named
    # 'grp'" (exit 1) and the test passed only after another test had imported it.
    importlib.import_module("clockd.formats.schedfile")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody, run clockctl, report
        code = 99
        try:
            os.close(read)
            who = nobody()
            os.setgroups([])
            os.setgid(who.pw_gid)
            os.setuid(who.pw_uid)
            for args in (["list"], ["add", "--every", "1h", "--name", "y", "--", "true"]):
                result = runner.invoke(app, ["--store", f"sqlite:///{home}/clockd.db", *args])
                os.write(write, f"{result.exit_code}\t{result.output.strip()}\n".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        lines = pipe.read().splitlines()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(lines) == 2, lines
    for line in lines:
        exit_code, text = line.split("\t", 1)
        assert exit_code == "4", line
        assert "permission denied: the store belongs to root" in text, line
