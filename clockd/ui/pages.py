"""The dashboard's pages: Starlette routes mounted at ``/ui`` by the api mode.

Everything a page shows comes from the store port and the operator use cases
(:class:`clockd.services.ops.Ops`), the same ones ``clockctl`` and the HTTP API call, so
the dashboard never shows a different truth. See the package docstring for the
session, CSRF and tenant invariants; :meth:`Dashboard._own` is the tenant check
for anything reached by occurrence id.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets as token_bytes
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from clockd.core.clock import Clock
from clockd.core.durations import format_duration
from clockd.core.model import HttpTarget, Occurrence, OccurrenceState, Schedule, ScheduleKind, ScheduleState
from clockd.core.spec import Spec
from clockd.core.upcoming import Upcoming, upcoming_shared
from clockd.errors import ClockdError, NotFound
from clockd.services.ops import Ops, next_run, spec_of
from clockd.services.status import shard_ranges
from clockd.store import AuditEntry, LagHistogram, RunSummary, SchedulePage, Store
from clockd.ui.svg import LagPoint, histogram, lag_plot

_HERE = Path(__file__).parent
SESSION_COOKIE = "clockd_session"
LOGIN_COOKIE = "clockd_login"
PAGE_SIZE = 50
# How much of a run's stored output a page shows before "load all".
OUTPUT_TAIL = 4096
BURST_BINS = 12  # bars of the top-of-hour burst's histogram
AUDIT_SCAN = 500  # the tenant's newest audit entries searched for who changed a schedule, and why


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is signed in: the token's tenant, role and name (never from the request)."""

    tenant: str
    role: str  # readonly | operator | admin | cluster-admin
    name: str

    @property
    def can_operate(self) -> bool:
        return self.role in ("operator", "admin", "cluster-admin")

    @property
    def sees_cluster(self) -> bool:
        """The health page is the cluster's (members, backlog, dead letters and lag of every
        tenant): a cluster-admin's, as ``GET /v1/status?cluster=true`` and ``clockctl
        status`` are. It showed them to any token, another tenant's counts included."""
        return self.role == "cluster-admin"


