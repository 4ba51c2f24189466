"""Input limits every front end shares: ``clockctl add``/``update``, schedule files and the HTTP API.

They are checked where a definition is validated (``clockd.formats.validate.normalize`` and
``clockd.runner.targets.validate_target``, which every writer goes through), so each limit
holds whatever the front end, with one message. Each function raises
:class:`~clockd.errors.InvalidInput` whose message starts with the field it is
about (``name: …``, ``command: …``): the schedule-file loader turns that prefix
into the field of its error.

Invariants:

* a name (schedule name, tenant, queue) is 1 to :data:`MAX_NAME` characters with no
  control or invisible formatting character: no C0 or C1 control (U+0000-U+001F,
  U+007F-U+009F, U+009B is CSI: a terminal escape), no line or paragraph separator and
  no bidirectional override or isolate (U+202A-U+202E, U+2066-U+2069) nor any other
  Unicode "format" character (category Cf), which would make ``clockctl list`` show
  another name than the one stored;
* a command can be ``execve``'d by Linux: each argument (the shell line included)
  below :data:`MAX_ARG_BYTES` (MAX_ARG_STRLEN, 32 pages) and argv plus the job's
  own environment within :data:`MAX_EXEC_BYTES`, half of the usual ARG_MAX (a quarter
  of an 8 MiB stack), leaving the other half for the variables the worker adds;
* checks are linear in the input and bounded: a zone name longer than
  :data:`MAX_ZONE_NAME` is refused before any spelling suggestion is computed.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Final

from clockd.errors import InvalidInput

__all__ = [
    "MAX_ARG_BYTES",
    "MAX_EXEC_BYTES",
    "MAX_NAME",
    "MAX_RETRIES",
    "MAX_ZONE_NAME",
    "SCHEDULE_SUBRESOURCES",
    "check_command",
    "check_name",
    "check_reason",
    "check_retries",
    "check_schedule_name",
    "shell_line_hint",
]

MAX_NAME: Final = 200
MAX_REASON: Final = 1000  # a pause's reason: shown on every page and line that shows the schedule
MAX_RETRIES: Final = 1000
MAX_ARG_BYTES: Final = 128 * 1024 - 1  # Linux MAX_ARG_STRLEN counts the terminating NUL
MAX_EXEC_BYTES: Final = 1024 * 1024  # argv + the schedule's env, each string with its NUL
MAX_ZONE_NAME: Final = 64  # the longest IANA name today is 32 characters

# Characters of a shell line: a program name holding one was meant for /bin/sh.
# Not "[": /usr/bin/[ is a program.
_SHELL_SYNTAX = re.compile(r"[\s;&|<>()$`\\\"'*?]")


def _invisible(char: str) -> bool:
    # Cc: C0, DEL and C1 controls; Cf: bidi overrides/isolates, zero-width characters;
    # Zl/Zp: line and paragraph separators (a line break in `clockctl list`).
    return unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")


def check_name(text: str, field: str) -> None:
    """``text`` as a name (schedule name, tenant or queue) or :class:`InvalidInput` naming ``field``."""
    if not text.strip() or len(text) > MAX_NAME:
        raise InvalidInput(f"{field}: must be 1 to {MAX_NAME} characters")
    _refuse_invisible(text, field)


def _refuse_invisible(text: str, field: str) -> None:
    """:class:`InvalidInput` naming ``field`` for the first control or invisible character."""
    if text.isascii() and text.isprintable():
        return  # ASCII's only invisible characters are its controls, which isprintable refuses
    bad = next((c for c in text if _invisible(c)), None)
    if bad is not None:
        raise InvalidInput(
            f"{field}: character U+{ord(bad):04X} ({unicodedata.name(bad, 'a control character')}) is not "
            "allowed: no control or invisible characters"
        )


# The actions the API addresses below a schedule (/v1/schedules/NAME/pause…); a test keeps
# this list equal to the routes (tests/api/test_limits.py).
SCHEDULE_SUBRESOURCES: Final = ("explain", "pause", "resume", "run-now", "versions")


def check_schedule_name(text: str) -> None:
    """A schedule's name: a name (:func:`check_name`) the API can address. A name may hold
    ``/`` (``team/mail``, sent as ``%2F``), but one ending in ``/versions`` or another of
    :data:`SCHEDULE_SUBRESOURCES` was created and then read as that action on the name
    before it, and a ``.`` or ``..`` part is a dot segment clients collapse: such schedules
    could be made, never reached."""
    check_name(text, "name")
    parts = text.split("/")
    if any(part in (".", "..") for part in parts):
        raise InvalidInput("name: a '.' or '..' part is not allowed (a dot segment of a URL path)")
    if len(parts) > 1 and parts[-1] in SCHEDULE_SUBRESOURCES:
        raise InvalidInput(
            f"name: may not end in '/{parts[-1]}' (the API would read it as {parts[-1]} of {'/'.join(parts[:-1])!r})"
        )


def check_reason(text: str) -> None:
    """A pause's reason: kept with the version and shown wherever the schedule is. It was
    unbounded (a 100 KB reason was stored) and could carry terminal escapes."""
    if len(text) > MAX_REASON:
        raise InvalidInput(f"reason: at most {MAX_REASON} characters, got {len(text)}")
    _refuse_invisible(text, "reason")


def check_retries(retries: int) -> None:
    if not 0 <= retries <= MAX_RETRIES:
        raise InvalidInput(f"retries: {retries} is out of range 0-{MAX_RETRIES}")


def check_command(argv: Sequence[str], env: Sequence[tuple[str, str]], shell: bool) -> None:
    """A command Linux can execute: sizes within the kernel's limits; without ``shell``, a
    program name that is not a shell line (which would fail at run time as "executable
    not found")."""
    if not argv or not argv[0].strip():
        raise InvalidInput("command: the program (first item) must not be empty or blank")
    total = 0
    for i, arg in enumerate(argv):
        size = len(arg.encode("utf-8", "surrogatepass"))
        if size > MAX_ARG_BYTES:
            what = "the shell line" if shell else f"argument {i}"
            raise InvalidInput(
                f"command: {what} is {size} bytes; Linux cannot run an argument over {MAX_ARG_BYTES} bytes "
                "(put large data in a file and pass its path)"
            )
        total += size + 1
    for key, value in env:
        total += len(key.encode("utf-8", "surrogatepass")) + len(value.encode("utf-8", "surrogatepass")) + 2
    if total > MAX_EXEC_BYTES:
        raise InvalidInput(
            f"command: the arguments and env take {total} bytes; at most {MAX_EXEC_BYTES} can be passed to a job"
        )
    if not shell:
        hint = shell_line_hint(argv[0])
        if hint is not None:
            raise InvalidInput(f"command: {hint}")


def shell_line_hint(program: str) -> str | None:
    """Why ``program`` (argv[0] without a shell) looks like a whole shell line, and how to
    fix it; None when it looks like a program name or path."""
    if not _SHELL_SYNTAX.search(program):
        return None
    fix = "add --shell (in a file: shell: true) to run it with /bin/sh -c"
    words = program.split()
    if len(words) > 1 and not any(_SHELL_SYNTAX.search(w) for w in words):
        fix += f", or give the program and its arguments as separate words (-- {' '.join(words[:4])})"
    return f"the program {_shown(program)} holds spaces or shell syntax: {fix}"


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")
