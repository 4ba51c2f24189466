"""``clockctl status``: the cluster on one screen.

* coordination: with etcd (``--etcd``, ``CLOCKD_ETCD`` or ``etcd:`` in clockd.yaml) the
  leader node and its term (fencing token), the members with their modes and the
  shards each materializer holds; with the embedded store, whether a clockd holds the
  database's lock file, and its pid;
* lag from due to start over the last 5 and 60 minutes (p50/p95/p99), the backlog, the
  queue depth and oldest age per queue, the dead-letter queue's size;
* unaccounted occurrences: the reconciler over the last hour, ending two horizons
  before now (what the leader exports as ``clockd_occurrences_unaccounted``);
* the clock offset of this host to the store's clock.

``--watch`` redraws every 2 seconds until Ctrl-C (the reconciliation every 30 s).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from clockctl import context
from clockctl.output import OutputFormat, console, emit_json, handle_errors
from clockctl.render import iso
from clockd.config import Settings, StoreLocation, load_settings, resolve_store
from clockd.coord.local import lock_holder
from clockd.core.durations import format_duration
from clockd.errors import ClockdError
from clockd.reconcile import Report, run_reconcile
from clockd.store import LagStats, Store
from clockd.wiring import lock_path, make_store

Output = Annotated[OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")]
WATCH_EVERY = 2.0
RECONCILE_EVERY = timedelta(seconds=30)
RECONCILE_WINDOW = timedelta(hours=1)
LAG_WINDOWS = (("5m", timedelta(minutes=5)), ("60m", timedelta(minutes=60)))
PROBLEMS_SHOWN = 10


def reconcile_range(now: datetime, horizon: timedelta) -> tuple[datetime, datetime]:
    """The last hour, ending two horizons before now: by then every instant of it has been
    within the materializer's reach for a whole horizon (the leader uses the same range)."""
    end = now - 2 * horizon
    return end - RECONCILE_WINDOW, end


def register(app: typer.Typer) -> None:
    @app.command("status", epilog="Example: clockctl status --watch")
    @handle_errors
    def status(
        output: Output = OutputFormat.table,
        watch: Annotated[bool, typer.Option("--watch", help="redraw every 2 s until Ctrl-C")] = False,
        etcd: Annotated[
            str | None,
            typer.Option("--etcd", metavar="URLS", help="etcd endpoints (default: CLOCKD_ETCD, then clockd.yaml)"),
        ] = None,
        cluster: Annotated[
            str | None, typer.Option("--cluster", metavar="NAME", help="cluster name in etcd (default: clockd.yaml)")
        ] = None,
        config: Annotated[
            str | None,
            typer.Option("--config", metavar="FILE", help="clockd.yaml to read etcd, cluster and horizon from"),
        ] = None,
    ) -> None:
        """One screen: leader and term, members and shards (etcd) or the lock holder
        (embedded), lag p50/p95/p99 over 5 and 60 minutes, backlog, queues, dead letters,
        unaccounted occurrences of the last hour, and this host's clock offset to the store."""
        settings = load_settings({"etcd": etcd, "cluster": cluster}, config)
        location = resolve_store(context.state["store"])
        try:
            asyncio.run(_status(settings, location, output, watch))
        except KeyboardInterrupt:
            raise typer.Exit(0) from None


@dataclass
class _Cache:
    report: Report | None = None
    at: datetime | None = None


async def _status(settings: Settings, location: StoreLocation, output: OutputFormat, watch: bool) -> None:
    store = make_store(location, create=False)
    await store.open()
    cache = _Cache()
    try:
        doc = await gather(store, settings, location, cache)
        if not watch:
            if output is OutputFormat.json:
                emit_json(doc)
            else:
                console.print(render(doc))
            return
        if output is OutputFormat.json:
            while True:
                emit_json(doc)
                await asyncio.sleep(WATCH_EVERY)
                doc = await gather(store, settings, location, cache)
        with Live(render(doc), console=console, auto_refresh=False) as live:
            while True:
                await asyncio.sleep(WATCH_EVERY)
                doc = await gather(store, settings, location, cache)
                live.update(render(doc), refresh=True)
    finally:
        await store.close()


