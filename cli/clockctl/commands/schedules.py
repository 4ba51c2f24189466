"""Schedule verbs: add, list, show, pause, resume, rm, run-now."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer
from rich.table import Table

from clockctl import policyopts
from clockctl.context import with_ops
from clockctl.output import OutputFormat, console, emit_json, handle_errors
from clockctl.render import (
    describe_when,
    dur,
    iso,
    local,
    notify_rows,
    occurrence_doc,
    schedule_doc,
    short,
    shown_state,
    stamp,
    target_rows,
    version_doc,
    when,
)
from clockd.core.durations import parse_duration
from clockd.core.instants import format_instant, parse_instant
from clockd.core.limits import shell_line_hint
from clockd.core.model import (
    Occurrence,
    Schedule,
    ScheduleDef,
    ScheduleKind,
)
from clockd.core.notify import Notification, NotifyEvent, parse_notification
from clockd.core.spec import compile_spec, validate_definition
from clockd.errors import Conflict, InvalidInput
from clockd.services.ops import Change, Ops, ResumeFrom, VersionRow, next_run, next_runs, spec_of, starts_of
from clockd.store import RunSummary

Output = Annotated[OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")]
Tenant = Annotated[str, typer.Option("--tenant", metavar="TENANT", help="tenant the schedule belongs to")]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="schedule name")]


def build_definition(
    args: list[str],
    at: str | None,
    every: str | None,
    tz: str,
    name: str | None,
    queue: str,
    timeout: str | None,
    retries: int,
    backoff: str,
    shell: bool,
    env: list[str],
    cwd: str | None,
    noop: bool,
    tenant: str,
    *,
    user: str | None = None,
    group: str | None = None,
    env_from_file: str | None = None,
    memory_limit: str | None = None,
    cpu_limit: str | None = None,
    nproc_limit: int | None = None,
    http: tuple[str, str] | None = None,
    headers: list[str] | None = None,
    body: str | None = None,
    expect_status: str | None = None,
    insecure: bool = False,
    policies: Mapping[str, Any] | None = None,
    stdin: str | None = None,
    notify: tuple[Notification, ...] = (),
) -> ScheduleDef:
    """Turn ``clockctl add`` arguments into a validated definition.

    The options become the job mapping a schedule file would hold (the same field names),
    validated by :func:`clockd.formats.schedfile.validate_job`: one validator, one set of limits
    and messages for the CLI, files and the API. What only a command line has is settled
    here first: ``--at now+2s`` becomes an instant, ``--body @FILE`` the file's text,
    ``--cpu-limit 1500ms`` whole seconds (rounded up), and options that do not go together."""
    if at and every:
        raise InvalidInput("give one of a cron expression, --at or --every")
    job: dict[str, Any] = {}
    if at:
        job["at"] = format_instant(parse_instant(at, tz, whole_second_now()))
        command = args
    elif every:
        job["every"] = every
        command = args
    else:
        if not args:
            raise InvalidInput("missing the cron expression (or --at / --every)")
        if len(args[0].split()) == 1 and not args[0].startswith("@"):
            # A cron expression is five fields or a macro. click drops the --, so a
            # forgotten expression shows up as the command's first word, whose own
            # error ("expected 5 fields, got 1") would not say what is missing.
            raise InvalidInput(
                f"missing the cron expression ({args[0]!r} is not one): give it quoted before --, "
                'e.g. "0 9 * * *", or use --at / --every'
            )
        job["schedule"], command = args[0], args[1:]
    if command and (at or every) and _looks_like_cron(command[0]):
        raise InvalidInput(
            f"{command[0]!r} is a cron expression: give one of a cron expression, --at or --every "
            "(the command goes after --)"
        )
    command_only = {
        "--shell": shell,
        "--env": bool(env),
        "--cwd": cwd is not None,
        "--user": user is not None,
        "--group": group is not None,
        "--env-from-file": env_from_file is not None,
        "--memory-limit": memory_limit is not None,
        "--cpu-limit": cpu_limit is not None,
        "--nproc-limit": nproc_limit is not None,
        "--stdin": stdin is not None,
    }
    http_only = {
        "--header": bool(headers),
        "--body": body is not None,
        "--expect-status": expect_status is not None,
        "--insecure": insecure,
    }
    if noop or http:
        given = [opt for opt, on in command_only.items() if on]
        if given:
            raise InvalidInput(f"{given[0]} applies to commands, not to {'--noop' if noop else '--http'}")
    if not http:
        given = [opt for opt, on in http_only.items() if on]
        if given:
            raise InvalidInput(f"{given[0]} applies to --http targets")
    if noop and http:
        raise InvalidInput("give one of --noop, --http or a command")
    if noop or http:
        if command:
            raise InvalidInput(f"{'--noop' if noop else '--http'} takes no command")
    if noop:
        job["noop"] = True
    elif http:
        request: dict[str, Any] = {"method": http[0], "url": http[1]}
        if headers:
            request["headers"] = [list(_header(h)) for h in headers]
        if body is not None:
            request["body"] = _body(body)
        if expect_status is not None:
            request["expect_status"] = list(_statuses(expect_status))
        if insecure:
            request["insecure"] = True
        job["http"] = request
    else:
        if not command:
            raise InvalidInput("missing the command: put it after --, e.g. -- /usr/local/bin/report.sh")
        job["command"] = " ".join(command) if shell else list(command)
        optional = {
            "shell": shell or None,
            "env": dict(_env(env)) or None,
            "cwd": cwd,
            "user": user,
            "group": group,
            "env_from_file": env_from_file,
            "memory_limit": memory_limit,
            "cpu_limit": f"{_cpu_seconds(cpu_limit)}s" if cpu_limit is not None else None,
            "nproc_limit": nproc_limit,
            "stdin": stdin,
        }
        job.update((key, value) for key, value in optional.items() if value is not None)
    job["name"] = name if name is not None else _default_name(noop, http, command, shell)
    job.update(tz=tz, queue=queue, retries=retries, backoff=backoff)
    if timeout:
        job["timeout"] = timeout
    job.update(policies or {})
    # The schedule-file format (yaml, the validator) is imported by the verbs that write
    # schedules, not with this module: every clockctl command imports it (start-up).
    from clockd.formats.schedfile import notification_document

    job.update((n.event.field, notification_document(n)) for n in notify)
    return validated(job, tenant)


def run_docs(s: Schedule, summary: RunSummary | None) -> dict[str, Any]:
    """The ``next_run`` and ``last_run`` keys of ``list``/``show`` JSON."""
    last = None
    if summary is not None and summary.last_started_at is not None:
        last = {
            "scheduled_for": iso(summary.last_scheduled_for),
            "started_at": iso(summary.last_started_at),
            "state": None if summary.last_state is None else str(summary.last_state),
            "exit_code": summary.last_exit_code,
        }
    return {"next_run": iso(next_run(s, summary)), "last_run": last}


def _result(summary: RunSummary | None) -> str:
    if summary is None or summary.last_state is None:
        return "-"
    code = f" ({summary.last_exit_code})" if summary.last_exit_code not in (None, 0) else ""
    return f"{summary.last_state}{code}"


def whole_second_now() -> datetime:
    """Now, rounded up to the second: ``--at now+1m`` gives an instant people can read
    and type back (no microseconds), never one before the ``now`` it was given."""
    now = datetime.now(UTC)
    return now.replace(microsecond=0) + timedelta(seconds=1) if now.microsecond else now


def validated(job: Mapping[str, Any], tenant: str) -> ScheduleDef:
    """``job`` (schedule-file fields) through the one validator; every problem on one line."""
    from clockd.formats.schedfile import validate_job

    result = validate_job(job, tenant=tenant)
    if isinstance(result, list):
        raise InvalidInput("; ".join(str(problem) for problem in result))
    return result


def _looks_like_cron(text: str) -> bool:
    if not (text.startswith("@") or len(text.split()) in (5, 6)):
        return False
    try:
        validate_definition(ScheduleKind.CRON, text, "UTC")
    except InvalidInput:
        return False
    return True


def _default_name(noop: bool, http: tuple[str, str] | None, command: list[str], shell: bool) -> str:
    """The name a schedule gets without --name: the program's basename, only when that is
    unambiguous (not a shell line, whose first word names no single program)."""
    if noop:
        return "noop"
    if http:
        return urlsplit(http[1]).hostname or "http"
    program = command[0] if command else ""
    if shell:
        raise InvalidInput("--name: required with --shell (a shell line names no single program)")
    base = os.path.basename(program.rstrip("/"))
    if not base or shell_line_hint(base) is not None:
        # An empty or shell-line program: the validator says what is wrong with it.
        return "job"
    return base


def notify_options(**given: str | None) -> tuple[Notification, ...]:
    """``--on-failure`` & co. (keyword = event value) as notifications; bad ones are InvalidInput."""
    out: list[Notification] = []
    for event in NotifyEvent:
        text = given.get(event.value)
        if text is None:
            continue
        try:
            out.append(parse_notification(event, text))
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
    return tuple(out)


def _env(items: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInput(f"--env: expected KEY=VALUE, got {item!r}")
        out.append((key, value))
    return tuple(sorted(out))


def _header(item: str) -> tuple[str, str]:
    key, sep, value = item.partition(":")
    if not sep or not key.strip():
        raise InvalidInput(f"--header: expected 'Name: value', got {item!r}")
    return key.strip(), value.strip()


def _body(body: str | None) -> str | None:
    """``@FILE`` reads the file (here, where clockctl runs); ``@@…`` is a literal ``@…``."""
    if body is None or not body.startswith("@"):
        return body
    if body.startswith("@@"):
        return body[1:]
    path = body[1:]
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise InvalidInput(f"--body: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"--body: {path} is not UTF-8 text") from None


def _statuses(text: str | None) -> tuple[int, ...]:
    if text is None:
        return ()
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InvalidInput(f"--expect-status: expected statuses such as 200,204, got {text!r}") from None


def _cpu_seconds(text: str) -> int:
    seconds = parse_duration(text).total_seconds()
    return max(1, math.ceil(seconds))


def register(app: typer.Typer) -> None:
    @app.command(
        "add",
        context_settings={"allow_extra_args": False},
        epilog='Example: clockctl add "0 9 * * *" --tz Europe/Paris --name report -- /usr/local/bin/report.sh',
    )
    @handle_errors
    def add(
        args: Annotated[
            list[str] | None,
            typer.Argument(
                metavar="[EXPR] -- COMMAND [ARGS]...",
                help="cron expression (unless --at/--every), then -- COMMAND ARGS...",
            ),
        ] = None,
        at: Annotated[
            str | None, typer.Option("--at", metavar="INSTANT", help="run once at INSTANT (ISO 8601, or now+2s)")
        ] = None,
        every: Annotated[
            str | None, typer.Option("--every", metavar="DURATION", help="run at a fixed rate, e.g. 90m (ignores DST)")
        ] = None,
        tz: Annotated[str, typer.Option("--tz", metavar="ZONE", help="IANA time zone of the expression")] = "UTC",
        name: Annotated[
            str | None, typer.Option("--name", metavar="NAME", help="unique name (default: the command's basename)")
        ] = None,
        queue: Annotated[str, typer.Option("--queue", metavar="QUEUE", help="queue whose workers run it")] = "default",
        timeout: Annotated[
            str | None, typer.Option("--timeout", metavar="DURATION", help="kill an attempt after DURATION, e.g. 30m")
        ] = None,
        retries: Annotated[int, typer.Option("--retries", metavar="N", help="retries after a failed attempt")] = 2,
        backoff: Annotated[
            str, typer.Option("--backoff", metavar="DURATION", help="first retry delay; doubles, with full jitter")
        ] = "10s",
        shell: Annotated[bool, typer.Option("--shell", help="run the command string through /bin/sh -c")] = False,
        env: Annotated[
            list[str] | None, typer.Option("--env", metavar="KEY=VALUE", help="KEY=VALUE for the job (repeatable)")
        ] = None,
        cwd: Annotated[str | None, typer.Option("--cwd", metavar="DIR", help="working directory of the job")] = None,
        noop: Annotated[bool, typer.Option("--noop", help="a built-in target that does nothing (testing)")] = False,
        user: Annotated[
            str | None,
            typer.Option("--user", metavar="USER", help="run the job as USER (the worker must be root)"),
        ] = None,
        group: Annotated[
            str | None, typer.Option("--group", metavar="GROUP", help="run the job with GROUP (default: USER's)")
        ] = None,
        env_from_file: Annotated[
            str | None,
            typer.Option(
                "--env-from-file", metavar="PATH", help="KEY=VALUE lines read by the worker at each run (secrets)"
            ),
        ] = None,
        memory_limit: Annotated[
            str | None,
            typer.Option("--memory-limit", metavar="SIZE", help="address space per process, e.g. 512M (RLIMIT_AS)"),
        ] = None,
        cpu_limit: Annotated[
            str | None,
            typer.Option(
                "--cpu-limit",
                metavar="DURATION",
                help="CPU time of the whole job, e.g. 10m (its cgroup; RLIMIT_CPU per process without one)",
            ),
        ] = None,
        nproc_limit: Annotated[
            int | None,
            typer.Option("--nproc-limit", metavar="N", help="processes of the job's user (RLIMIT_NPROC)"),
        ] = None,
        http: Annotated[
            tuple[str, str] | None,
            typer.Option("--http", metavar="METHOD URL", help="send an HTTP request instead of running a command"),
        ] = None,
        header: Annotated[
            list[str] | None,
            typer.Option("--header", metavar="'NAME: VALUE'", help="HTTP request header (repeatable)"),
        ] = None,
        body: Annotated[
            str | None, typer.Option("--body", metavar="TEXT|@FILE", help="HTTP request body (@FILE: read it now)")
        ] = None,
        expect_status: Annotated[
            str | None,
            typer.Option(
                "--expect-status", metavar="CODES", help="statuses meaning success, e.g. 200,204 (default 2xx)"
            ),
        ] = None,
        insecure: Annotated[
            bool, typer.Option("--insecure", help="do not verify the server's TLS certificate")
        ] = False,
        stdin: policyopts.Stdin = None,
        on_failure: policyopts.OnFailure = None,
        on_dead: policyopts.OnDead = None,
        on_missed: policyopts.OnMissed = None,
        on_success: policyopts.OnSuccess = None,
        misfire: policyopts.Misfire = None,
        max_lateness: policyopts.MaxLateness = None,
        catch_up_limit: policyopts.CatchUpLimit = None,
        overlap: policyopts.Overlap = None,
        window: policyopts.Window = None,
        permanent_exit_codes: policyopts.PermanentExitCodes = None,
        idempotency_key: Annotated[
            str | None,
            typer.Option(
                "--idempotency-key",
                metavar="KEY",
                help="add only once: the same KEY again gives back the schedule it created",
            ),
        ] = None,
        tenant: Tenant = "default",
        output: Output = OutputFormat.table,
    ) -> None:
        """Add a schedule; prints its id and next 5 runs.

        Env values and header values may reference secrets, resolved by the worker at
        each run and never stored: ${file:/path} (the file, minus one trailing newline)
        and ${env:NAME} (the daemon's environment); $${ is a literal ${."""
        definition = build_definition(
            args or [],
            at,
            every,
            tz,
            name,
            queue,
            timeout,
            retries,
            backoff,
            shell,
            env or [],
            cwd,
            noop,
            tenant,
            user=user,
            group=group,
            env_from_file=env_from_file,
            memory_limit=memory_limit,
            cpu_limit=cpu_limit,
            nproc_limit=nproc_limit,
            http=http,
            headers=header or [],
            body=body,
            expect_status=expect_status,
            insecure=insecure,
            policies=policyopts.policy_fields(
                misfire=misfire,
                max_lateness=max_lateness,
                catch_up_limit=catch_up_limit,
                overlap=overlap,
                window=window,
                permanent_exit_codes=permanent_exit_codes,
            ),
            stdin=stdin,
            notify=notify_options(failure=on_failure, dead=on_dead, missed=on_missed, success=on_success),
        )
        try:
            added = with_ops(lambda ops: ops.create(definition, idempotency_key), create=True)
        except Conflict as exc:
            if name is not None or "already exists in tenant" not in exc.message:
                raise
            raise Conflict(f"{exc.message}; the name was taken from the command: give another with --name") from None
        schedule = added.schedule
        upcoming = next_runs(spec_of(schedule), schedule.created_at, 5)
        if output is OutputFormat.json:
            emit_json(
                {
                    **schedule_doc(schedule),
                    "next_runs": [iso(t) for t in upcoming],
                    "next_starts": [iso(t) for t in starts_of(schedule, upcoming)],
                    "already_existed": added.existed,
                }
            )
            return
        if added.existed:
            console.print(
                f"[bold]{schedule.name}[/bold] ({schedule.id}) already exists "
                f"(idempotency key {idempotency_key}): nothing added"
            )
        else:
            console.print(f"added [bold]{schedule.name}[/bold] ({schedule.id})")
        _print_next(schedule, upcoming)

    @app.command("list")
    @handle_errors
    def list_(
        tenant: Annotated[str | None, typer.Option("--tenant", metavar="TENANT", help="only this tenant")] = None,
        output: Output = OutputFormat.table,
    ) -> None:
        """List schedules: NEXT RUN is when each runs next (its earliest planned occurrence
        still waiting, else its next instant); LAST RUN and RESULT are its latest run that
        started. JSON adds "next_run" and "last_run" ({scheduled_for, started_at, state,
        exit_code} or null) to each schedule's document."""

        async def go(ops: Ops) -> tuple[list[Schedule], dict[str, RunSummary]]:
            found = await ops.list_schedules(tenant)
            return found, await ops.summaries(found)

        schedules, summaries = with_ops(go)
        if output is OutputFormat.json:
            emit_json([{**schedule_doc(s), **run_docs(s, summaries.get(s.id))} for s in schedules])
            return
        table = Table(box=None, header_style="bold")
        for col in ("NAME", "WHEN", "TZ", "STATE", "NEXT RUN (UTC)", "LAST RUN (UTC)", "RESULT", "TARGET"):
            table.add_column(col)
        for s in schedules:
            summary = summaries.get(s.id)
            last = summary.last_started_at if summary else None
            table.add_row(
                s.name,
                when(s),
                s.definition.tz,
                shown_state(s),
                short(next_run(s, summary)) if s.state == "active" else "-",
                short(last) if last else "-",
                _result(summary),
                s.definition.target.describe(),
            )
        console.print(table)

    @app.command("show")
    @handle_errors
    def show(
        name: NameArg,
        versions: Annotated[bool, typer.Option("--versions", help="also list every version of the definition")] = False,
        tenant: Tenant = "default",
        output: Output = OutputFormat.table,
    ) -> None:
        """Show a schedule: definition, policies, next runs (with their start within a
        flexible window), recent occurrences (each with the version it came from), and
        with --versions its version history. JSON always has "versions"."""

        async def go(ops: Ops) -> tuple[Schedule, list[Occurrence], list[VersionRow], RunSummary | None]:
            s = await ops.get(name, tenant)
            summary = (await ops.summaries([s])).get(s.id)
            return s, await ops.runs(name, 10, tenant), await ops.versions(name, tenant), summary

        schedule, occurrences, history, summary = with_ops(go)
        recent = [occurrence_doc(o) for o in occurrences]
        upcoming: list[datetime] = []
        if schedule.next_run_at and schedule.state == "active":
            # From the earliest run already planned and waiting (its start is at most one
            # flexible window after its instant), else from the cursor.
            first = schedule.next_run_at
            if summary is not None and summary.next_start is not None:
                first = min(first, summary.next_start - schedule.definition.window)
            upcoming = next_runs(spec_of(schedule), first - timedelta(microseconds=1), 5)
        if output is OutputFormat.json:
            emit_json(
                {
                    **schedule_doc(schedule),
                    **run_docs(schedule, summary),
                    "next_runs": [iso(t) for t in upcoming],
                    "next_starts": [iso(t) for t in starts_of(schedule, upcoming)],
                    "recent": recent,
                    "versions": [version_doc(*row) for row in history],
                }
            )
            return
        doc = schedule_doc(schedule)
        console.print(f"[bold]{schedule.name}[/bold]  {schedule.id}")
        spec = compile_spec(
            schedule.definition.kind,
            schedule.definition.expr,
            schedule.definition.tz,
            schedule.created_at,
        )
        rows = [
            ("when", f"{when(schedule)}  ({spec.describe()})"),
            ("zone", schedule.definition.tz),
            ("state", f"{shown_state(schedule)} (version {schedule.version})"),
            ("target", schedule.definition.target.describe()),
            *target_rows(schedule.definition.target),
            ("queue", schedule.definition.queue),
            ("timeout", doc["timeout"] or "none"),
            ("retries", f"{doc['retries']} (backoff {doc['backoff']}, exponential, full jitter)"),
            (
                "misfire",
                f"{doc['misfire']} (max lateness {doc['max_lateness']}"
                + (f", at most {doc['catch_up_limit']} late runs" if doc["misfire"] == "catch_up" else "")
                + ")",
            ),
            ("overlap", doc["overlap"]),
            (
                "window",
                "strict"
                if schedule.definition.window == timedelta(0)
                else f"{dur(schedule.definition.window)} (each run starts at a fixed offset within it)",
            ),
            *notify_rows(schedule.definition),
        ]
        permanent = schedule.definition.retry.permanent_exit_codes
        if permanent:
            rows.append(("permanent", "exit codes " + ",".join(map(str, permanent)) + " (not retried)"))
        for key, value in rows:
            console.print(f"  {key:<9} {value}")
        _print_next(schedule, upcoming)
        if recent:
            console.print("recent occurrences:")
            table = Table(box=None, header_style="bold")
            for col in ("ID", "SCHEDULED (UTC)", "VERSION", "STATE", "ATTEMPTS", "EXIT"):
                table.add_column(col)
            for o, occ in zip(recent, occurrences, strict=True):
                table.add_row(
                    o["id"],
                    stamp(occ.scheduled_for),
                    str(o["version"]),
                    o["state"],
                    str(o["attempts"]),
                    str(o["exit_code"] if o["exit_code"] is not None else "-"),
                )
            console.print(table)
        if versions:
            console.print("versions:")
            table = Table(box=None, header_style="bold")
            for col in ("VERSION", "FROM (UTC)", "TO (UTC)", "STATE", "WHEN", "TARGET"):
                table.add_column(col)
            for version, valid_from, valid_to, definition, state in history:
                table.add_row(
                    str(version),
                    short(valid_from),
                    short(valid_to) if valid_to else "current",
                    str(state),
                    describe_when(definition),
                    definition.target.describe(),
                )
            console.print(table)

    def _change_command(verb: str, help_text: str) -> None:
        @app.command(verb, help=help_text)
        @handle_errors
        def change(name: NameArg, tenant: Tenant = "default", output: Output = OutputFormat.table) -> None:
            async def go(ops: Ops) -> Change:
                if verb == "pause":
                    return await ops.pause(name, tenant)
                return await ops.remove(name, tenant)

            _print_change(with_ops(go), {"pause": "paused", "rm": "removed"}[verb], output)

    _change_command("pause", "Pause a schedule: no new occurrences until resumed.")

    @app.command("resume")
    @handle_errors
    def resume(
        name: NameArg,
        from_: Annotated[
            ResumeFrom,
            typer.Option(
                "--from",
                metavar="now|paused-at",
                help="now (default): the next run is the first after now, a long pause never bursts; "
                "paused-at: replay the paused period through the misfire policy",
            ),
        ] = ResumeFrom.NOW,
        tenant: Tenant = "default",
        output: Output = OutputFormat.table,
    ) -> None:
        """Resume a paused schedule, from now on (the default) or from the pause."""
        result = with_ops(lambda ops: ops.resume(name, tenant, from_))
        _print_change(result, "resumed", output)
        if output is OutputFormat.table and result.schedule.next_run_at:
            console.print(f"next run: {local(result.schedule.next_run_at, result.schedule.definition.tz)}")

    _change_command("rm", "Delete a schedule (its history stays until retention prunes it).")

    @app.command("run-now")
    @handle_errors
    def run_now(name: NameArg, tenant: Tenant = "default", output: Output = OutputFormat.table) -> None:
        """Run a schedule once now, as an extra occurrence with its own id."""
        occ = with_ops(lambda ops: ops.run_now(name, tenant))
        if output is OutputFormat.json:
            emit_json(occurrence_doc(occ))
            return
        console.print(f"queued {occ.id} for {name}")


def _print_change(result: Change, past: str, output: OutputFormat) -> None:
    """What a change did: canceled pending occurrences, older-version runs still going."""
    if output is OutputFormat.json:
        emit_json(
            {
                **schedule_doc(result.schedule),
                "canceled": result.canceled,
                "running": [occurrence_doc(o) for o in result.running],
                "unchanged": result.unchanged,
            }
        )
        return
    if result.unchanged:  # it printed "paused NAME" for a schedule paused long ago
        console.print(f"{result.schedule.name} is {shown_state(result.schedule)} already; nothing changed")
        return
    extra = f"; canceled {result.canceled} pending occurrence(s)" if result.canceled else ""
    console.print(f"{past} {result.schedule.name}{extra}")
    for version, count in sorted(Counter(o.version for o in result.running).items()):
        console.print(
            f"{count} running occurrence{'s' if count > 1 else ''} of version {version} will finish "
            f"under version {version}"
        )


def _print_next(schedule: Schedule, upcoming: list[datetime]) -> None:
    if not upcoming:
        console.print("next runs: none")
        return
    console.print("next runs:")
    flexible = schedule.definition.window > timedelta(0)
    for t, start in zip(upcoming, starts_of(schedule, upcoming), strict=True):
        line = f"  {local(t, schedule.definition.tz)}  ({stamp(t)})"
        if flexible:
            line += f"  starts {stamp(start)} (+{dur(start - t)})"
        console.print(line)
