"""Validation of targets where schedules are written (``clockd.formats.validate.normalize``: clockctl, apply).

Everything here can be decided on the host that writes the schedule; the worker
decides the rest at run time (``clockd.runner.identity``: allowed_users, users
that exist *there*; ``clockd.runner.secrets``: whether a referenced secret is readable).
Users and groups must exist on the writing host too: clockctl usually runs on a
worker, and a typo should fail at ``add``, not at 3 a.m.

No string may hold a NUL character (PostgreSQL text cannot, and ``execve`` would
cut an argument short), so NUL is refused everywhere with a message naming the field.
"""

from __future__ import annotations

import dataclasses
import grp
import pwd
import re
from urllib.parse import urlsplit

from clockd.core.limits import check_command
from clockd.core.model import RESERVED_HEADERS, CommandTarget, HttpTarget, NoopTarget, ScheduleDef, Target
from clockd.core.sizes import MIN_MEMORY, format_size
from clockd.errors import InvalidInput
from clockd.runner import secrets

MAX_BODY = 1024 * 1024
MAX_URL = 8192
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_ENV_KEY = re.compile(r"[^=\x00]+")
_USER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*\$?")
_COMPUTED_HEADERS = frozenset({"content-length", "transfer-encoding"})


def check_strings(definition: ScheduleDef) -> None:
    """NUL in any of the definition's own strings (the target is checked separately)."""
    _no_nul(definition.name, "name")
    _no_nul(definition.queue, "queue")
    _no_nul(definition.tenant, "tenant")
    for key, value in definition.labels:
        _no_nul(key, "label key")
        _no_nul(value, f"label {key}")


def validate_target(target: Target) -> Target:
    """The target, checked and in canonical form (HTTP method upper-cased)."""
    if isinstance(target, CommandTarget):
        return _command(target)
    if isinstance(target, HttpTarget):
        return _http(target)
    if isinstance(target, NoopTarget):
        return target
    raise InvalidInput(f"unknown target {target!r}")  # pragma: no cover


def _no_nul(text: str, what: str) -> None:
    if "\x00" in text:
        raise InvalidInput(f"{what}: NUL characters (\\x00) are not allowed")


def _command(target: CommandTarget) -> CommandTarget:
    if not target.argv or (target.shell and not target.argv[0].strip()):
        raise InvalidInput("command: missing (give the program and its arguments)")
    for i, arg in enumerate(target.argv):
        _no_nul(arg, f"command argument {i}")
    check_command(target.argv, target.env, target.shell)  # sizes execve takes; a shell line without shell
    for key, value in target.env:
        if not _ENV_KEY.fullmatch(key):
            raise InvalidInput(f"env: invalid variable name {key!r} (no '=' or NUL, not empty)")
        _no_nul(value, f"env {key}")
        secrets.validate(value, f"env {key}")
    if target.cwd is not None:
        _no_nul(target.cwd, "cwd")
    if target.env_from_file is not None:
        _no_nul(target.env_from_file, "env_from_file")
        if not target.env_from_file.startswith("/"):
            raise InvalidInput(f"env_from_file: {target.env_from_file!r} must be an absolute path")
    if target.group is not None and target.user is None:
        raise InvalidInput("group: needs user (the group a job runs as goes with its user)")
    if target.user is not None:
        if not _USER.fullmatch(target.user):
            raise InvalidInput(f"user: {target.user!r} is not a valid user name")
        try:
            pwd.getpwnam(target.user)
        except KeyError:
            raise InvalidInput(
                f"user: {target.user!r} does not exist on this host "
                "(checked where clockctl runs; the worker checks again where the job runs)"
            ) from None
    if target.group is not None:
        if not _USER.fullmatch(target.group):
            raise InvalidInput(f"group: {target.group!r} is not a valid group name")
        try:
            grp.getgrnam(target.group)
        except KeyError:
            raise InvalidInput(
                f"group: {target.group!r} does not exist on this host "
                "(checked where clockctl runs; the worker checks again where the job runs)"
            ) from None
    if target.memory_limit is not None and not MIN_MEMORY <= target.memory_limit < 1 << 62:
        raise InvalidInput(f"memory_limit: must be at least {format_size(MIN_MEMORY)} (and below 4E)")
    if target.cpu_limit is not None and not 1 <= target.cpu_limit <= 1 << 31:
        raise InvalidInput("cpu_limit: must be at least 1s")
    if target.nproc_limit is not None and not 1 <= target.nproc_limit <= 1 << 31:
        raise InvalidInput("nproc_limit: must be at least 1")
    return target


def _http(target: HttpTarget) -> HttpTarget:
    method = target.method.strip().upper()
    if not _TOKEN.fullmatch(method):
        raise InvalidInput(f"http: {target.method!r} is not a valid HTTP method")
    url = target.url
    if len(url) > MAX_URL:
        raise InvalidInput(f"http: the URL is longer than {MAX_URL} characters")
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise InvalidInput("http: the URL contains spaces or control characters (percent-encode them)")
    if "${" in url and secrets.has_references(url.replace("$${", "")):
        raise InvalidInput("http: secret references are not supported in the URL; send the secret in a --header")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a bad port)
    except ValueError as exc:
        raise InvalidInput(f"http: invalid URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise InvalidInput("http: the URL must be http:// or https:// with a host")
    for name, value in target.headers:
        if not _TOKEN.fullmatch(name):
            raise InvalidInput(f"header: {name!r} is not a valid header name")
        if name.lower() in RESERVED_HEADERS:
            raise InvalidInput(f"header: {name} is set by clockd (the occurrence id, scheduled time, attempt)")
        if name.lower() in _COMPUTED_HEADERS:
            raise InvalidInput(f"header: {name} is computed from the body")
        if any(c in value for c in "\r\n\x00"):
            raise InvalidInput(f"header {name}: line breaks and NUL are not allowed in a value")
        secrets.validate(value, f"header {name}")
    if target.body is not None:
        _no_nul(target.body, "body")
        if len(target.body.encode()) > MAX_BODY:
            raise InvalidInput(f"body: larger than {MAX_BODY} bytes")
    for status in target.expect_status:
        if not 100 <= status <= 599:
            raise InvalidInput(f"expect_status: {status} is not an HTTP status (100-599)")
    return dataclasses.replace(target, method=method)
