"""The embedded store's files on disk: who may own them, their modes, and their health.

A root ``clockd`` runs whatever jobs its database holds, so the database is trusted
only when nobody else could have written it — the rule sshd and cron apply to their
own files:

* ``CLOCKD_HOME`` (the database's directory) is created ``0700``; the database is
  created ``0600`` (before SQLite opens it, so the umask plays no part), and SQLite
  gives its ``-wal`` and ``-shm`` files the database's mode; the lock file is created
  ``0600`` with ``O_NOFOLLOW | O_CLOEXEC`` (a symlink planted there is refused, not
  followed and truncated).
* The daemon (``clockd run``/``migrate``: ``owner_only``) refuses to start — exit 4,
  naming the path and its owner — when the directory or any store file (database,
  ``-wal``, ``-shm``, lock) is not owned by its own user, is writable by group or
  others, or is not a regular file. Group/other *read* bits on its own files (a store
  made by an older clockd under umask 022) are removed, with a warning.
* ``clockctl`` on a store another user owns gets "permission denied: the store belongs
  to USER" (root may operate on any store). A read-only verb (``create=False``) on a
  path with no database says so instead of creating an empty store.
* An existing database file that is empty or does not start with SQLite's header is
  refused with its path (exit 4): only a path with no file at all gets a new store.
  ``quick_check`` runs ``PRAGMA quick_check`` (the daemon at start; health reports
  its failure).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import pwd
import sqlite3
import stat
import threading
from pathlib import Path
from typing import Final

from clockd.errors import StoreError, StorePermissionDenied, StoreUnavailable

log = logging.getLogger(__name__)

HOME_MODE: Final = 0o700
FILE_MODE: Final = 0o600
SQLITE_HEADER: Final = b"SQLite format 3\x00"
# The files SQLite keeps next to the database, and clockd's lock.
SIDE_SUFFIXES: Final = ("-wal", "-shm", ".lock")


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def missing_message(path: Path) -> str:
    shown = "/" + str(path).lstrip("/") if str(path).startswith("/") else str(path)  # sqlite:////x is /x
    return f"no clockd store at {shown}; is the path right, or has clockd never run here?"


def prepare(path: Path, *, create: bool, owner_only: bool) -> None:
    """Check (and where allowed, create) the database's directory and files before
    SQLite opens them. Raises ``StoreUnavailable`` or ``StorePermissionDenied``."""
    if str(path) == ":memory:":
        return
    directory = path.parent
    if not create and not _exists(path):
        raise StoreUnavailable(missing_message(path))
    if create:
        _make_home(directory)
    if owner_only:
        _check_owned(directory, directory=True)
        for candidate in (path, *(Path(f"{path}{s}") for s in SIDE_SUFFIXES)):
            _check_owned(candidate, directory=False)
    else:
        _check_client(path)
    if _exists(path):
        check_header(path)
    elif create:
        _create_file(path)


def _exists(path: Path) -> bool:
    """Is there a file at ``path``? A path this user may not even look at belongs to
    someone else: say whose, rather than "no store" or a silent store of our own."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except PermissionError:
        raise StorePermissionDenied(
            f"permission denied: the store belongs to {_owner_of_first_existing(path)} ({path})"
        ) from None
    return True


def _make_home(directory: Path) -> None:
    """Create missing directories 0700 whatever the umask (``mkdir``'s mode is masked)."""
    missing: list[Path] = []
    current = directory
    while not _exists(current):
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for made in reversed(missing):
        try:
            os.mkdir(made, HOME_MODE)
            os.chmod(made, HOME_MODE)
        except FileExistsError:
            pass  # another process made it meanwhile: checked below like any other
        except OSError as exc:
            raise StoreUnavailable(f"cannot create the directory {made}: {exc.strerror}") from exc


def _create_file(path: Path) -> None:
    """A new database, 0600, never through a symlink. It is made complete (SQLite's
    header written, WAL mode) under a temporary name and linked into place, which never
    replaces a file: so whoever sees ``path`` sees a database, never a half-made empty
    file that :func:`check_header` would rightly refuse (concurrent first openers)."""
    temporary = path.with_name(f".{path.name}.new-{os.getpid()}-{threading.get_ident()}")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)
        finally:
            os.close(fd)
        conn = sqlite3.connect(temporary)
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchall()  # writes page 1
        finally:
            conn.close()
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # a concurrent opener linked its own first: use that one
    except OSError as exc:
        raise _unavailable(path, exc) from exc
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"cannot create {path}: {exc}") from exc
    finally:
        for leftover in (temporary, Path(f"{temporary}-wal"), Path(f"{temporary}-shm")):
            with contextlib.suppress(OSError):
                os.unlink(leftover)


def _unavailable(path: Path, exc: OSError) -> StoreError:
    if exc.errno == errno.ENOSPC:
        return StoreUnavailable(f"disk full creating {path}: free space and retry")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return StorePermissionDenied(f"permission denied: cannot create {path}")
    return StoreUnavailable(f"cannot create {path}: {exc.strerror}")


