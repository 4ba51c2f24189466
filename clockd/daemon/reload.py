"""SIGHUP: re-read the config file, apply what can change live, and re-apply ``schedules_dir``.

Settings that change live (the rest are logged as needing a restart, and keep their
running value until then):

* ``log_level``, ``log_format``: the root logger is reconfigured at once;
* ``concurrency``: the worker claims up to the new number from its next claim on (a
  lower number never stops a running job: it claims nothing until enough finish);
* ``http_allow``, ``http_deny``: the egress policy is replaced at once — new HTTP
  connections, schedules written through the API and ``schedules_dir`` meet the new
  one (``clockd.runner.egress.LiveEgress``);
* ``schedules_dir``: the directory is applied again (below).

Everything else — store, etcd, cluster, node id, modes, queues, shard count,
horizon, leases, graces, retention, queue vacuum, clock skew, output limit, metrics address,
allowed users — is wired into connections, leases and running loops at start:
``clockd`` logs that a restart is needed (action ``config_reload_restart_needed``).

``schedules_dir`` is applied at start and on every SIGHUP exactly as ``clockctl apply
-f DIR --prune`` would, to the default tenant: creates, updates and deletes (only of
schedules created by apply) in one store transaction; an update or delete cancels
only occurrences no worker has claimed, so running jobs keep running. A directory
with any error (or no schedule file) applies nothing — an HTTP target the egress policy
refuses is such an error, as it is for ``clockctl apply`` — and the stored versions stay. Each outcome is one log line:
``schedules_applied`` (with the names), ``schedules_unchanged``,
``schedules_apply_refused`` or ``schedules_apply_failed``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable

from clockd.config import Settings
from clockd.core.clock import Clock
from clockd.errors import ClockdError
from clockd.formats.schedfile import LoadResult, load_paths
from clockd.modes.worker import Worker
from clockd.obs.logging import setup_logging
from clockd.runner.egress import EgressPolicy, LiveEgress
from clockd.services.ops import Ops, PlanAction
from clockd.store import Store
from clockd.wiring import egress_policy

log = logging.getLogger(__name__)

LIVE = ("log_level", "log_format", "concurrency", "schedules_dir", "http_allow", "http_deny")
SCHEDULES_TENANT = "default"


async def apply_schedules_dir(
    store: Store, clock: Clock, shard_count: int, directory: str, egress: Callable[[], EgressPolicy] | None = None
) -> bool:
    """Apply ``directory`` (with prune) to the default tenant; False when refused or failed.
    ``egress``: the policy HTTP targets must meet (the daemon always passes its own)."""
    path, loaded = await asyncio.to_thread(_load, directory)  # file reads, off the event loop
    if loaded.errors:
        log.error(
            "schedules_dir %s not applied: %s",
            path,
            "; ".join(str(e) for e in loaded.errors[:5]) + (" …" if len(loaded.errors) > 5 else ""),
            extra={"action": "schedules_apply_refused", "dir": path, "errors": len(loaded.errors)},
        )
        return False
    ops = Ops(store, clock, shard_count, egress=egress)
    try:
        plan = await ops.plan_apply([j.definition for j in loaded.jobs], SCHEDULES_TENANT, prune=True)
        if plan.problems:
            log.error(
                "schedules_dir %s not applied: %s",
                path,
                "; ".join(f"{loaded.jobs[p.index].where}: {p.message}" for p in plan.problems[:5]),
                extra={"action": "schedules_apply_refused", "dir": path, "errors": len(plan.problems)},
            )
            return False
        if not plan.changes:
            log.info(
                "schedules_dir %s: %d schedule(s), no changes",
                path,
                len(plan.items),
                extra={"action": "schedules_unchanged", "dir": path, "count": len(plan.items)},
            )
            return True
        result = await ops.apply_plan(plan)
    except ClockdError as exc:
        log.error(
            "schedules_dir %s not applied: %s",
            path,
            exc.message,
            extra={"action": "schedules_apply_failed", "dir": path},
        )
        return False
    names = {
        action: [i.name for i in plan.items if i.action is action]
        for action in (PlanAction.CREATE, PlanAction.UPDATE, PlanAction.DELETE)
    }
    log.info(
        "schedules_dir %s applied: %d created, %d updated, %d deleted, %d pending occurrence(s) canceled",
        path,
        len(result.created),
        len(result.updated),
        len(result.deleted),
        result.canceled,
        extra={
            "action": "schedules_applied",
            "dir": path,
            "schedules_created": names[PlanAction.CREATE],
            "schedules_updated": names[PlanAction.UPDATE],
            "schedules_deleted": names[PlanAction.DELETE],
            "canceled": result.canceled,
        },
    )
    return True


def concurrency_setter(service: object) -> Callable[[int], None] | None:
    """How to change a running worker's concurrency (None: no worker in this process)."""
    if not isinstance(service, Worker):
        return None
    worker = service

    def set_concurrency(concurrency: int) -> None:
        # The claim loop reads settings.concurrency before every claim.
        worker.settings = dataclasses.replace(worker.settings, concurrency=concurrency)

    return set_concurrency


def _load(directory: str) -> tuple[str, LoadResult]:
    path = os.path.expanduser(directory)
    return path, load_paths([path])


class Reloader:
    """Applies a re-read config to a running daemon (see the module docstring).

    ``read`` re-reads the settings (file, environment, the command line's flags);
    ``set_concurrency`` changes the worker's (None: no worker in this process);
    ``egress`` is the daemon's live egress policy (None: built from the settings here)."""

    def __init__(
        self,
        settings: Settings,
        read: Callable[[], Settings],
        store: Store,
        clock: Clock,
        set_concurrency: Callable[[int], None] | None,
        egress: LiveEgress | None = None,
    ) -> None:
        self.settings = settings
        self.read = read
        self.store, self.clock = store, clock
        self.set_concurrency = set_concurrency
        self.egress = egress if egress is not None else LiveEgress(egress_policy(settings))
        self._lock = asyncio.Lock()  # one reload at a time: SIGHUPs in a row queue up

    async def start(self) -> None:
        await self._apply_dir()

    async def _apply_dir(self) -> None:
        if self.settings.schedules_dir:
            s = self.settings
            await apply_schedules_dir(self.store, self.clock, s.shard_count, s.schedules_dir, self.egress)

    async def reload(self) -> None:
        async with self._lock:
            await self._reload()

    async def _reload(self) -> None:
        try:
            new = self.read()
        except ClockdError as exc:
            log.error(
                "config not reloaded: %s (the running settings stay)",
                exc.message,
                extra={"action": "config_reload_failed"},
            )
            return
        changed = self.settings.changed(new)
        live = [k for k in changed if k in LIVE]
        restart = [k for k in changed if k not in LIVE]
        if "log_level" in live or "log_format" in live:
            setup_logging(new.log_format, new.log_level)
        if "concurrency" in live and self.set_concurrency is not None:
            self.set_concurrency(new.concurrency)
        if "http_allow" in live or "http_deny" in live:
            # Resolves clockd's own store and etcd hosts (denied by address too): off the loop.
            self.egress.replace(await asyncio.to_thread(egress_policy, new))
        self.settings = dataclasses.replace(self.settings, **{k: getattr(new, k) for k in live})
        log.info(
            "config reloaded: %s",
            ", ".join(f"{k}={getattr(new, k)}" for k in live) or "no live setting changed",
            extra={"action": "config_reloaded", "changed": live},
        )
        if restart:
            log.warning(
                "config reloaded, but %s only take effect after a restart",
                ", ".join(restart),
                extra={"action": "config_reload_restart_needed", "settings": restart},
            )
        await self._apply_dir()
