"""``clockd``: run the scheduler (``run``), prepare the database (``migrate``), check config.

Exit codes: 0 ok, 1 error, 2 bad input or config, 4 store unreachable/locked/
wrong schema, 5 etcd unreachable, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from clockd import __version__
from clockd.buildinfo import describe
from clockd.config import ALL_MODES, LOG_FORMATS, LOG_LEVELS, Settings, load_settings, resolve_store
from clockd.core.zones import tzdata_version
from clockd.daemon import sdnotify
from clockd.daemon.httpd import serve
from clockd.daemon.reload import Reloader, concurrency_setter
from clockd.errors import ClockdError, InvalidInput
from clockd.obs import metrics
from clockd.obs.health import STORE_WRITES
from clockd.obs.logging import setup_logging

log = logging.getLogger("clockd")


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as clockd's one line (``clockd: error: …``, exit 2) instead
    of the usage block before them; ``--help`` still prints the usage."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"clockd: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="clockd",
        description="clockd: a cron replacement whose clockwork survives a machine dying.",
    )
    parser.add_argument("--version", action="version", version=describe("clockd"))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config",
            metavar="FILE",
            help="daemon config file (default /etc/clockd/clockd.yaml if present; CLOCKD_CONFIG)",
        )
        p.add_argument(
            "--store",
            metavar="URL",
            help="sqlite:///PATH or postgresql://… (CLOCKD_STORE; default sqlite at $CLOCKD_HOME/clockd.db)",
        )
        p.add_argument(
            "--log-format",
            choices=LOG_FORMATS,
            help="log line format (default auto)",
        )
        p.add_argument("--log-level", choices=LOG_LEVELS, help="(default info)")

    run = sub.add_parser("run", help="run the scheduler (every mode by default)")
    common(run)
    run.add_argument(
        "--mode",
        dest="modes",
        metavar="MODES",
        help=f"comma-separated modes: {', '.join(ALL_MODES)} or all (default all)",
    )
    run.add_argument(
        "--etcd",
        metavar="URLS",
        help="comma-separated etcd endpoints http://host:port (CLOCKD_ETCD)",
    )
    run.add_argument("--cluster", metavar="NAME", help="cluster name, to share one etcd (default default)")
    run.add_argument("--node-id", metavar="ID", help="this process's name among members (default hostname)")
    run.add_argument(
        "--queue",
        dest="queues",
        action="append",
        metavar="NAME",
        help="queue a worker serves (repeatable; default default)",
    )
    run.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="jobs a worker runs at once (default: number of CPUs)",
    )
    run.add_argument(
        "--shard-count",
        type=int,
        metavar="N",
        help="logical shards (default 64; fixed for a cluster)",
    )
    run.add_argument("--horizon", metavar="DURATION", help="how far ahead the materializer plans (default 2m)")
    run.add_argument(
        "--visibility-timeout",
        metavar="DURATION",
        help="worker lease on a claimed job (default 30s)",
    )
    run.add_argument(
        "--heartbeat",
        metavar="DURATION",
        help="how often a worker extends its leases (default 10s)",
    )
    run.add_argument("--lease-ttl", metavar="DURATION", help="etcd lease TTL for leader and shards (default 10s)")
    run.add_argument(
        "--drain-grace",
        metavar="DURATION",
        help="on SIGTERM, how long running jobs may finish (default 30s)",
    )
    run.add_argument(
        "--kill-grace",
        metavar="DURATION",
        help="between SIGTERM and SIGKILL of a job (default 10s)",
    )
    run.add_argument("--retention", metavar="DURATION", help="history kept (default 30d)")
    run.add_argument(
        "--max-clock-skew",
        metavar="DURATION",
        help="offset from the database clock above which a leader or materializer steps down (default 2s)",
    )
    run.add_argument(
        "--metrics-addr",
        metavar="HOST:PORT",
        help="Prometheus /metrics and /healthz (default 127.0.0.1:9464; 'off' to disable)",
    )

    run.add_argument(
        "--api-addr",
        metavar="HOST:PORT",
        help="the api mode's HTTP address (default 127.0.0.1:8470; 'off' to disable)",
    )
    run.add_argument("--api-tls-cert", metavar="FILE", help="serve the API over TLS with this certificate (PEM)")
    run.add_argument("--api-tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    run.add_argument(
        "--api-insecure",
        action="store_true",
        default=None,
        help="allow plain HTTP on a non-loopback --api-addr (logged as a warning)",
    )

    mig = sub.add_parser("migrate", help="apply database migrations")
    common(mig)
    mig.add_argument(
        "--create-roles",
        action="store_true",
        help="PostgreSQL: also create the clockd_daemon, clockd_operator and clockd_readonly roles",
    )

    check = sub.add_parser("check-config", help="validate and print the effective config (secrets redacted)")
    common(check)
    sub.add_parser("version", help="print the version, the git commit and the IANA zone data release")
    # Handled before argparse by clockctl.multicall (the installed `clockd`): listed here for --help.
    sub.add_parser("ctl", help="run clockctl: `clockd ctl ARGS…` is `clockctl ARGS…`", add_help=False)
    return parser


_FLAG_KEYS = (
    "store", "log_format", "log_level", "modes", "etcd", "cluster", "node_id", "queues",
    "concurrency", "shard_count", "horizon", "visibility_timeout", "heartbeat", "lease_ttl",
    "drain_grace", "kill_grace", "retention", "max_clock_skew", "metrics_addr",
    "api_addr", "api_tls_cert", "api_tls_key", "api_insecure",
)  # fmt: skip


def settings_from_args(args: argparse.Namespace) -> Settings:
    flags: dict[str, Any] = {k: getattr(args, k, None) for k in _FLAG_KEYS}
    return load_settings(flags, getattr(args, "config", None))


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        sys.exit(2)
    if args.command == "version":
        sys.stdout.write(describe("clockd") + "\n")
        return
    if args.command == "ctl":
        sys.stderr.write("clockd: error: `clockd ctl` needs the installed clockd executable; run clockctl instead\n")
        sys.exit(2)
    try:
        settings = settings_from_args(args)
        setup_logging(settings.log_format, settings.log_level)
        if args.command == "check-config":
            sys.stdout.write(json.dumps(settings.public(), indent=2) + "\n")
            return
        if args.command == "migrate":
            applied = asyncio.run(_migrate(settings, args.create_roles))
            sys.stderr.write(
                f"applied {len(applied)} migration(s): {', '.join(applied)}\n" if applied else "schema is up to date\n"
            )
            return
        code = asyncio.run(_run(settings, lambda: settings_from_args(args)))
    except ClockdError as exc:
        sys.stderr.write(f"clockd: error: {exc.message}\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code)


async def _migrate(settings: Settings, create_roles: bool = False) -> list[str]:
    from clockd.wiring import create_roles as make_roles
    from clockd.wiring import make_store

    location = resolve_store(settings.store)
    store = make_store(location, daemon=True)
    try:
        if location.kind == "sqlite":
            # The embedded store applies its migrations when it opens (zero setup);
            # opening it here is the migration, and it logs each one it applies.
            await store.open()
            if create_roles:
                raise InvalidInput("--create-roles applies to a PostgreSQL store only")
        applied = await store.migrate()
        if create_roles:
            await make_roles(store)
            log.info(
                "roles created or refreshed: clockd_daemon, clockd_operator, clockd_readonly",
                extra={"action": "roles_created"},
            )
        return applied
    finally:
        await store.close()


async def _run(settings: Settings, read: Callable[[], Settings] | None = None) -> int:
    """Run the modes until SIGTERM/SIGINT. ``read`` re-reads the settings on SIGHUP.

    What runs is composed by ``clockd.wiring.build_daemon``; this is the process's edge:
    signals, reload, health, sd_notify, and closing what was opened."""
    from clockd.wiring import Faults, build_daemon

    daemon = build_daemon(settings, faults=Faults.from_environ())
    store, coord, runner, clock, supervisor = daemon.store, daemon.coord, daemon.runner, daemon.clock, daemon.supervisor
    metrics.watch_coordinator(coord)
    metrics.watch_store(store)

    opened = False
    probed_at: float | None = None  # the last write probe (monotonic) and its error
    probe_error: str | None = None

    async def write_probe() -> str | None:
        """The store's write probe, at most once a second (a scraper polling /healthz
        must not queue writes behind the daemon's): None, or why it cannot write."""
        nonlocal probed_at, probe_error
        now = clock.monotonic()
        if probed_at is None or now - probed_at >= 1.0:
            try:
                await store.probe_write()
                probe_error = None
            except ClockdError as exc:
                probe_error = exc.message
            probed_at = now
        return probe_error

    async def health() -> tuple[bool, dict[str, Any]]:
        if not opened:
            return False, {"modes": list(settings.modes), "starting": True}
        status = await coord.status()
        doc: dict[str, Any] = {
            "modes": list(settings.modes),
            "leader": coord.leader_lease() is not None,
            "shards": len(coord.shard_leases()),
            "coordinator_reachable": status.reachable,
        }
        try:
            await store.server_time()
            doc["store_reachable"] = True
        except ClockdError:
            doc["store_reachable"] = False
        # Reads may work while every write fails (disk full): degraded, not healthy. The
        # modes' own failures first; else a probe, since an idle daemon writes nothing.
        write_error = STORE_WRITES.failing()
        if write_error is None and doc["store_reachable"]:
            write_error = await write_probe()
        doc["store_writable"] = write_error is None
        if write_error is not None:
            doc["store_error"] = write_error
        return bool(doc["store_reachable"] and doc["store_writable"] and status.reachable), doc

    # The metrics port before the store: a port in use is exit 2 before anything is
    # written (it created and migrated a new embedded store first). Until the store is
    # open, /healthz answers unhealthy.
    server = None
    if settings.metrics_addr and settings.metrics_addr != "off":
        server = await serve(settings.metrics_addr, health)
    try:
        await daemon.open()
    except BaseException:
        if server is not None:
            server.close()
        raise
    opened = True

    metrics.tzdata_info.labels(version=tzdata_version()).set(1)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if stopping.is_set():
            return
        log.info(
            "%s: stopping (running jobs get %s to finish)",
            signal.Signals(signum).name,
            settings.drain_grace,
            extra={"action": "stopping"},
        )
        sdnotify.notify("STOPPING=1")
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)

    # SIGHUP: re-read the config; apply what can change live (clockd.daemon.reload).
    reloader = Reloader(
        settings,
        read or (lambda: settings),
        store,
        clock,
        concurrency_setter(supervisor.services.get("worker")),
        daemon.egress,
    )
    reloads: set[asyncio.Task[None]] = set()

    def on_hup() -> None:
        log.info("SIGHUP: reloading the config", extra={"action": "config_reload"})
        task = asyncio.create_task(reloader.reload())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, on_hup)
    await reloader.start()  # schedules_dir, before the modes run

    watchdog = sdnotify.watchdog_interval()
    pinger: asyncio.Task[None] | None = None
    if watchdog:

        async def ping() -> None:
            while True:
                sdnotify.notify("WATCHDOG=1")
                await asyncio.sleep(watchdog)

        pinger = asyncio.create_task(ping())

    def ready() -> None:
        sdnotify.notify(f"READY=1\nSTATUS=clockd {__version__}: {', '.join(settings.modes)}")

    try:
        await supervisor.run(stopping, ready)
    finally:
        if pinger is not None:
            pinger.cancel()
        if server is not None:
            server.close()
        await runner.aclose()
        with contextlib.suppress(ClockdError):
            await store.close()
    log.info("clockd stopped", extra={"action": "stopped"})
    return 0
