"""The one place that picks concrete adapters for the ports."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from clockd.config import Settings, StoreLocation, resolve_store
from clockd.coord import Coordinator
from clockd.store import Store

if TYPE_CHECKING:
    from clockd.runner.dispatch import DispatchRunner
    from clockd.runner.egress import EgressPolicy


def make_store(location: StoreLocation | str | None, *, daemon: bool = False, create: bool = True) -> Store:
    """``daemon``: the embedded store's owner rule and integrity check (``clockd run``,
    ``migrate``); ``create``: a missing embedded store may be made (writing verbs)."""
    if not isinstance(location, StoreLocation):
        location = resolve_store(location)
    if location.kind == "postgresql":
        from clockd.store.postgres.store import PostgresStore

        return PostgresStore(location.target)
    from clockd.store.sqlite.store import SqliteStore

    return SqliteStore(Path(location.target), create=create, owner_only=daemon)


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
        from clockd.errors import InvalidInput

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


def lock_path(location: StoreLocation) -> Path:
    """The embedded store's lock file: held by the one clockd running on that database."""
    return Path(location.target + ".lock")


def make_runner(settings: Settings | None = None) -> DispatchRunner:
    """Commands, HTTP requests and no-ops, with the daemon's ``allowed_users`` policy."""
    from clockd.runner.cgroups import Cgroups, detect
    from clockd.runner.dispatch import DispatchRunner
    from clockd.runner.http import HttpRunner
    from clockd.runner.identity import UserPolicy
    from clockd.runner.process import ProcessRunner

    settings = settings or Settings()
    policy = UserPolicy(settings.allowed_users)
    support = detect()
    logging.getLogger("clockd").log(
        logging.INFO if support.contained else logging.WARNING,
        "job containment: %s",
        support.describe(),
        extra={"action": "job_containment", "cgroup": str(support.v2) if support.v2 else None},
    )
    return DispatchRunner(
        ProcessRunner(
            policy=policy,
            env_passthrough=settings.job_env_passthrough,
            cgroups=Cgroups(support, join_in_child=not settings.etcd),
        ),
        HttpRunner(policy=policy, egress=egress_policy(settings)),
    )


def egress_policy(settings: Settings) -> EgressPolicy:
    """The tenants' HTTP egress policy, with clockd's own store and etcd denied."""
    from clockd.runner.egress import EgressPolicy

    return EgressPolicy.from_settings(settings.http_allow, settings.http_deny, settings.store, settings.etcd)
