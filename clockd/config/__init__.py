"""Daemon settings and where things live by default.

Precedence, for every key: command-line flag > ``CLOCKD_<KEY>`` environment
variable > the config file (``--config``, ``CLOCKD_CONFIG``, else
``/etc/clockd/clockd.yaml`` if it exists) > the default below.

Default store: ``sqlite:///$CLOCKD_HOME/clockd.db`` where ``CLOCKD_HOME`` is
``/var/lib/clockd`` for root and ``${XDG_STATE_HOME:-~/.local/state}/clockd``
otherwise. ``clockd`` and ``clockctl`` resolve it the same way.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from clockd.core.durations import format_duration, parse_duration
from clockd.errors import InvalidInput

ALL_MODES = ("leader", "materializer", "relay", "worker", "api")
LOG_FORMATS = ("auto", "text", "json", "journald")
LOG_LEVELS = ("debug", "info", "warning", "error")
# Settings whose value is one of a few words: checked here for the file, the environment and
# the flags alike (a config file's `log_level: verbose` was a traceback at start-up).
_CHOICES: dict[str, tuple[str, ...]] = {"log_format": LOG_FORMATS, "log_level": LOG_LEVELS}
# Tenant → user names its jobs may run as ("*": any non-root user; root only by
# name). See clockd.runner.identity for the rule and why this is the default.
DEFAULT_ALLOWED_USERS: dict[str, tuple[str, ...]] = {"default": ("*", "root")}


def clockd_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("CLOCKD_HOME"):
        return Path(env["CLOCKD_HOME"]).expanduser()
    if os.geteuid() == 0:
        return Path("/var/lib/clockd")
    state = env.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
    return Path(state).expanduser() / "clockd"


@dataclass(frozen=True, slots=True)
class StoreLocation:
    kind: str  # "sqlite" or "postgresql"
    target: str  # file path (sqlite) or DSN (postgresql)

    @property
    def display(self) -> str:
        return self.target if self.kind == "sqlite" else redact_dsn(self.target)


# A libpq key=value DSN ("host=db dbname=clockd user=…"): never a file name.
_LIBPQ_KEYWORDS = re.compile(r"^\s*(host|hostaddr|port|dbname|user|password|service|sslmode)\s*=")


def resolve_store(url: str | None, env: Mapping[str, str] | None = None) -> StoreLocation:
    """``sqlite:///abs/path.db``, ``sqlite:///`` (the default file), a plain path, or a
    ``postgresql://`` / ``postgres://`` DSN. None or empty: ``CLOCKD_STORE``, then the default."""
    env = os.environ if env is None else env
    url = url or env.get("CLOCKD_STORE") or ""
    if url.startswith(("postgresql://", "postgres://")) or _LIBPQ_KEYWORDS.match(url):
        return StoreLocation("postgresql", url)
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :]
        if path in ("", "/"):
            return StoreLocation("sqlite", str(clockd_home(env) / "clockd.db"))
        return StoreLocation("sqlite", path)
    if "://" in url:
        raise InvalidInput(f"unsupported store URL {redact_dsn(url)!r}: use sqlite:///PATH or postgresql://…")
    if url:
        return StoreLocation("sqlite", str(Path(url).expanduser()))
    return StoreLocation("sqlite", str(clockd_home(env) / "clockd.db"))


