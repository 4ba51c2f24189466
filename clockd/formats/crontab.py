"""Classic crontabs → schedule-file jobs (``clockctl import-crontab``).

What is read (Vixie cron, as Debian and cronie ship it):

* an entry: five time fields then the command, or ``@macro`` then the command. A
  *system* crontab (``/etc/crontab``, ``/etc/cron.d/*``) has a user column before
  the command; it is recognised by its path, or when every entry has a known user
  name there, or forced with ``system=True``;
* ``NAME=value`` lines (spaces around ``=`` allowed; a value in matching single or
  double quotes is unquoted; nothing is expanded — cron expands no ``$VAR``): every
  one, ``MAILTO``, ``CRON_TZ`` and the rest included, goes into the environment of
  the entries that follow, as cron exports them (a later line for the same name wins
  for the entries after it);
* ``CRON_TZ=Zone`` or ``TZ=Zone``: also the zone of the entries that follow;
* ``SHELL=``: cron runs ``$SHELL -c command``: ``/bin/sh`` becomes ``shell: true``,
  another shell the argv ``[SHELL, -c, command]``; ``PATH`` and the others are
  plain environment;
* ``MAILTO=addr``: cron mails a job's output there; the entries that follow get
  ``on_failure`` and ``on_success`` mail notifications to it (sent through the local
  ``sendmail``; a success without output sends nothing, as with cron). ``MAILTO=""``
  turns that off again. When this host has no ``sendmail`` (``PATH``,
  ``/usr/sbin/sendmail``) a note says so;
* ``MAILFROM=``/``RANDOM_DELAY=``: carried as environment only, listed as notes;
* ``%`` in a command: an unescaped ``%`` ends the command and the rest is the job's
  ``stdin:``, each further unescaped ``%`` a newline; ``\\%`` is a literal ``%``;
* comments (``#`` first) and blank lines.

Each entry becomes a job with cron's own behaviour made explicit: ``retries: 0``
(cron never retries), ``misfire: skip`` (cron does not run what it missed),
overlapping runs allowed, and the label ``crontab.source`` (file:line). The user
column of a system crontab becomes the job's ``user:`` (cron ran the line as that
user; a root worker does too). Schedules are validated where clockctl runs, which
refuses users unknown there, so a line whose user does not exist on this host is
listed in ``skipped`` with that reason rather than failing the whole import. A
user crontab's owner (``user=``, ``clockctl import-crontab --user``) stays a label,
``crontab.user``: clockd runs those jobs as its worker's user, said in a note.
Its name is ``<stem>-<line>``, the stem taken from the program the command runs
(``cd /srv && ./backup.sh --full`` → ``backup-12``, ``run-parts /etc/cron.daily``
→ ``cron.daily-23``), made unique.

Invariants: :func:`parse_crontab` never raises on any text; every line is an
entry, an environment line, a comment or blank, or is listed — in ``skipped``
(understood, cannot be carried over: ``@reboot``, a user unknown here) or
``errors`` (not understood) — with its line and the reason. Nothing is dropped
silently.
"""

from __future__ import annotations

import posixpath
import pwd
import re
import shlex
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Final

from clockd.core.cron import MACROS
from clockd.core.zones import get_zone
from clockd.errors import InvalidInput
from clockd.formats.schedfile import FileError, Job, Location, duplicate_errors, job_from_mapping
from clockd.runner.notify import find_sendmail

__all__ = ["CrontabEntry", "CrontabImport", "Note", "parse_crontab"]

DEFAULT_SHELL: Final = "/bin/sh"
_ENV_LINE = re.compile(r"""^\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*|"[^"]*"|'[^']*')\s*=\s*(?P<value>.*)$""")
_USER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*\$?$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_MAX_NAME_STEM = 40

# Name derivation: segments starting with these say nothing about the job.
_SKIP_PROGRAMS = frozenset(
    {"cd", "test", "[", "[[", "true", ":", "set", "export", "umask", "sleep", "source", ".", "fi", "done", "esac"}
)
# Shell keywords that introduce the command after them.
_KEYWORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "time", "!"})
# Wrappers around the real program: options taking a separate value, and how many
# positional arguments come before the program (flock's lock file, timeout's duration).
_WRAPPERS: Final[dict[str, tuple[frozenset[str], int]]] = {
    "env": (frozenset({"-u", "--unset", "-C", "--chdir"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "--class", "--classdata"}), 0),
    "nohup": (frozenset(), 0),
    "exec": (frozenset(), 0),
    "command": (frozenset(), 0),
    "time": (frozenset(), 0),
    "chronic": (frozenset(), 0),
    "sudo": (frozenset({"-u", "-g", "--user", "--group"}), 0),
    "flock": (frozenset({"-w", "-E", "--timeout", "--conflict-exit-code"}), 1),
    "timeout": (frozenset({"-s", "-k", "--signal", "--kill-after"}), 1),
}
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
_INTERPRETERS = _SHELLS | {"python", "python2", "python3", "perl", "php", "ruby", "node", "nodejs"}
_EXTENSIONS = (".sh", ".bash", ".py", ".pl", ".php", ".rb", ".js")
_SEPARATORS = frozenset({"&&", "||", ";", "|", "(", ")", "&", ";;", "|&", "{", "}"})