async def gather(
    store: Store, settings: Settings, location: StoreLocation, cache: _Cache | None = None
) -> dict[str, Any]:
    """The status document (``-o json``: a stable interface)."""
    cache = cache or _Cache()
    before = datetime.now(UTC)
    server = await store.server_time()
    now = datetime.now(UTC)
    offset = ((before + (now - before) / 2) - server).total_seconds()
    backlog = await store.backlog(now)
    queues = await store.queue_stats(now)
    lags = {label: await store.start_lag(now - span, now) for label, span in LAG_WINDOWS}
    dead = await store.dead_count()
    start, end = reconcile_range(now, settings.horizon)
    if cache.report is None or cache.at is None or now - cache.at >= RECONCILE_EVERY:
        cache.report, cache.at = await run_reconcile(store, start, end, keep_accounted=False), now
    report = cache.report
    return {
        "now": iso(now),
        "store": {"kind": location.kind, "location": location.display, "clock_offset_seconds": round(offset, 6)},
        "coordination": await _coordination(settings, location),
        # What jobs started on this host run in (clockd.runner.cgroups), as a worker here finds it.
        "job_containment": _containment(),
        "lag": {label: _lag_doc(stats) for label, stats in lags.items()},
        "backlog": {
            "due_schedules": backlog.due_schedules,
            "outbox": backlog.outbox,
            "queued": backlog.queued,
            "running": backlog.running,
            "oldest_queued_age_seconds": _age(now, backlog.oldest_queued_at),
        },
        "queues": [
            {
                "queue": q.queue,
                "ready": q.ready,
                "running": q.running,
                "staged": q.staged,
                "oldest_age_seconds": _age(now, q.oldest_ready_at),
            }
            for q in queues
        ],
        "dlq": dead,
        "unaccounted": {
            "count": report.unaccounted,
            "from": iso(report.start),
            "to": iso(report.end),
            "problems": [
                {"schedule": e.schedule, "instant": iso(e.instant), "problem": str(e.status), "detail": e.detail}
                for e in report.problems[:PROBLEMS_SHOWN]
            ],
        },
    }


async def _coordination(settings: Settings, location: StoreLocation) -> dict[str, Any]:
    if settings.etcd:
        from clockd.coord.etcd import EtcdCoordinator

        coord = EtcdCoordinator(
            settings.etcd,
            cluster=settings.cluster,
            node_id=f"clockctl-{os.getpid()}",
            shard_count=settings.shard_count,
        )
        try:
            found = await coord.status()
        except ClockdError:
            found = None
        finally:
            await coord.stop()
        return {
            "kind": "etcd",
            "cluster": settings.cluster,
            "endpoints": list(settings.etcd),
            "reachable": bool(found and found.reachable),
            "leader": (
                {"node": found.leader_node, "token": found.leader_token}
                if found is not None and found.leader_node is not None
                else None
            ),
            "members": [
                {"node": m.node_id, "modes": list(m.modes), "shards": list(m.shards)}
                for m in (found.members if found is not None else ())
            ],
        }
    if location.kind == "sqlite":
        holder = lock_holder(lock_path(location))
        return {
            "kind": "embedded",
            "lock": {"path": str(holder.path), "held": holder.held, "pid": holder.pid if holder.held else None},
            "leader": {"node": f"pid {holder.pid}", "token": None} if holder.held and holder.pid else None,
            "members": [],
        }
    return {
        "kind": "unknown",
        "note": "a PostgreSQL store is coordinated through etcd: pass --etcd (or CLOCKD_ETCD) to see the cluster",
        "leader": None,
        "members": [],
    }


def _lag_doc(stats: LagStats) -> dict[str, Any]:
    return {"count": stats.count, "p50": stats.p50, "p95": stats.p95, "p99": stats.p99}


def _age(now: datetime, since: datetime | None) -> float | None:
    return None if since is None else round(max(0.0, (now - since).total_seconds()), 3)


# -- rendering ------------------------------------------------------------------------------------