def redact_dsn(dsn: str) -> str:
    """Hide the password of a URL-style or key=value DSN."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
            dsn = urlunsplit(parts._replace(netloc=netloc))
        return re.sub(r"(password=)[^&\s]*", r"\1***", dsn)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", dsn)


def _cpus() -> int:
    return os.cpu_count() or 2


@dataclass(frozen=True, slots=True)
class Settings:
    """Every daemon setting with its default. ``config/clockd.yaml`` documents each key."""

    store: str = ""
    etcd: tuple[str, ...] = ()
    cluster: str = "default"
    node_id: str = field(default_factory=lambda: os.uname().nodename)
    modes: tuple[str, ...] = ALL_MODES
    queues: tuple[str, ...] = ("default",)
    concurrency: int = field(default_factory=_cpus)
    shard_count: int = 64
    horizon: timedelta = timedelta(minutes=2)
    relay_lead: timedelta = timedelta(seconds=30)
    # The materializer writes the built-in queue's rows itself (no outbox, no relay hop).
    direct_dispatch: bool = True
    lease_ttl: timedelta = timedelta(seconds=10)
    visibility_timeout: timedelta = timedelta(seconds=30)
    heartbeat: timedelta = timedelta(seconds=10)
    drain_grace: timedelta = timedelta(seconds=30)
    kill_grace: timedelta = timedelta(seconds=10)
    retention: timedelta = timedelta(days=30)
    # The leader vacuums the queue table this often (PostgreSQL; 0s: leave it to autovacuum).
    queue_vacuum_every: timedelta = timedelta(seconds=2)
    max_clock_skew: timedelta = timedelta(seconds=2)
    output_limit: int = 64 * 1024
    metrics_addr: str = "127.0.0.1:9464"
    # The api mode (clockd.api.server): HTTP/JSON under /v1.
    api_addr: str = "127.0.0.1:8470"
    api_tls_cert: str = ""
    api_tls_key: str = ""
    api_insecure: bool = False
    api_writes_per_second: int = 2000  # per tenant and api process; more answer 429
    log_format: str = "auto"
    log_level: str = "info"
    allowed_users: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_ALLOWED_USERS))
    # Schedule files applied (with prune) at start and on SIGHUP; "" = off.
    schedules_dir: str = ""
    # Daemon environment variables jobs inherit (names, or prefixes ending in *); see
    # clockd.runner.jobenv. CLOCKD_STORE, CLOCKD_ETCD and PG* never pass.
    job_env_passthrough: tuple[str, ...] = ()
    # Tenant ("*": every tenant) → CIDRs, addresses, host names or *.suffix patterns its
    # HTTP targets may / may not reach; see clockd.runner.egress for the default.
    http_allow: dict[str, tuple[str, ...]] = field(default_factory=dict)
    http_deny: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def with_values(self, values: Mapping[str, Any], source: str) -> Settings:
        """These settings with ``values`` (from ``source``) applied. Every bad value is
        reported, in one message: ``clockd check-config`` stopped at the first, so a file
        with two mistakes took two rounds to fix."""
        coerced: dict[str, Any] = {}
        problems: list[str] = []
        for key, value in values.items():
            try:
                coerced[key] = coerce(key, value, source)
            except InvalidInput as exc:
                problems.append(exc.message)
        if problems:
            raise InvalidInput("; ".join(problems))
        return dataclasses.replace(self, **coerced)

    def changed(self, other: Settings) -> list[str]:
        """The names of the settings whose values differ in ``other``."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) != getattr(other, f.name)]

    def public(self) -> dict[str, Any]:
        """The effective settings as plain values, secrets redacted."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, timedelta):
                value = format_duration(value)
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, dict):
                value = {k: list(v) for k, v in value.items()}
            if f.name == "store":
                value = resolve_store(value).display if value else resolve_store(None).display
            out[f.name] = value
        return out


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


def coerce(key: str, value: Any, source: str) -> Any:
    """Turn a file/env/flag value into the field's type, or say exactly what is wrong."""
    f = _FIELDS.get(key)
    if f is None:
        raise InvalidInput(f"{source}: unknown setting {key!r}")
    default = getattr(Settings(), key)
    try:
        if isinstance(default, timedelta):
            if isinstance(value, timedelta):
                return value
            try:
                return parse_duration(str(value))
            except InvalidInput as exc:
                raise InvalidInput(f"{source}: {key}: {exc.message}") from None
        if isinstance(default, dict):
            if key in ("http_allow", "http_deny"):
                return _egress_entries(value, source, key)
            return _allowed_users(value, source, key)
        if isinstance(default, bool):
            return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
        if isinstance(default, int):
            number = int(value)
            if number < 1 and key != "output_limit":
                raise ValueError
            return number
        if isinstance(default, tuple):
            items = value if isinstance(value, (list, tuple)) else str(value).split(",")
            result = tuple(str(i).strip() for i in items if str(i).strip())
            if key == "job_env_passthrough":
                bad = [p for p in result if not _ENV_PATTERN.fullmatch(p)]
                if bad:
                    raise InvalidInput(f"{source}: {key}: {bad[0]!r} is not a variable name (or a prefix ending in *)")
            if key == "modes":
                result = ALL_MODES if result in (("all",), ()) else result
                bad = [m for m in result if m not in ALL_MODES]
                if bad:
                    raise InvalidInput(
                        f"{source}: {key}: unknown mode {bad[0]!r} (choose from {', '.join(ALL_MODES)}, all)"
                    )
            return result
        text = str(value)
        choices = _CHOICES.get(key)
        if choices is not None and text.lower() not in choices:
            raise InvalidInput(f"{source}: {key}: {text!r} is not one of {', '.join(choices)}")
        return text.lower() if choices is not None else text
    except InvalidInput:
        raise
    except (TypeError, ValueError, OverflowError):
        raise InvalidInput(f"{source}: {key}: {value!r} is not a valid {type(default).__name__}") from None