Authenticate = Callable[[str], Awaitable[Viewer | None]]
HealthSource = Callable[[], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Row:
    """One schedule as the list shows it."""

    schedule: Schedule
    words: str
    next_runs: list[Upcoming]
    last: RunSummary | None  # its latest run that started (state, exit code), if any
    last_lag: float | None
    pause_reason: str | None = None  # why it is paused, when the audit log says


@dataclass(slots=True)
class _Page:
    title: str
    viewer: Viewer | None
    csrf: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def csrf_for(session_token: str) -> str:
    """The CSRF token of a session: HMAC of a fixed label under the session token.

    Stateless (any api process computes the same), unguessable without the
    cookie, which scripts cannot read (HttpOnly) and other sites cannot send
    (SameSite=Strict)."""
    return hmac.new(session_token.encode(), b"clockd-ui-csrf", hashlib.sha256).hexdigest()


def describe(schedule: Schedule) -> str:
    """The schedule's timing in words: "At 09:00 on Monday through Friday"."""
    try:
        return _words(spec_of(schedule))
    except ClockdError:
        return schedule.definition.expr


@lru_cache(maxsize=4096)
def _words(spec: Spec) -> str:
    """Once per spec (compile_spec shares one per expression and zone): pure, and the
    words cost as much as planning the next runs."""
    return spec.describe()


def local_text(instant: datetime, tz: str) -> str:
    from zoneinfo import ZoneInfo

    local = instant.astimezone(ZoneInfo(tz))
    return local.strftime("%a %Y-%m-%d %H:%M:%S %Z")


def local_short(instant: datetime, tz: str) -> str:
    """``Sat 2026-03-28 02:30 CET``: minutes are what a schedule names."""
    from zoneinfo import ZoneInfo

    return instant.astimezone(ZoneInfo(tz)).strftime("%a %Y-%m-%d %H:%M %Z")


def utc_short(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")


def utc_text(instant: datetime | None) -> str:
    return "—" if instant is None else instant.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def seconds_text(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) < 10:
        return f"{value:.2f}s"
    return format_duration(timedelta(seconds=round(value)))


def start_lag(occ: Occurrence) -> float | None:
    if occ.started_at is None:
        return None
    return (occ.started_at - occ.available_at).total_seconds()


class Dashboard:
    """The pages, over one store. ``authenticate`` turns a token into a :class:`Viewer`;
    ``health`` returns the cluster document ``clockctl status -o json`` prints (its
    ``unaccounted`` part may be a report some seconds old: ``checked_at`` says when)."""

    def __init__(
        self,
        store: Store,
        ops: Ops,
        clock: Clock,
        authenticate: Authenticate,
        health: HealthSource,
        *,
        secure_cookies: bool = False,
        warm: Callable[[], None] | None = None,
    ) -> None:
        self.store, self.ops, self.clock = store, ops, clock
        self.authenticate, self.health_source = authenticate, health
        # Called on every signed-in page: lets the health source start its slow work
        # (the reconciler) in the background before anyone opens the health page.
        self.warm = warm
        self.secure_cookies = secure_cookies
        self.templates = Environment(
            loader=FileSystemLoader(_HERE / "templates"),
            autoescape=select_autoescape(default=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters.update(
            utc=utc_text,
            secs=seconds_text,
            local=local_text,
            local_short=local_short,
            utc_short=utc_short,
            ranges=shard_ranges,
        )

    def routes(self) -> list[BaseRoute]:
        """Mount these at ``/ui``."""
        return [
            Route("/", self.home),
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/schedules", self.schedules),
            # A name may hold "/" (team/mail), as in the API: {name:path}, the routes with a
            # suffix after the name first (team/mail had no page: {name} stops at a "/").
            Route("/schedules/{name:path}/confirm/{action}", self.confirm_schedule_action),
            Route("/schedules/{name:path}/{action}", self.schedule_action, methods=["POST"]),
            Route("/schedules/{name:path}", self.schedule),
            Route("/runs/{occurrence_id}", self.run),
            Route("/dlq", self.dlq),
            Route("/dlq/{occurrence_id}/confirm/{action}", self.confirm_dlq_action),
            Route("/dlq/{occurrence_id}/{action}", self.dlq_action, methods=["POST"]),
            Route("/health", self.health),
            Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
        ]

    # -- sessions ------------------------------------------------------------------

    async def _viewer(self, request: Request) -> tuple[Viewer, str] | None:
        token = request.cookies.get(SESSION_COOKIE)
        if not token:
            return None
        viewer = await self.authenticate(token)
        return None if viewer is None else (viewer, token)

    def _render(self, template: str, page: _Page, status: int = 200) -> HTMLResponse:
        body = self.templates.get_template(template).render(
            title=page.title, viewer=page.viewer, csrf=page.csrf, now=self.clock.now(), **page.extra
        )
        response = HTMLResponse(body, status_code=status)
        # No caching of tenant data; no framing (clickjacking on the action buttons);
        # every asset is ours, so the policy can be strict.
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'none'; frame-ancestors 'none'"
        )
        response.headers["Referrer-Policy"] = "same-origin"
        return response

    async def _signed_in(self, request: Request) -> tuple[Viewer, str] | Response:
        found = await self._viewer(request)
        if found is None:
            target = "/ui/login?" + urlencode({"next": request.url.path})
            return RedirectResponse(target, status_code=303)
        if self.warm is not None:
            self.warm()
        return found

    async def _form_checked(self, request: Request, *, write: bool) -> tuple[Viewer, dict[str, str]] | Response:
        found = await self._signed_in(request)
        if isinstance(found, Response):
            return found
        viewer, token = found
        form = {k: str(v) for k, v in (await request.form()).items()}
        if not hmac.compare_digest(form.get("csrf", ""), csrf_for(token)):
            expired = "This form has expired or did not come from this dashboard; reload and retry."
            return self._error(viewer, 403, expired)
        if write and not viewer.can_operate:
            return self._error(viewer, 403, f"Your token's role ({viewer.role}) is read-only.")
        return viewer, form

    def _error(self, viewer: Viewer | None, status: int, message: str) -> HTMLResponse:
        return self._render("error.html", _Page("Error", viewer, extra={"status": status, "message": message}), status)

    def _not_found(self, viewer: Viewer) -> HTMLResponse:
        return self._error(viewer, 404, "Nothing by that name in your tenant.")

    async def home(self, request: Request) -> Response:
        return RedirectResponse("/ui/schedules", status_code=303)

    async def login_form(self, request: Request, message: str | None = None, status: int = 200) -> Response:
        nonce = token_bytes.token_urlsafe(24)
        nxt = request.query_params.get("next", "/ui/schedules")
        page = _Page("Sign in", None, csrf=nonce, extra={"message": message, "next": _safe_next(nxt)})
        response = self._render("login.html", page, status)
        response.set_cookie(
            LOGIN_COOKIE, nonce, httponly=True, samesite="strict", path="/ui/login", secure=self.secure_cookies
        )
        return response

    async def login(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        nonce = request.cookies.get(LOGIN_COOKIE, "")
        if not nonce or not hmac.compare_digest(form.get("csrf", ""), nonce):
            return await self.login_form(request, "The sign-in form expired; try again.", 403)
        token = form.get("token", "").strip()
        viewer = await self.authenticate(token) if token else None
        if viewer is None:
            return await self.login_form(request, "That token is not valid (unknown, revoked or expired).", 401)
        response = RedirectResponse(_safe_next(form.get("next", "")), status_code=303)
        response.set_cookie(
            SESSION_COOKIE, token, httponly=True, samesite="strict", path="/ui", secure=self.secure_cookies
        )
        response.delete_cookie(LOGIN_COOKIE, path="/ui/login")
        return response

    async def logout(self, request: Request) -> Response:
        checked = await self._form_checked(request, write=False)
        if isinstance(checked, Response):
            return checked
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/ui")
        return response

    # -- schedules -----------------------------------------------------------------

    async def schedules(self, request: Request) -> Response:
        found = await self._signed_in(request)
        if isinstance(found, Response):
            return found
        viewer, token = found
        query = request.query_params
        state = query.get("state", "")
        label = query.get("label", "").strip()
        name = query.get("q", "").strip()
        sort = query.get("sort", "name")
        cursor = query.get("cursor") or None
        items, next_cursor = await self._schedule_page(viewer.tenant, state, label, name, cursor)
        now = self.clock.now()
        rows = await self._with_pause_reasons(viewer.tenant, await self._rows(items, now))
        if sort == "next":
            far = datetime.max.replace(tzinfo=UTC)
            rows.sort(key=lambda r: r.next_runs[0].fire.utc if r.next_runs else far)
        filters = {"state": state, "label": label, "q": name, "sort": sort}
        next_link = None
        if next_cursor is not None:
            next_link = "/ui/schedules?" + urlencode({**{k: v for k, v in filters.items() if v}, "cursor": next_cursor})
        page = _Page(
            "Schedules",
            viewer,
            csrf_for(token),
            {"rows": rows, "filters": filters, "next_link": next_link, "states": [s.value for s in ScheduleState]},
        )
        return self._render("schedules.html", page)

    async def _schedule_page(
        self, tenant: str, state: str, label: str, name: str, cursor: str | None
    ) -> tuple[list[Schedule], str | None]:
        """One page of the tenant's schedules by name after ``cursor`` (keyset: the last
        name of the previous page; the store's ``schedules_page``, as the API's list),
        filtered by state, ``key=value`` label and name prefix."""
        wanted_label: tuple[str, str] | None = None
        if "=" in label:
            key, value = label.split("=", 1)
            wanted_label = (key, value)
        query = SchedulePage(
            after=cursor or "",
            limit=PAGE_SIZE + 1,
            state=ScheduleState(state) if state in {s.value for s in ScheduleState} else None,
            name_prefix=name or None,
            label=wanted_label,
        )
        found = await self.store.schedules_page(tenant, query)
        page = [s for s in found[:PAGE_SIZE] if s.state is not ScheduleState.DELETED]
        more = len(found) > PAGE_SIZE
        return page, (found[PAGE_SIZE - 1].name if more else None)

    async def _rows(self, schedules: Sequence[Schedule], now: datetime) -> list[Row]:
        """One statement for the page's last runs and next starts (``run_summaries``)."""
        summaries = await self.ops.summaries(schedules)
        rows = []
        for schedule in schedules:
            summary = summaries.get(schedule.id)
            first = next_run(schedule, summary)
            nxt = []
            if first is not None:
                after = min(first, first - schedule.definition.window) - timedelta(microseconds=1)
                nxt = upcoming_shared(spec_of(schedule), max(after, now - schedule.definition.max_lateness), 3)
            lag = None
            if summary is not None and summary.last_started_at and summary.last_scheduled_for:
                lag = (summary.last_started_at - summary.last_scheduled_for).total_seconds()
            rows.append(Row(schedule, describe(schedule), nxt, summary, lag))
        return rows

    async def _with_pause_reasons(self, tenant: str, rows: list[Row]) -> list[Row]:
        """The paused rows with their reason, from the tenant's recent audit entries (one
        read, and only when the page has a paused schedule)."""
        if not any(r.schedule.state is ScheduleState.PAUSED for r in rows):
            return rows
        entries = await self.store.audit_page(tenant, None, AUDIT_SCAN)
        out = []
        for row in rows:
            reason = _pause_reason(row.schedule, [e for e in entries if e.target == row.schedule.name])
            out.append(replace(row, pause_reason=reason) if reason else row)
        return out

    async def schedule(self, request: Request) -> Response:
        found = await self._signed_in(request)
        if isinstance(found, Response):
            return found
        viewer, token = found
        schedule = await self.store.get_schedule(viewer.tenant, request.path_params["name"])
        if schedule is None or schedule.state is ScheduleState.DELETED:
            return self._not_found(viewer)
        now = self.clock.now()
        nxt = upcoming_shared(spec_of(schedule), now, 10) if schedule.state is ScheduleState.ACTIVE else []
        versions = await self.store.schedule_versions(schedule.id)
        runs = await self.store.list_occurrences(schedule.id, 25, now)
        # Who changed what: the tenant's recent audit entries about this schedule.
        changes = [e for e in await self.store.audit_page(viewer.tenant, None, AUDIT_SCAN) if e.target == schedule.name]
        explanation = None
        at = request.query_params.get("at", "").strip()
        explain_error = None
        if at:
            from clockd.services.explain import explain_at

            try:
                explanation = await explain_at(self.store, schedule, at, now)
            except ClockdError as exc:
                explain_error = str(exc)
        page = _Page(
            schedule.name,
            viewer,
            csrf_for(token),
            {
                "s": schedule,
                "words": describe(schedule),
                "next_runs": nxt,
                "versions": versions,
                "runs": runs,
                "lag": start_lag,
                "http": isinstance(schedule.definition.target, HttpTarget),
                "at": at,
                "explanation": explanation,
                "explain_error": explain_error,
                "done": request.query_params.get("done"),
                "definition": _definition_rows(schedule),
                "changes": changes[:20],
                "pause_reason": _pause_reason(schedule, changes),
            },
        )
        return self._render("schedule.html", page)

    _SCHEDULE_ACTIONS: ClassVar[dict[str, str]] = {"pause": "Pause", "resume": "Resume", "run-now": "Run now"}

    async def confirm_schedule_action(self, request: Request) -> Response:
        found = await self._signed_in(request)
        if isinstance(found, Response):
            return found
        viewer, token = found
        action = request.path_params["action"]
        schedule = await self.store.get_schedule(viewer.tenant, request.path_params["name"])
        if schedule is None or schedule.state is ScheduleState.DELETED or action not in self._SCHEDULE_ACTIONS:
            return self._not_found(viewer)
        if not viewer.can_operate:
            return self._error(viewer, 403, f"Your token's role ({viewer.role}) is read-only.")
        page = _Page(
            f"{self._SCHEDULE_ACTIONS[action]} {schedule.name}?",
            viewer,
            csrf_for(token),
            {"s": schedule, "action": action, "label": self._SCHEDULE_ACTIONS[action]},
        )
        return self._render("confirm.html", page)

    async def schedule_action(self, request: Request) -> Response:
        checked = await self._form_checked(request, write=True)
        if isinstance(checked, Response):
            return checked
        viewer, form = checked
        name, action = request.path_params["name"], request.path_params["action"]
        schedule = await self.store.get_schedule(viewer.tenant, name)
        if schedule is None or schedule.state is ScheduleState.DELETED or action not in self._SCHEDULE_ACTIONS:
            return self._not_found(viewer)
        try:
            if action == "pause":
                reason = form.get("reason", "").strip()
                if not reason:
                    return self._error(viewer, 422, "Give a reason for the pause: it is shown to everyone who looks.")
                with self._audited(viewer, "schedule.pause", name, schedule.version, reason=reason):
                    await self.ops.pause(name, viewer.tenant, reason=reason)
                done = "paused"
            elif action == "resume":
                with self._audited(viewer, "schedule.resume", name, schedule.version):
                    await self.ops.resume(name, viewer.tenant)
                done = "resumed"
            else:
                with self.store.audited(lambda o: self._entry(viewer, "schedule.run_now", name, occurrence=o.id)):
                    occ = await self.ops.run_now(name, viewer.tenant)
                done = f"run-now:{occ.id}"
        except NotFound:
            return self._not_found(viewer)
        except ClockdError as exc:
            return self._error(viewer, 409, str(exc))
        return RedirectResponse(f"/ui/schedules/{name}?" + urlencode({"done": done}), status_code=303)

    def _entry(
        self,
        viewer: Viewer,
        action: str,
        target: str,
        before: int | None = None,
        after: int | None = None,
        **detail: object,
    ) -> AuditEntry:
        return AuditEntry(
            self.clock.now(), viewer.tenant, viewer.name, action, target, before, after, {"via": "ui", **detail}
        )

    def _audited(
        self, viewer: Viewer, action: str, target: str, before: int | None = None, **detail: object
    ) -> AbstractContextManager[None]:
        """Every write from a page is in the audit log, as the API's are (``via: ui``),
        written in the write's own transaction (``Store.audited``): a schedule write's
        result gives its after-version (``AuditEntry.of_write``)."""
        return self.store.audited(
            lambda result: AuditEntry.of_write(
                result, self.clock.now(), viewer.tenant, viewer.name, action, target, before, via="ui", **detail
            )
        )

    # -- runs ------------------------------------------------------------------------

    async def _own(self, viewer: Viewer, occurrence_id: str) -> tuple[Occurrence, Schedule] | None:
        """THE TENANT CHECK for anything reached by occurrence id: the occurrence's schedule
        must belong to the viewer's tenant, else it does not exist for them."""
        try:
            occ = await self.store.get_occurrence(occurrence_id)
        except ClockdError:
            return None
        if occ is None:
            return None
        schedule = await self.store.get_schedule_by_id(occ.schedule_id)
        if schedule is None or schedule.definition.tenant != viewer.tenant:
            return None
        return occ, schedule

    async def run(self, request: Request) -> Response:
        found = await self._signed_in(request)
        if isinstance(found, Response):
            return found
        viewer, token = found
        owned = await self._own(viewer, request.path_params["occurrence_id"])
        if owned is None:
            return self._not_found(viewer)
        occ, schedule = owned
        attempts = await self.store.list_attempts(occ.id)
        full = request.query_params.get("full") == "1"
        outputs = []
        for attempt in attempts:
            text = attempt.output
            cut = not full and len(text) > OUTPUT_TAIL
            outputs.append((attempt, text[-OUTPUT_TAIL:] if cut else text, cut))
        page = _Page(
            f"Run of {schedule.name}",
            viewer,
            csrf_for(token),
            {
                "o": occ,
                "s": schedule,
                "outputs": outputs,
                "full": full,
                "lag": start_lag(occ),
                "http": isinstance(schedule.definition.target, HttpTarget),
            },
        )
        return self._render("run.html", page)

    # -- dead letters ------------------------------------------------------------------

    async def dlq(self, request: Request) -> Response:
        found = await self._signed_in(request)
        if isinstance(found, Response):
            return found
        viewer, token = found
        dead = await self.ops.dead_letters(None, viewer.tenant, 100)
        names = {}
        for occ in dead:
            if occ.schedule_id not in names:
                schedule = await self.store.get_schedule_by_id(occ.schedule_id)
                names[occ.schedule_id] = schedule.name if schedule else "?"
        page = _Page("Dead letters", viewer, csrf_for(token), {"dead": dead, "names": names})
        return self._render("dlq.html", page)

    _DLQ_ACTIONS: ClassVar[dict[str, str]] = {"replay": "Replay", "drop": "Drop"}

    async def confirm_dlq_action(self, request: Request) -> Response:
        found = await self._signed_in(request)
        if isinstance(found, Response):
            return found
        viewer, token = found
        action = request.path_params["action"]
        owned = await self._own(viewer, request.path_params["occurrence_id"])
        if owned is None or action not in self._DLQ_ACTIONS:
            return self._not_found(viewer)
        if not viewer.can_operate:
            return self._error(viewer, 403, f"Your token's role ({viewer.role}) is read-only.")
        occ, schedule = owned
        page = _Page(
            f"{self._DLQ_ACTIONS[action]} this dead letter?",
            viewer,
            csrf_for(token),
            {"o": occ, "s": schedule, "action": action, "label": self._DLQ_ACTIONS[action]},
        )
        return self._render("confirm_dlq.html", page)

    async def dlq_action(self, request: Request) -> Response:
        checked = await self._form_checked(request, write=True)
        if isinstance(checked, Response):
            return checked
        viewer, _ = checked
        action = request.path_params["action"]
        owned = await self._own(viewer, request.path_params["occurrence_id"])
        if owned is None or action not in self._DLQ_ACTIONS:
            return self._not_found(viewer)
        occ, _schedule = owned
        try:
            with self.store.audited(lambda _: self._entry(viewer, f"dlq.{action}", occ.id, occ.version, occ.version)):
                if action == "replay":
                    await self.ops.replay(occ.id)
                else:
                    await self.ops.drop(occ.id)
        except ClockdError as exc:
            return self._error(viewer, 409, str(exc))
        return RedirectResponse(f"/ui/runs/{occ.id}", status_code=303)

    # -- health --------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        found = await self._signed_in(request)
        if isinstance(found, Response):
            return found
        viewer, token = found
        if not viewer.sees_cluster:
            return self._error(
                viewer,
                403,
                f"The health page shows the whole cluster, every tenant's runs included: it needs a "
                f"cluster-admin token (yours is {viewer.role}).",
            )
        now = self.clock.now()
        doc = await self.health_source()
        points = await self._lag_points(now)
        burst_at, burst = await self._burst(now)
        page = _Page(
            "Health",
            viewer,
            csrf_for(token),
            {
                "doc": doc,
                "lag_svg": lag_plot(points, "Start lag p50, p95 and p99 over the last hour, per 5 minutes"),
                "burst_svg": histogram(
                    burst, f"Start lag of the runs due at {utc_text(burst_at)} (the last top of the hour)"
                ),
                "burst_at": burst_at,
                "burst": burst,
                "points": points,
            },
        )
        return self._render("health.html", page)

    async def _lag_points(self, now: datetime) -> list[LagPoint]:
        """Start-lag percentiles per 5-minute bucket over the last hour (12 read queries)."""
        end = now.replace(second=0, microsecond=0)
        end -= timedelta(minutes=end.minute % 5)
        points = []
        for i in range(12, 0, -1):
            since = end - timedelta(minutes=5 * i)
            until = min(now, since + timedelta(minutes=5))
            stats = await self.store.start_lag(since, until)
            points.append(LagPoint(since.strftime("%H:%M"), stats.p50, stats.p95, stats.p99))
        return points

    async def _burst(self, now: datetime) -> tuple[datetime, LagHistogram]:
        """The last top of the hour and the histogram of the start lags of EVERY run due
        then, counted by the store (a 500,000-run burst costs one statement, not a page
        of rows, and none is left out)."""
        top = now.replace(minute=0, second=0, microsecond=0)
        return top, await self.store.start_lag_histogram(top, now, BURST_BINS)


def _pause_reason(schedule: Schedule, changes: Sequence[AuditEntry]) -> str | None:
    """Why a paused schedule is paused: the reason of the pause that made its version."""
    if schedule.state is not ScheduleState.PAUSED:
        return None
    for entry in changes:  # newest first
        if entry.action == "schedule.pause" and entry.after_version == schedule.version:
            reason = entry.detail.get("reason")
            return None if reason is None else str(reason)
    return None


def _safe_next(target: str) -> str:
    """Only our own pages: an open redirect would let a phishing link borrow our sign-in."""
    if target.startswith("/ui/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui/schedules"


def _definition_rows(schedule: Schedule) -> list[tuple[str, str]]:
    d = schedule.definition
    rows = [
        ("kind", d.kind.value),
        ("expression" if d.kind is ScheduleKind.CRON else "when", d.expr),
        ("zone", d.tz),
        ("target", d.target.describe()),
        ("queue", d.queue),
        ("misfire", f"{d.misfire.value} (max lateness {format_duration(d.max_lateness)})"),
        ("overlap", d.overlap.value),
        ("window", "strict" if not d.window else format_duration(d.window)),
        ("retries", str(d.retry.retries)),
        ("timeout", "none" if d.timeout is None else format_duration(d.timeout)),
    ]
    if d.labels:
        rows.append(("labels", ", ".join(f"{k}={v}" for k, v in d.labels)))
    return rows


__all__ = ["Authenticate", "Dashboard", "HealthSource", "OccurrenceState", "Viewer", "csrf_for"]