@dataclass(frozen=True, slots=True)
class Note:
    line: int | None
    message: str


@dataclass(frozen=True, slots=True)
class CrontabEntry:
    """One entry translated: the schedule-file job fields, at its line."""

    line: int
    fields: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.fields["name"])


@dataclass
class CrontabImport:
    path: str
    system: bool
    entries: list[CrontabEntry] = field(default_factory=list)
    skipped: list[Note] = field(default_factory=list)  # understood, cannot be carried over
    errors: list[Note] = field(default_factory=list)  # not understood: nothing should be applied
    notes: list[Note] = field(default_factory=list)  # carried over with a difference worth knowing
    # Whether an entry came before any CRON_TZ=/TZ= line, i.e. is read in the ``tz`` given
    # (the CLI's note on the host's zone is about those entries only).
    default_zone_used: bool = False

    def jobs(self) -> tuple[list[Job], list[FileError]]:
        """The entries validated as schedule-file jobs (the errors of the crontab first)."""
        errors = [FileError(Location(self.path, n.line), None, n.message) for n in self.errors]
        jobs: list[Job] = []
        for entry in self.entries:
            job, problems = job_from_mapping(entry.fields, Location(self.path, entry.line))
            errors.extend(problems)
            if job is not None:
                jobs.append(job)
        errors.extend(duplicate_errors(jobs))
        return jobs, errors


def user_exists(name: str) -> bool:
    """Whether this host knows the user (the check schedule validation makes)."""
    try:
        pwd.getpwnam(name)
    except (KeyError, OSError, ValueError):  # ValueError: an embedded NUL
        return False
    return True


def parse_crontab(
    text: str,
    path: str,
    *,
    tz: str = "UTC",
    system: bool | None = None,
    user: str | None = None,
    known_users: Collection[str] = ("root",),
    prefix: str = "",
    source: str | None = None,
    exists: Callable[[str], bool] = user_exists,
    sendmail: Callable[[], str | None] = find_sendmail,
) -> CrontabImport:
    """Translate a crontab. ``tz``: the zone of entries before any ``CRON_TZ``/``TZ``
    line (cron uses the host's). ``system``: None detects it. ``user``: whose crontab
    this is (a user crontab: the ``crontab.user`` label), or the only user whose
    entries are taken (a system one). ``known_users``: the names that make a file
    without a known path look like a system crontab. ``exists``: whether a user of
    the user column exists here (lines of other users are skipped). ``prefix`` is put
    before every derived name; ``source`` names the file in the ``crontab.source``
    label (default ``path``; the CLI gives the absolute path, so the label does not
    depend on the directory the import ran from). ``sendmail``: where this host's
    sendmail is (None: none; the import notes it when a ``MAILTO`` asks for mail)."""
    lines = text.split("\n")
    is_system = _detect_system(path, lines, known_users) if system is None else system
    result = CrontabImport(path, is_system)
    env: dict[str, str] = {}
    zone = tz
    shell = DEFAULT_SHELL
    used: set[str] = set()
    users: set[str] = set()
    mailto = ""
    has_sendmail = "MAILTO" not in text or sendmail() is not None  # looked up once
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if "\0" in line:
            result.errors.append(Note(number, "NUL character in the line"))
            continue
        assignment = _ENV_LINE.match(line)
        if assignment is not None:
            name, value = _unquote(assignment.group("name")), _env_value(assignment.group("value"))
            zone, shell = _assign(result, number, env, name, value, zone, shell)
            if name == "MAILTO":
                mailto = value.strip()
                if mailto and not has_sendmail:
                    result.notes.append(
                        Note(
                            number,
                            f"MAILTO={mailto}: no sendmail on this host (PATH, /usr/sbin/sendmail): the mail "
                            "notifications of the jobs below fail until one is installed",
                        )
                    )
            continue
        entry = _entry(result, number, stripped, user)
        if entry is None:
            continue
        expr, who, command, stdin = entry
        if is_system and not exists(who):
            result.skipped.append(
                Note(
                    number,
                    f"runs as {who}, who does not exist on this host (schedules are checked where "
                    "clockctl runs): create the user, or import on a host that has it",
                )
            )
            continue
        if "CRON_TZ" not in env and "TZ" not in env:
            result.default_zone_used = True
        fields = _fields(source or path, number, expr, who, command, env, zone, shell, is_system)
        if stdin:
            fields["stdin"] = stdin
        if mailto:
            fields["on_failure"] = fields["on_success"] = {"mail": mailto}
        stem = prefix + _stem(command)
        name = f"{stem}-{number}"
        suffix = 2
        while name in used:
            name = f"{stem}-{number}-{suffix}"
            suffix += 1
        used.add(name)
        fields = {"name": name, **fields}
        result.entries.append(CrontabEntry(number, fields))
        if who and not is_system:
            users.add(who)
    if users and result.entries:
        shown = ", ".join(sorted(users))
        result.notes.append(
            Note(
                None,
                f"cron ran these jobs as {shown}; clockd runs them as its worker's user "
                "(the crontab.user label records who it was)",
            )
        )
    return result


