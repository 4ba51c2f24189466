"""``clockctl status``: the cluster on one screen.

* coordination: with etcd (``--etcd``, ``CLOCKD_ETCD`` or ``etcd:`` in clockd.yaml) the
  leader node and its term (fencing token), the members with their modes and the
  shards each materializer holds; with the embedded store, whether a clockd holds the
  database's lock file, and its pid;
* lag from due to start over the last 5 and 60 minutes (p50/p95/p99), the backlog, the
  queue depth and oldest age per queue, the dead-letter queue's size;
* unaccounted occurrences: the reconciler over the last hour, ending two horizons
  before now (what the leader exports as ``clockd_occurrences_unaccounted``);
* the clock offset of this host to the store's clock, and (etcd) each member's own, as
  its clock watch last measured it, flagged when beyond its ``max_clock_skew``.

``--watch`` redraws every 2 seconds until Ctrl-C (the reconciliation every 30 s).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from clockctl import context
from clockctl.output import OutputFormat, console, emit_json, handle_errors
from clockd.config import Settings, StoreLocation, load_settings, resolve_store
from clockd.core.durations import format_duration
from clockd.errors import ClockdError
from clockd.store import Store
from clockd.wiring import lock_holder, make_observer, make_store

# rich's live display and the status document's module are imported when the verb runs:
# every clockctl command imports this module (start-up). clockctl.render still loads the
# latter (and the reconciler behind it) for its ``iso``: moving ``iso`` below them is next.
if TYPE_CHECKING:
    from clockd.services.status import ReconcileCache

Output = Annotated[OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")]
WATCH_EVERY = 2.0


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
        unaccounted occurrences of the last hour, and this host's clock offset to the store.
        With --server: all of it as the api process sees it (a cluster-admin token)."""
        remote = context.server()
        try:
            if remote is not None:  # the api process's view of the cluster (a cluster-admin token)
                asyncio.run(_remote_status(*remote, output, watch))
                return
            settings = load_settings({"etcd": etcd, "cluster": cluster}, config)
            location = resolve_store(context.state["store"])
            asyncio.run(_status(settings, location, output, watch))
        except KeyboardInterrupt:
            raise typer.Exit(0) from None


async def _status(settings: Settings, location: StoreLocation, output: OutputFormat, watch: bool) -> None:
    from clockd.services.status import ReconcileCache

    store = make_store(location, create=False)
    await store.open()
    cache = ReconcileCache()
    try:
        await _show(lambda: gather(store, settings, location, cache), output, watch)
    finally:
        await store.close()


async def _remote_status(server: str, token: str | None, output: OutputFormat, watch: bool) -> None:
    from clockctl.remote import RemoteOps
    from clockd.client import AsyncClient

    async with AsyncClient(server, token) as client:
        await _show(RemoteOps(client).cluster_status, output, watch)


async def _show(next_doc: Callable[[], Awaitable[dict[str, Any]]], output: OutputFormat, watch: bool) -> None:
    doc = await next_doc()
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
            doc = await next_doc()
    from rich.live import Live  # only for --watch (start-up)

    with Live(render(doc), console=console, auto_refresh=False) as live:
        while True:
            await asyncio.sleep(WATCH_EVERY)
            doc = await next_doc()
            live.update(render(doc), refresh=True)


async def gather(
    store: Store, settings: Settings, location: StoreLocation, cache: ReconcileCache | None = None
) -> dict[str, Any]:
    """The status document (``-o json``: a stable interface), with this host's view of the
    coordination (etcd, or the embedded store's lock)."""
    from clockd.services import status as status_doc

    coordination = await _coordination(settings, location)
    doc = await status_doc.gather(store, settings.horizon, location, coordination, cache)
    # What jobs started on this host run in (clockd.runner.cgroups), as a worker here finds it.
    doc["job_containment"] = _containment()
    return doc


async def _coordination(settings: Settings, location: StoreLocation) -> dict[str, Any]:
    from clockd.services import status as status_doc  # with the verb, not the module (start-up)

    coord = make_observer(settings, node_id=f"clockctl-{os.getpid()}")
    if coord is not None:
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
            "members": [status_doc.member_doc(m) for m in (found.members if found is not None else ())],
        }
    if location.kind == "sqlite":
        holder = lock_holder(location)
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


# -- rendering ------------------------------------------------------------------------------------


def _containment() -> str:
    from clockd.runner.cgroups import detect

    return detect().describe()


def render(doc: dict[str, Any]) -> RenderableType:
    from clockd.services.status import shard_ranges

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
        for column in ("NODE", "MODES", "SHARDS", "CLOCK OFFSET"):
            members.add_column(column)
        for m in coord["members"]:
            leads = " (leader)" if coord["leader"] and coord["leader"]["node"] == m["node"] else ""
            members.add_row(m["node"] + leads, ",".join(m["modes"]), shard_ranges(m["shards"]), clock_text(m))
            if m.get("standby"):
                # A node that stepped down (e.g. its clock is off) says why, under its row.
                members.add_row("", f"[yellow]standing by: {m['standby']}[/yellow]", "", "")
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


def clock_text(member: dict[str, Any]) -> Text:
    """A member's clock offset: red with its limit when beyond it, yellow when stale."""
    clock = member.get("clock")
    if not clock:
        return Text("-")  # no clock watch in this process (api-only), or not measured yet
    text = f"{clock['offset_seconds']:+.3f}s"
    if not clock["within_limit"]:
        return Text(f"{text} OVER LIMIT {clock['limit_seconds']:g}s", style="bold red")
    if clock.get("stale"):
        return Text(f"{text} (stale: {clock['age_seconds']:.0f}s old)", style="yellow")
    return Text(text, style="green")


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) < 120:
        return f"{value:.3f}s"
    return format_duration(timedelta(seconds=round(value)))