_NAME = re.compile(r"[^\s:,;=\x00-\x1f\x7f]+")
_ENV_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?|\*")


def _allowed_users(value: Any, source: str, key: str) -> dict[str, tuple[str, ...]]:
    """A mapping tenant → user names, from YAML, or from a string: JSON, or
    ``tenant=user,user;tenant=user`` (environment and flags)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            import json

            try:
                value = json.loads(text)
            except ValueError:
                raise InvalidInput(f"{source}: {key}: not a valid JSON object") from None
        else:
            parsed: dict[str, Any] = {}
            for part in filter(None, (p.strip() for p in text.split(";"))):
                tenant, sep, users = part.partition("=")
                if not sep:
                    raise InvalidInput(f"{source}: {key}: expected TENANT=USER,USER;…, got {part!r}")
                parsed[tenant.strip()] = users
            value = parsed
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{source}: {key}: expected a mapping of tenant to a list of user names")
    out: dict[str, tuple[str, ...]] = {}
    for tenant, users in value.items():
        if not isinstance(tenant, str) or not _NAME.fullmatch(tenant):
            raise InvalidInput(f"{source}: {key}: {tenant!r} is not a valid tenant name")
        if users is None:
            items: list[Any] = []
        elif isinstance(users, str):
            items = [u.strip() for u in users.split(",") if u.strip()]
        elif isinstance(users, (list, tuple)):
            items = list(users)
        else:
            raise InvalidInput(f"{source}: {key}: {tenant}: expected a list of user names")
        for user in items:
            if not isinstance(user, str) or not _NAME.fullmatch(user):
                raise InvalidInput(f"{source}: {key}: {tenant}: {user!r} is not a valid user name (or *)")
        out[tenant] = tuple(items)
    return out


_HOST_ENTRY = re.compile(r"(\*\.)?[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?")


def _egress_entries(value: Any, source: str, key: str) -> dict[str, tuple[str, ...]]:
    """``http_allow``/``http_deny``: tenant → entries, each a CIDR, an address, a host
    name or ``*.suffix``. From a string: JSON, or ``tenant=a,b;tenant=c``."""
    import ipaddress
    import json

    if isinstance(value, str):
        text = value.strip()
        try:
            value = (
                json.loads(text)
                if text.startswith("{")
                else {t.strip(): v for t, _, v in (p.partition("=") for p in text.split(";") if p.strip())}
            )
        except ValueError:
            raise InvalidInput(f"{source}: {key}: not a valid JSON object") from None
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{source}: {key}: expected a mapping of tenant to a list of CIDRs or host names")
    out: dict[str, tuple[str, ...]] = {}
    for tenant, raw in value.items():
        if not isinstance(tenant, str) or not _NAME.fullmatch(tenant):
            raise InvalidInput(f"{source}: {key}: {tenant!r} is not a valid tenant name (or *)")
        entries = tuple(str(e).strip() for e in _items(raw))
        for entry in entries:
            try:
                ipaddress.ip_network(entry.strip("[]"), strict=False)
            except ValueError:
                if not _HOST_ENTRY.fullmatch(entry):
                    raise InvalidInput(
                        f"{source}: {key}: {tenant}: {entry!r} is not a CIDR, an address, a host name or *.domain"
                    ) from None
        out[tenant] = entries
    return out


def _items(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def env_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    out = {}
    for key in _FIELDS:
        name = f"CLOCKD_{key.upper()}"
        if env.get(name):
            out[key] = env[name]
    return out


def file_values(path: Path) -> dict[str, Any]:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read config: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: config is not UTF-8 text (byte {exc.start})") from None
    if len(text) > _MAX_CONFIG_BYTES:
        raise InvalidInput(f"{path}: config file larger than {_MAX_CONFIG_BYTES} bytes")
    if _flow_depth(text) > _MAX_NESTING:
        # PyYAML recurses per level: refuse early rather than after a slow RecursionError.
        raise InvalidInput(f"{path}: invalid YAML: nested more than {_MAX_NESTING} levels deep")
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise InvalidInput(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    except RecursionError:
        raise InvalidInput(f"{path}: invalid YAML: nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a !!timestamp that is no date
        raise InvalidInput(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{path}: expected a mapping of settings")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


_MAX_CONFIG_BYTES = 1024 * 1024
_MAX_NESTING = 64


def _flow_depth(text: str) -> int:
    """Deepest nesting of YAML flow collections ([…], {…}) outside quotes (roughly)."""
    depth = deepest = 0
    quote = ""
    for c in text:
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
        elif c == "\n":
            quote = ""
    return deepest


def load_settings(
    flags: Mapping[str, Any] | None = None,
    config_path: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    env = os.environ if env is None else env
    settings = Settings()
    path_text = config_path or env.get("CLOCKD_CONFIG")
    path = Path(path_text) if path_text else Path("/etc/clockd/clockd.yaml")
    if path_text or path.exists():
        settings = settings.with_values(file_values(path), str(path))
    settings = settings.with_values(env_values(env), "environment")
    if flags:
        settings = settings.with_values({k: v for k, v in flags.items() if v is not None}, "command line")
    check_together(settings)
    return settings


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidInput(f"api_addr: {addr!r} is not HOST:PORT (e.g. 127.0.0.1:8470)")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_listen(settings: Settings) -> tuple[str, int, bool]:
    """The api mode's host, port and whether it serves TLS; ``InvalidInput`` for what it
    refuses: half a TLS pair, or plain HTTP on a non-loopback address without
    ``api_insecure`` (bearer tokens would cross the network unencrypted). Checked by
    ``check_together`` too, so ``clockd check-config`` refuses what ``clockd run`` would."""
    host, port = split_addr(settings.api_addr)
    tls = bool(settings.api_tls_cert or settings.api_tls_key)
    if tls and not (settings.api_tls_cert and settings.api_tls_key):
        raise InvalidInput("api_tls_cert and api_tls_key go together: give both")
    if not is_loopback(host) and not tls and not settings.api_insecure:
        raise InvalidInput(
            f"api_addr {settings.api_addr} is not a loopback address: give --api-tls-cert and --api-tls-key, "
            "or --api-insecure to serve plain HTTP there anyway"
        )
    return host, port, tls


def check_together(settings: Settings) -> None:
    """What no single setting shows. A worker extends its running jobs' leases every
    ``heartbeat`` to ``visibility_timeout`` ahead: with a heartbeat as long as the lease, a
    healthy job's lease ran out and the job was started again beside itself (an operator's
    `heartbeat: 60s` with `visibility_timeout: 5s` ran one job three times at once). Half
    leaves one missed heartbeat of room; the defaults are a third."""
    if settings.heartbeat * 2 > settings.visibility_timeout:
        raise InvalidInput(
            f"heartbeat ({format_duration(settings.heartbeat)}) must be at most half of visibility_timeout "
            f"({format_duration(settings.visibility_timeout)}): a running job's lease would end before it is "
            "extended and the job be started again; e.g. heartbeat 10s with visibility_timeout 30s"
        )
    if "api" in settings.modes:
        api_listen(settings)