def _check_owned(path: Path, *, directory: bool) -> None:
    """The daemon's rule: owned by us, not writable by group or others, the right type."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreUnavailable(f"cannot inspect {path}: {exc.strerror}") from exc
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not kind_ok:
        what = "a directory" if directory else "a regular file (a symlink or device is refused)"
        raise StoreUnavailable(f"refusing to use {path}: it is not {what}; remove it or choose another --store")
    me = os.geteuid()
    if st.st_uid != me:
        raise StorePermissionDenied(
            f"refusing to use {path}: it belongs to {owner_name(st.st_uid)}, not to {owner_name(me)} who runs "
            f"clockd; a store another user can change could run jobs as {owner_name(me)} "
            f"(chown it to {owner_name(me)} if it is yours)"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StorePermissionDenied(
            f"refusing to use {path}: it is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}, "
            f"owner {owner_name(st.st_uid)}); chmod go-w it after checking nobody changed it"
        )
    if not directory and st.st_mode & (stat.S_IRGRP | stat.S_IROTH):
        # Written by an older clockd under umask 022: every job's output was readable.
        with contextlib.suppress(OSError):
            os.chmod(path, FILE_MODE, follow_symlinks=False)
            log.warning(
                "%s was readable by other users (mode %04o): now 0600",
                path,
                stat.S_IMODE(st.st_mode),
                extra={"action": "store_mode_tightened", "path": str(path)},
            )


def _check_client(path: Path) -> None:
    """clockctl: a store another user owns is theirs, not silently ours (root may act)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        parent = path.parent
        with contextlib.suppress(OSError):
            pst = os.stat(parent)
            if pst.st_uid != os.geteuid() and os.geteuid() != 0 and not os.access(parent, os.W_OK | os.X_OK):
                raise StorePermissionDenied(
                    f"permission denied: the store at {path} belongs to {owner_name(pst.st_uid)}"
                ) from None
        return
    except PermissionError:
        owner = _owner_of_first_existing(path)
        raise StorePermissionDenied(f"permission denied: the store belongs to {owner} ({path})") from None
    except OSError as exc:
        raise StoreUnavailable(f"cannot inspect {path}: {exc.strerror}") from exc
    me = os.geteuid()
    if st.st_uid != me and me != 0:
        raise StorePermissionDenied(f"permission denied: the store belongs to {owner_name(st.st_uid)} ({path})")


def _owner_of_first_existing(path: Path) -> str:
    for candidate in (path, *path.parents):
        with contextlib.suppress(OSError):
            st = os.stat(candidate)
            if st.st_uid != os.geteuid():
                return owner_name(st.st_uid)
    return "another user"


def check_header(path: Path) -> None:
    """An existing database must be a SQLite file: an empty or foreign file is refused
    (treating it as a new store would silently drop every schedule)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except PermissionError:
        raise StorePermissionDenied(
            f"permission denied: the store belongs to {_owner_of_first_existing(path)} ({path})"
        ) from None
    except OSError as exc:
        raise StoreUnavailable(f"cannot open {path}: {exc.strerror}") from exc
    if head == SQLITE_HEADER:
        return
    if not head:
        raise StoreUnavailable(
            f"{path} exists but is empty: refusing to treat it as a new store; restore it from a backup, "
            "or remove it to start with no schedules"
        )
    raise StoreUnavailable(
        f"{path} is not a clockd SQLite database or is damaged: restore it from a backup, "
        "or point the store at another path"
    )


def quick_check(conn: sqlite3.Connection, path: Path) -> None:
    """``PRAGMA quick_check``: ``StoreUnavailable`` naming the first problem found."""
    try:
        rows = conn.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.DatabaseError as exc:
        raise StoreUnavailable(f"{path} is damaged ({exc}): restore it from a backup") from exc
    if rows != [("ok",)]:
        problem = rows[0][0] if rows else "no answer"
        raise StoreUnavailable(f"{path} is damaged (quick_check: {problem}): restore it from a backup")


def open_lock(path: Path) -> int:
    """The lock file's descriptor: created 0600, never through a symlink (``O_NOFOLLOW``:
    a link planted there fails with ``ELOOP`` instead of truncating its target), closed
    on exec (jobs do not inherit it). Raises ``StoreUnavailable``/``StorePermissionDenied``."""
    _make_home(path.parent)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreUnavailable(f"refusing to use {path}: it is a symlink; remove it") from exc
        if exc.errno == errno.ENOSPC:
            raise StoreUnavailable(f"disk full creating {path}: free space and retry") from exc
        raise StoreUnavailable(f"cannot open lock file {path}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StoreUnavailable(f"refusing to use {path}: it is not a regular file; remove it")
        if st.st_uid != os.geteuid():
            raise StorePermissionDenied(
                f"refusing to use {path}: it belongs to {owner_name(st.st_uid)}, not to {owner_name(os.geteuid())}"
            )
        if stat.S_IMODE(st.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd
