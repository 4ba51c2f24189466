"""Secret references in env values and HTTP headers, resolved by the worker at run time.

Forms (anywhere inside a value, several per value allowed)::

    ${file:/abs/path}   the file's contents, minus one trailing newline
    ${env:NAME}         a variable of the daemon's environment
    $${                 a literal "${" (the escape)

Any other ``${...}`` is literal text, as before references existed. A target's
``env_from_file`` names a file of ``KEY=VALUE`` lines, read the same way.

Guarantees (tests/e2e/test_trust.py greps every output for a planted secret):

* the store holds only the reference; ``clockctl`` shows the reference;
* resolution happens in the worker, just before the job starts or the request is
  sent; a resolved value lives in the job's environment / the request only;
* every error names the reference (``secret ${file:/x} cannot be read: No such
  file or directory``), never a value, and :func:`scrub` removes resolved values
  from any text (error strings, HTTP response bodies) the runner records or logs.

Who may read what is the runner's decision (``clockd.runner.identity``): this
module only reads with the permissions of the ``Reader`` it is given. A restricted
reader (a tenant not allowed the daemon's own user) is checked *before* the daemon
opens the file, and every failure says the same "permission denied for user …", so
its errors cannot tell which root-only paths exist. Files are
opened non-blocking and must be regular files of at most ``MAX_FILE_BYTES``, so a
FIFO or ``/dev/zero`` cannot hang or exhaust the worker.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from clockd.errors import ClockdError, InvalidInput

MAX_FILE_BYTES = 1024 * 1024
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPEN = ("${file:", "${env:")


class SecretError(ClockdError):
    """A secret reference cannot be resolved."""


@dataclass(frozen=True, slots=True)
class Ref:
    scheme: str  # "file" or "env"
    arg: str  # absolute path or variable name

    def __str__(self) -> str:
        return f"${{{self.scheme}:{self.arg}}}"


def parse(text: str) -> list[str | Ref]:
    """Split ``text`` into literal pieces and references; :class:`InvalidInput` if a
    reference is malformed (unterminated, relative path, bad variable name, NUL)."""
    parts: list[str | Ref] = []
    literal: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        if text.startswith("$${", i):
            literal.append("${")
            i += 3
            continue
        opener = next((o for o in _OPEN if text.startswith(o, i)), None)
        if opener is None:
            literal.append(text[i])
            i += 1
            continue
        end = text.find("}", i)
        if end < 0:
            raise InvalidInput(f"unterminated secret reference {text[i : i + 40]!r}…: expected a closing }}")
        scheme = opener[2:-1]
        ref = Ref(scheme, text[i + len(opener) : end])
        _check_ref(ref)
        if literal:
            parts.append("".join(literal))
            literal = []
        parts.append(ref)
        i = end + 1
    if literal:
        parts.append("".join(literal))
    return parts


def _check_ref(ref: Ref) -> None:
    if "\x00" in ref.arg:
        raise InvalidInput(f"secret reference {ref.scheme}: NUL characters are not allowed")
    if ref.scheme == "file":
        if not ref.arg.startswith("/"):
            raise InvalidInput(f"secret reference {ref}: the path must be absolute")
    elif not _ENV_NAME.fullmatch(ref.arg):
        raise InvalidInput(f"secret reference {ref}: not a valid environment variable name")


def references(text: str) -> list[Ref]:
    return [p for p in parse(text) if isinstance(p, Ref)]


def has_references(text: str) -> bool:
    return any(o in text for o in _OPEN) and bool(references(text))


def validate(text: str, where: str) -> None:
    """:class:`InvalidInput` prefixed with ``where`` (e.g. ``env TOKEN``) if malformed."""
    try:
        parse(text)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc.message}") from None


@dataclass(frozen=True, slots=True)
class Reader:
    """The permissions files are read with. ``uid is None``: the daemon's own (the OS
    decides); otherwise owner, group and mode bits are checked against ``uid`` and
    ``gids`` on the file and every directory above it (ACLs are not consulted)."""

    uid: int | None = None
    gids: frozenset[int] = frozenset()
    name: str = ""
    environ: bool = True  # may ${env:…} read the daemon's environment?


@dataclass
class Resolver:
    """Resolves references for one run; remembers the values for :func:`scrub`."""

    reader: Reader = field(default_factory=Reader)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    values: list[str] = field(default_factory=list)
    _files: dict[str, str] = field(default_factory=dict)

    def resolve(self, text: str) -> str:
        try:
            parts = parse(text)
        except InvalidInput as exc:
            raise SecretError(exc.message) from None
        out: list[str] = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
                continue
            value = self._file(part) if part.scheme == "file" else self._env(part)
            if "\x00" in value:
                raise SecretError(f"secret {part} contains a NUL character")
            self.values.append(value)
            out.append(value)
        return "".join(out)

    def env_file(self, path: str) -> list[tuple[str, str]]:
        """``KEY=VALUE`` lines; blank lines and ``#`` comments skipped, an ``export ``
        prefix and one pair of matching quotes around the value removed."""
        text = self._read(path, f"env_from_file {path}")
        pairs: list[tuple[str, str]] = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            line = line.removeprefix("export ").lstrip()
            key, sep, value = line.partition("=")
            key = key.strip()
            if not sep or not _ENV_NAME.fullmatch(key):
                # The line itself may be a secret: name the line number only.
                raise SecretError(f"env_from_file {path}: line {number}: expected KEY=VALUE")
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            if "\x00" in value:
                raise SecretError(f"env_from_file {path}: line {number}: contains a NUL character")
            self.values.append(value)
            pairs.append((key, value))
        return pairs

    def _env(self, ref: Ref) -> str:
        if not self.reader.environ:
            raise SecretError(
                f"secret {ref} cannot be read: only tenants allowed to run jobs as the daemon's "
                "own user may read its environment (allowed_users)"
            )
        value = self.environ.get(ref.arg)
        if value is None:
            raise SecretError(f"secret {ref} cannot be read: the daemon has no such environment variable")
        return value

    def _file(self, ref: Ref) -> str:
        cached = self._files.get(ref.arg)
        if cached is None:
            text = self._read(ref.arg, f"secret {ref}")
            cached = text[:-1] if text.endswith("\n") else text
            if cached.endswith("\r") and text.endswith("\r\n"):
                cached = cached[:-1]
            self._files[ref.arg] = cached
        return cached

    def _read(self, path: str, what: str) -> str:
        if self.reader.uid is not None:
            # A restricted reader learns one thing only: readable or not. Its rights are
            # checked before the daemon opens anything, and every failure until then says
            # the same words, so a tenant cannot probe which root-only paths exist.
            denied = SecretError(f"{what} cannot be read: permission denied for user {self.reader.name!r}")
            try:
                return self._read_checked(path, what, restricted=True)
            except _Hidden:
                raise denied from None
        return self._read_checked(path, what, restricted=False)

    def _read_checked(self, path: str, what: str, *, restricted: bool) -> str:
        if restricted:
            self._check_access(path)
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            if restricted:
                raise _Hidden from None
            raise SecretError(f"{what} cannot be read: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            if restricted:
                self._check_same(path, st)
            if not stat.S_ISREG(st.st_mode):
                raise SecretError(f"{what} cannot be read: not a regular file")
            if st.st_size > MAX_FILE_BYTES:
                raise SecretError(f"{what} cannot be read: larger than {MAX_FILE_BYTES} bytes")
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_FILE_BYTES:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > MAX_FILE_BYTES:
                raise SecretError(f"{what} cannot be read: larger than {MAX_FILE_BYTES} bytes")
        except OSError as exc:
            raise SecretError(f"{what} cannot be read: {exc.strerror}") from None
        finally:
            os.close(fd)
        try:
            return b"".join(chunks).decode("utf-8")
        except UnicodeDecodeError:
            raise SecretError(f"{what} cannot be read: not UTF-8 text") from None

    def _check_access(self, path: str) -> None:
        """May the reader open ``path``? Mode bits of the file and of every directory
        above it (after resolving links). Raises ``_Hidden`` for any reason."""
        uid, gids = self.reader.uid, self.reader.gids
        assert uid is not None
        real = os.path.realpath(path)
        for directory in _parents(real):
            try:
                dst = os.stat(directory)
            except OSError:
                raise _Hidden from None
            if not _allowed(dst, uid, gids, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
                raise _Hidden
        try:
            st = os.stat(real)
        except OSError:
            raise _Hidden from None
        if not _allowed(st, uid, gids, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH):
            raise _Hidden

    @staticmethod
    def _check_same(path: str, st: os.stat_result) -> None:
        """The file opened is the one checked (not swapped for another meanwhile)."""
        try:
            again = os.stat(os.path.realpath(path))
        except OSError:
            raise _Hidden from None
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
            raise _Hidden


class _Hidden(Exception):
    """A restricted reader's access failed; the reason is not told (see ``Resolver._read``)."""


def _allowed(st: os.stat_result, uid: int, gids: frozenset[int], u: int, g: int, o: int) -> bool:
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & u)
    if st.st_gid in gids:
        return bool(st.st_mode & g)
    return bool(st.st_mode & o)


def _parents(path: str) -> Iterator[str]:
    current = os.path.dirname(path)
    while True:
        yield current
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


def scrub(text: str, values: list[str]) -> str:
    """``text`` with every resolved value replaced by ``***`` (longest first; values
    shorter than 4 characters are left alone, they would mangle ordinary text)."""
    for value in sorted({v for v in values if len(v) >= 4}, key=len, reverse=True):
        text = text.replace(value, "***")
    return text