def _detect_system(path: str, lines: list[str], known_users: Collection[str]) -> bool:
    normalized = posixpath.normpath(path)
    if normalized == "/etc/crontab" or normalized.startswith("/etc/cron.d/"):
        return True
    seen = False
    for raw in lines:
        stripped = raw.strip()
        if not stripped or stripped.startswith("#") or _ENV_LINE.match(raw):
            continue
        words = stripped.split()
        at = 1 if stripped.startswith("@") else 5
        if len(words) < at + 2 or words[at] not in known_users:
            return False
        seen = True
    return seen


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def _env_value(text: str) -> str:
    value = text.rstrip()
    return _unquote(value)


def _assign(
    result: CrontabImport, number: int, env: dict[str, str], name: str, value: str, zone: str, shell: str
) -> tuple[str, str]:
    if name in ("CRON_TZ", "TZ"):
        try:
            get_zone(value.lstrip(":"))
            zone = value.lstrip(":")
        except InvalidInput as exc:
            result.errors.append(Note(number, f"{name}: {exc.message}"))
    if name == "SHELL":
        shell = value or DEFAULT_SHELL
        if shell != DEFAULT_SHELL:
            result.notes.append(Note(number, f"SHELL={shell}: the following commands run as [{shell}, -c, command]"))
    if name == "MAILFROM" and value:
        result.notes.append(Note(number, f"MAILFROM={value}: mail is sent as the job's user (in its env only)"))
    if name == "RANDOM_DELAY":
        result.notes.append(
            Note(number, "RANDOM_DELAY is not supported, kept in the env only (a schedule's window: spreads starts)")
        )
    env[name] = value
    return zone, shell


def _entry(result: CrontabImport, number: int, stripped: str, user: str | None) -> tuple[str, str, str, str] | None:
    """(expression, user or "", command, stdin) of an entry line, or None (listed why)."""
    system = result.system
    if stripped.startswith("@"):
        macro = re.split(r"[ \t]", stripped, maxsplit=1)[0]
        rest = stripped[len(macro) :].strip()
        if macro.lower() == "@reboot":
            result.skipped.append(
                Note(number, "@reboot: clockd has no boot event (use a systemd unit, or at: for a one-off run)")
            )
            return None
        if macro.lower() not in MACROS:
            result.errors.append(Note(number, f"unknown macro {macro!r} (known: {', '.join(MACROS)}, @reboot)"))
            return None
        expr, count = macro.lower(), 0
    else:
        expr, count = "", 5
    words = _split(rest if count == 0 else stripped, count + (1 if system else 0))
    if words is None:
        wanted = "a macro" if count == 0 else "5 time fields"
        if system:
            wanted += " and a user"
        result.errors.append(Note(number, f"not a cron entry: expected {wanted}, then a command"))
        return None
    *head, tail = words
    if count:
        expr = " ".join(head[:5])
    who = head[-1] if system else (user or "")
    if system and user is not None and who != user:
        result.skipped.append(Note(number, f"runs as {who}, not {user} (--user)"))
        return None
    command, stdin = _percent(tail)
    if not command.strip():
        result.errors.append(Note(number, "no command"))
        return None
    return expr, who, command, _stdin(stdin)