def _containment() -> str:
    from clockd.runner.cgroups import detect

    return detect().describe()


def render(doc: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = []
    coord = doc["coordination"]
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("store", f"{doc['store']['kind']} {doc['store']['location']}")
    head.add_row("clock offset", f"{doc['store']['clock_offset_seconds']:+.3f}s (this host minus the store's clock)")
    if coord["kind"] == "embedded":
        lock = coord["lock"]
        held = f"held by clockd pid {lock['pid']}" if lock["held"] else "not held: no clockd is running on it"
        head.add_row("clockd", f"{held} ({lock['path']})")
    elif coord["kind"] == "etcd":
        leader = coord["leader"]
        head.add_row("etcd", f"cluster {coord['cluster']} at {', '.join(coord['endpoints'])}"
                     + ("" if coord["reachable"] else " — UNREACHABLE"))  # fmt: skip
        head.add_row("leader", f"{leader['node']} (term {leader['token']})" if leader else "none")
    else:
        head.add_row("coordination", coord["note"])
    head.add_row("jobs", doc["job_containment"])
    backlog = doc["backlog"]
    head.add_row(
        "backlog",
        f"{backlog['due_schedules']} due schedules, {backlog['outbox']} in the outbox, {backlog['queued']} queued, "
        f"{backlog['running']} running",
    )
    head.add_row("dead letters", str(doc["dlq"]))
    unaccounted = doc["unaccounted"]
    style = "green" if unaccounted["count"] == 0 else "red"
    head.add_row(
        "unaccounted",
        Text(f"{unaccounted['count']} (reconciled {unaccounted['from']} to {unaccounted['to']})", style=style),
    )
    parts.append(head)

    if coord.get("members"):
        members = Table(title="members", title_justify="left", box=None, header_style="bold")
        for column in ("NODE", "MODES", "SHARDS"):
            members.add_column(column)
        for m in coord["members"]:
            leads = " (leader)" if coord["leader"] and coord["leader"]["node"] == m["node"] else ""
            members.add_row(m["node"] + leads, ",".join(m["modes"]), _shards(m["shards"]))
        parts.append(members)

    lag = Table(title="lag from due to start", title_justify="left", box=None, header_style="bold")
    for column in ("WINDOW", "COUNT", "P50", "P95", "P99"):
        lag.add_column(column, justify="right" if column != "WINDOW" else "left")
    for label, stats in doc["lag"].items():
        lag.add_row(label, str(stats["count"]), _secs(stats["p50"]), _secs(stats["p95"]), _secs(stats["p99"]))
    parts.append(lag)

    queues = Table(title="queues", title_justify="left", box=None, header_style="bold")
    for column in ("QUEUE", "READY", "RUNNING", "STAGED", "OLDEST READY"):
        queues.add_column(column, justify="right" if column != "QUEUE" else "left")
    for q in doc["queues"]:
        queues.add_row(q["queue"], str(q["ready"]), str(q["running"]), str(q["staged"]), _secs(q["oldest_age_seconds"]))
    if not doc["queues"]:
        queues.add_row("(empty)", "0", "0", "0", "-")
    parts.append(queues)

    if unaccounted["problems"]:
        problems = Table(title="unaccounted instants", title_justify="left", box=None, header_style="bold")
        for column in ("SCHEDULE", "INSTANT (UTC)", "PROBLEM"):
            problems.add_column(column)
        for p in unaccounted["problems"]:
            problems.add_row(p["schedule"], p["instant"], p["problem"])
        parts.append(problems)
    parts.append(Text(f"as of {doc['now']}", style="dim"))
    return Group(*parts)


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) < 120:
        return f"{value:.3f}s"
    return format_duration(timedelta(seconds=round(value)))


def _shards(shards: list[int]) -> str:
    """``0-15,32`` rather than 17 numbers."""
    if not shards:
        return "-"
    runs: list[str] = []
    first = prev = shards[0]
    for s in [*shards[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        runs.append(str(first) if first == prev else f"{first}-{prev}")
        if s is not None:
            first = prev = s
    return f"{len(shards)}: {','.join(runs)}"
