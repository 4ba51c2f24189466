"""The one place that picks concrete adapters for the ports, and composes a daemon.

Everything above this module (``clockd.daemon``, ``clockctl``) reaches a store, a
coordinator or a runner through the functions here and never imports an adapter
(``clockd.store.sqlite``/``postgres``, ``clockd.coord.local``/``etcd``,
``clockd.runner.process``/``http``); import-linter holds them to it.

Composition of ``clockd run``: :func:`build_daemon` resolves the store, builds the
coordinator and runner, and :func:`build_modes` builds each mode the settings ask for
from :data:`MODES`, a table of name → builder. **Adding a mode** is: its name in
``clockd.config.ALL_MODES``, a builder ``def _api(parts: Parts) -> Service | None`` here
(None: off in this process), and one entry in :data:`MODES` (a unit test checks the table
and ``ALL_MODES`` agree). Work that must finish after the modes stop but before the
coordinator gives up its leases goes in the supervisor's ``drain`` list. The
supervisor runs what the table built; the daemon's edge (signals, reload, health,
``sd_notify``) does not change.

Test hooks (fault injection for the failure drills) are read in one place only,
:meth:`Faults.from_environ`, called by the daemon's entry point; they are off (unset)
unless a drill sets them, and no setting, flag or config key exposes them:

* ``CLOCKD_FAULT_HOLD_WHILE`` (a path): the materializer holds each batch, and the
  leader each tick, between its lease check and its write for as long as the file
  exists, as a GC pause, a VM migration or a partition would, so a drill can make a
  node attempt its write after its lease deadline and show the fence turning it away
  (``tests/e2e/test_drills.py``, ``tests/e2e/test_partitions.py``). The drill ends the
  pause by removing the file: a pause of a fixed length raced the drill's own steps
  on a loaded machine.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final

from clockd.config import Settings, StoreLocation, resolve_store
from clockd.coord import Coordinator
from clockd.core.clock import Clock, SystemClock
from clockd.errors import InvalidInput
from clockd.runner import Runner
from clockd.store import Store

# Modes and adapters are imported where they are built: clockctl imports this module
# for make_store and must not pay for the daemon's modes (metrics, runners) at start.
if TYPE_CHECKING:
    from clockd.coord.local import LockHolder
    from clockd.modes.clockwatch import ClockWatch
    from clockd.modes.supervisor import Service, Supervisor
    from clockd.runner.cgroups import Support
    from clockd.runner.dispatch import DispatchRunner
    from clockd.runner.egress import EgressPolicy, LiveEgress
    from clockd.runner.notify import Notifier


# -- adapters ---------------------------------------------------------------------------------


# How long PostgreSQL lets a connection of clockctl (or `clockd migrate`) sit inside a
# transaction before it ends the session: an operator's command suspended there (Ctrl-Z,
# a paused terminal) would otherwise hold its row locks — a schedule row the
# materializer's cursor move then waits on — until resumed. Generous: the gaps between a
# command's statements are milliseconds (the reconciler's snapshot is exempt, as in the
# daemon); `clockd run` uses the shorter daemon_stall_limit.
OPERATOR_STALL_LIMIT: Final = timedelta(minutes=1)


def make_store(
    location: StoreLocation | str | None,
    *,
    daemon: bool = False,
    create: bool = True,
    idle_in_transaction_timeout: timedelta | None = OPERATOR_STALL_LIMIT,
) -> Store:
    """``daemon``: the embedded store's owner rule and integrity check (``clockd run``,
    ``migrate``); ``create``: a missing embedded store may be made (writing verbs);
    ``idle_in_transaction_timeout``: how long PostgreSQL lets a connection sit inside a
    transaction before it ends the session (``OPERATOR_STALL_LIMIT`` unless given:
    ``clockd run`` gives ``daemon_stall_limit``)."""
    if not isinstance(location, StoreLocation):
        location = resolve_store(location)
    if location.kind == "postgresql":
        from clockd.store.postgres.store import PostgresStore

        return PostgresStore(location.target, idle_in_transaction_timeout=idle_in_transaction_timeout)
    from clockd.store.sqlite.store import SqliteStore

    return SqliteStore(Path(location.target), create=create, owner_only=daemon)


def daemon_stall_limit(settings: Settings) -> timedelta:
    """How long a ``clockd run`` connection may sit inside a transaction: the shorter of
    the coordination lease's TTL and the visibility timeout. A process stalled that long
    has lost its shard (its fence is stale) and its workers' leases have run out, so the
    row locks it still holds protect nothing — but they would keep the reaper from its
    runs and a new shard owner from the fence row for as long as the stall lasts."""
    return min(settings.lease_ttl, settings.visibility_timeout)


async def create_roles(store: Store) -> None:
    """PostgreSQL's ``clockd_daemon``, ``clockd_operator`` and ``clockd_readonly`` roles
    (``clockd migrate --create-roles``); ``InvalidInput`` for any other store."""
    from clockd.store.postgres.store import PostgresStore

    if not isinstance(store, PostgresStore):
        raise InvalidInput("--create-roles applies to a PostgreSQL store only")
    await store.create_roles()


def make_coordinator(settings: Settings, store: Store, location: StoreLocation) -> Coordinator:
    if settings.etcd:
        from clockd.coord.etcd import EtcdCoordinator

        return EtcdCoordinator(
            settings.etcd,
            cluster=settings.cluster,
            node_id=settings.node_id,
            shard_count=settings.shard_count,
            ttl=settings.lease_ttl.total_seconds(),
        )
    if location.kind != "sqlite":
        raise InvalidInput(
            "a PostgreSQL store is shared by several processes: pass --etcd (or CLOCKD_ETCD) so they coordinate"
        )
    from clockd.coord.local import LocalCoordinator

    return LocalCoordinator(
        store,
        lock_path(location),
        node_id=settings.node_id,
        shard_count=settings.shard_count,
    )


def make_observer(settings: Settings, node_id: str) -> Coordinator | None:
    """A coordinator that only looks (``clockctl status`` reads ``status()``, then
    ``stop()``s it; it never starts, so it holds no lease): etcd's when the settings name
    one, else None (an embedded store's lock is read with :func:`lock_holder`)."""
    if not settings.etcd:
        return None
    from clockd.coord.etcd import EtcdCoordinator

    return EtcdCoordinator(settings.etcd, cluster=settings.cluster, node_id=node_id, shard_count=settings.shard_count)


def lock_path(location: StoreLocation) -> Path:
    """The embedded store's lock file: held by the one clockd running on that database."""
    return Path(location.target + ".lock")


def lock_holder(location: StoreLocation) -> LockHolder:
    """Who holds the embedded store's lock, found without taking it."""
    from clockd.coord.local import lock_holder as holder

    return holder(lock_path(location))


def make_runner(settings: Settings | None = None, egress: LiveEgress | None = None) -> DispatchRunner:
    """Commands, HTTP requests and no-ops, with the daemon's ``allowed_users`` policy and
    its egress policy (``egress``: the live one SIGHUP replaces; default: from ``settings``)."""
    from clockd.runner.cgroups import Cgroups, detect
    from clockd.runner.dispatch import DispatchRunner
    from clockd.runner.http import HttpRunner
    from clockd.runner.identity import UserPolicy
    from clockd.runner.process import ProcessRunner

    settings = settings or Settings()
    policy = UserPolicy(settings.allowed_users)
    support = detect()
    return DispatchRunner(
        ProcessRunner(
            policy=policy,
            env_passthrough=settings.job_env_passthrough,
            cgroups=Cgroups(support),
        ),
        HttpRunner(policy=policy, egress=egress if egress is not None else egress_policy(settings)),
    )


def log_containment() -> Support:
    """Say once, when the daemon has its store, what jobs started here run in; returns
    what was found."""
    from clockd.runner.cgroups import detect

    support = detect()
    logging.getLogger("clockd").log(
        logging.INFO if support.contained else logging.WARNING,
        "job containment: %s",
        support.describe(),
        extra={"action": "job_containment", "cgroup": str(support.v2) if support.v2 else None},
    )
    return support


def sweep_stale_cgroups(support: Support | None = None) -> None:
    """Remove the empty job cgroups that daemons killed before their shutdown left behind
    (``clockd.runner.cgroups``: a group with a process in it is kept); ``support``: what
    ``detect()`` found (found again when not given)."""
    from clockd.runner.cgroups import Cgroups, detect

    Cgroups(support or detect()).sweep_stale()


def egress_policy(settings: Settings) -> EgressPolicy:
    """The tenants' HTTP egress policy, with clockd's own store and etcd denied."""
    from clockd.runner.egress import EgressPolicy

    return EgressPolicy.from_settings(settings.http_allow, settings.http_deny, settings.store, settings.etcd)


# -- test hooks -------------------------------------------------------------------------------

HOLD_WHILE: Final = "CLOCKD_FAULT_HOLD_WHILE"


@dataclass(frozen=True, slots=True)
class Faults:
    """Fault injection for the failure drills; all off (None) in production."""

    hold_while: str | None = None  # the materializer (a batch) and leader (a tick) hold while it exists

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Faults:
        """The only reader of the ``CLOCKD_FAULT_*`` variables (see the module docstring)."""
        env = os.environ if environ is None else environ
        return cls(hold_while=env.get(HOLD_WHILE) or None)


# -- modes ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Parts:
    """What a mode is built from: the ports, the clock, and the process's settings."""

    settings: Settings
    store: Store
    coord: Coordinator
    runner: Runner
    clock: Clock
    clock_watch: ClockWatch  # shared by the leader and the materializer: one offset, one verdict
    notifier: Notifier  # one per process: every mode's notifications go through the runner
    faults: Faults = field(default_factory=Faults)
    egress: LiveEgress | None = None  # the daemon's live egress policy (None: from settings)


def _leader(parts: Parts) -> Service:
    from clockd.modes.leader import Leader, LeaderSettings
    from clockd.modes.sampler import SamplerSettings

    settings = LeaderSettings(
        retention=parts.settings.retention,
        queue_vacuum_every=parts.settings.queue_vacuum_every.total_seconds(),
        # After a store error the reaper waits one visibility timeout: a worker that could
        # not record an outcome (a full disk) extends the same lease and records it then.
        reap_hold=parts.settings.visibility_timeout.total_seconds(),
        # Two materializer horizons: by then every instant of the window was in reach.
        sampler=SamplerSettings(reconcile_margin=2 * parts.settings.horizon),
        hold_while=parts.faults.hold_while,
    )
    return Leader(parts.store, parts.coord, parts.clock, settings, parts.clock_watch, parts.notifier)


def _materializer(parts: Parts) -> Service:
    from clockd.modes.materializer import Materializer, MaterializerSettings

    settings = MaterializerSettings(
        horizon=parts.settings.horizon,
        direct=parts.settings.direct_dispatch,
        hold_while=parts.faults.hold_while,
    )
    return Materializer(parts.store, parts.coord, parts.clock, settings, parts.clock_watch, parts.notifier)


def _relay(parts: Parts) -> Service:
    from clockd.modes.relay import Relay, RelaySettings

    return Relay(parts.store, parts.clock, RelaySettings(lead=parts.settings.relay_lead))


def _worker(parts: Parts) -> Service:
    from clockd.modes.worker import Worker, WorkerSettings

    s = parts.settings
    settings = WorkerSettings(
        queues=s.queues,
        concurrency=s.concurrency,
        lease_for=s.visibility_timeout,
        heartbeat=s.heartbeat.total_seconds(),
        drain_grace=s.drain_grace.total_seconds(),
        kill_grace=s.kill_grace.total_seconds(),
        output_limit=s.output_limit,
        worker_id=f"{s.node_id}:{os.getpid()}",
    )
    # A worker whose clock is off claims nothing (its claims use its own time).
    return Worker(
        parts.store, parts.runner, parts.clock, settings, clock_watch=parts.clock_watch, notifier=parts.notifier
    )


# Every mode ``clockd run --mode`` accepts, in the order its task starts. A builder may
# return None when its settings turn it off in this process (e.g. an address of "off").
def _api(parts: Parts) -> Service | None:
    """The HTTP API and the dashboard (clockd.api.server). Its socket is bound here, while
    the daemon is composed: a taken port or an unsafe address is a one-line config error
    (exit 2) before the daemon reports ready."""
    if parts.settings.api_addr == "off":
        return None
    from clockd.api.server import build_api_server

    return build_api_server(parts.settings, parts.store, parts.clock, parts.coord, egress=parts.egress)


MODES: Final[Mapping[str, Callable[[Parts], Service | None]]] = {
    "leader": _leader,
    "materializer": _materializer,
    "relay": _relay,
    "worker": _worker,
    "api": _api,
}

# Modes that act on the store's clock and so step down when this host's clock is off.
_WATCHED: Final = frozenset({"leader", "materializer", "worker"})


def build_modes(parts: Parts, modes: tuple[str, ...]) -> dict[str, Service]:
    """The services that run ``modes`` (name → service), the clock watch first when a
    mode needs it. An unknown name is refused by the settings before it gets here."""
    services: dict[str, Service] = {}
    if _WATCHED.intersection(modes):
        services["clock-watch"] = parts.clock_watch
    for name, build in MODES.items():
        if name in modes and (service := build(parts)) is not None:
            services[name] = service
    return services


@dataclass(frozen=True, slots=True)
class Daemon:
    """One ``clockd run`` process, composed but not started: its adapters and modes."""

    settings: Settings
    location: StoreLocation
    store: Store
    coord: Coordinator
    runner: DispatchRunner
    clock: Clock
    supervisor: Supervisor
    egress: LiveEgress  # http_allow / http_deny as they are now: SIGHUP replaces it

    async def open(self) -> None:
        """Lock first (embedded store): a second clockd on the same file must not even
        migrate; then open (and, embedded, migrate) the store."""
        from clockd.coord.local import LocalCoordinator

        if isinstance(self.coord, LocalCoordinator):
            self.coord.acquire_lock()
        await self.store.open()
        sweep_stale_cgroups(log_containment())


def build_daemon(settings: Settings, *, faults: Faults | None = None, clock: Clock | None = None) -> Daemon:
    """Compose ``clockd run`` from its settings (nothing is opened or started)."""
    from clockd.modes.clockwatch import ClockWatch
    from clockd.modes.supervisor import NOTIFY_DRAIN, Supervisor
    from clockd.runner.egress import LiveEgress
    from clockd.runner.notify import Notifier

    location = resolve_store(settings.store)
    store = make_store(location, daemon=True, idle_in_transaction_timeout=daemon_stall_limit(settings))
    coord = make_coordinator(settings, store, location)
    egress = LiveEgress(egress_policy(settings))
    runner = make_runner(settings, egress)
    clock = clock or SystemClock()
    parts = Parts(
        settings=settings,
        store=store,
        coord=coord,
        runner=runner,
        clock=clock,
        # A node whose clock is off hands its leadership and shards over (stand_by).
        # Every measurement shows in the member record (clockctl status, the dashboard).
        clock_watch=ClockWatch(
            store, clock, settings.max_clock_skew, on_change=coord.stand_by, on_measure=coord.publish_clock
        ),
        notifier=(notifier := Notifier(runner, store.get_schedule_by_id)),
        faults=faults or Faults(),
        egress=egress,
    )
    # Notifications still in flight when the modes stop get NOTIFY_DRAIN seconds, while
    # this process still holds its leases.
    supervisor = Supervisor(
        settings.modes,
        coord,
        build_modes(parts, settings.modes),
        drain=[lambda: notifier.drain(NOTIFY_DRAIN)],
    )
    return Daemon(settings, location, store, coord, runner, clock, supervisor, egress)