def _split(text: str, count: int) -> list[str] | None:
    """``count`` whitespace-separated words and the rest of the line (kept as written)."""
    words: list[str] = []
    rest = text
    for _ in range(count):
        match = re.match(r"[ \t]*(\S+)[ \t]+", rest)
        if match is None:
            return None
        words.append(match.group(1))
        rest = rest[match.end() :]
    rest = rest.strip()
    if not rest:
        return None
    return [*words, rest]


def _percent(command: str) -> tuple[str, str]:
    """cron's ``%``: (command with ``\\%`` made ``%``, the text after the first bare ``%``)."""
    out: list[str] = []
    i = 0
    while i < len(command):
        char = command[i]
        if char == "\\" and command[i + 1 : i + 2] == "%":
            out.append("%")
            i += 2
            continue
        if char == "%":
            return "".join(out), command[i + 1 :]
        out.append(char)
        i += 1
    return "".join(out), ""


def _stdin(text: str) -> str:
    """cron's stdin text: each unescaped ``%`` a newline, ``\\%`` a ``%`` (other
    backslashes kept); blanks only (``run.sh% ``) give none."""
    if not text.strip():
        return ""
    out: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            if char != "%":
                out.append("\\")
        elif char == "%":
            char = "\n"
        escaped = char == "\\"  # as cron's do_command.c, backslash runs included
        if not escaped:
            out.append(char)
    return "".join(out)


def _fields(
    path: str,
    number: int,
    expr: str,
    who: str,
    command: str,
    env: dict[str, str],
    zone: str,
    shell: str,
    system: bool,
) -> dict[str, Any]:
    fields: dict[str, Any] = {"schedule": expr, "tz": zone}
    if shell == DEFAULT_SHELL:
        fields["command"] = command
        fields["shell"] = True
    else:
        fields["command"] = [shell, "-c", command]
    if env:
        fields["env"] = dict(env)
    if system:
        fields["user"] = who  # the user column: who cron ran it as
    fields["retries"] = 0
    fields["misfire"] = "skip"
    labels = {"crontab.source": f"{path}:{number}"}
    if who and not system:
        labels["crontab.user"] = who  # whose crontab it was (a label only)
    fields["labels"] = labels
    return fields


# -- names -------------------------------------------------------------------------------


def _words(command: str) -> list[str]:
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        return list(lexer)
    except ValueError:  # unbalanced quotes: cron would hand it to the shell anyway
        return command.split()


def _stem(command: str, depth: int = 0) -> str:
    """A short name for what ``command`` runs (see the module docstring)."""
    words = _words(command)
    segment: list[str] = []
    segments: list[list[str]] = []
    follows_separator = True
    for word in words:
        if word in _SEPARATORS:
            if segment and follows_separator:
                segments.append(segment)
            segment, follows_separator = [], True
        elif word and all(c in "();<>|&" for c in word):  # a redirection: what follows is a file
            if segment and follows_separator:
                segments.append(segment)
            segment, follows_separator = [], False
        else:
            segment.append(word)
    if segment and follows_separator:
        segments.append(segment)
    for candidate in segments:
        stem = _program(candidate, depth)
        if stem:
            return stem
    return "job"


def _program(words: list[str], depth: int) -> str | None:
    i = 0
    while i < len(words) and (_ASSIGNMENT.match(words[i]) or words[i] in _KEYWORDS):
        i += 1
    while i < len(words):
        name = posixpath.basename(words[i])
        if name in _SKIP_PROGRAMS:
            return None
        wrapper = _WRAPPERS.get(name)
        if wrapper is None:
            break
        with_value, positional = wrapper
        i += 1
        while i < len(words) and (words[i].startswith("-") or (name == "env" and _ASSIGNMENT.match(words[i]))):
            i += 2 if words[i] in with_value else 1
        i += positional
    if i >= len(words) or words[i].startswith("-"):
        return None
    program = posixpath.basename(words[i])
    args = words[i + 1 :]
    if program == "run-parts":
        targets = [a for a in args if not a.startswith("-")]
        return _clean(posixpath.basename(targets[-1].rstrip("/"))) if targets else "run-parts"
    if program in _INTERPRETERS:
        for j, arg in enumerate(args):
            if arg == "-c" and program in _SHELLS and j + 1 < len(args) and depth < 3:
                return _stem(args[j + 1], depth + 1)
            if arg == "-m" and j + 1 < len(args):
                return _clean(args[j + 1])
            if not arg.startswith("-"):
                return _clean(posixpath.basename(arg))
    return _clean(program)


def _clean(name: str) -> str:
    for extension in _EXTENSIONS:
        if name.endswith(extension) and len(name) > len(extension):
            name = name[: -len(extension)]
            break
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return name[:_MAX_NAME_STEM].strip("-.") or "job"
