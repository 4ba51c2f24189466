"""Declarative files: ``apply``, ``export`` and ``import-crontab``.

``apply`` validates the whole input first (every error as ``file:line: field:
message``, exit 2, nothing written), prints the diff, then writes every create,
update and delete in one store transaction. ``import-crontab`` translates a crontab
into the same jobs and goes through the same path.
"""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from clockctl.context import with_ops
from clockctl.output import OutputFormat, console, emit_json, err_console, handle_errors
from clockctl.render import iso, local, replanned_doc, replanned_lines, stamp
from clockd.errors import InvalidInput
from clockd.services.ops import ApplyPlan, ApplyResult, Ops, PlanAction, PlanItem, is_managed

# The schedule-file and crontab formats (yaml, the validator) and rich's progress bar are
# imported by the verbs that use them: every clockctl command imports this module (start-up).
if TYPE_CHECKING:
    from rich.console import Console

    from clockd.formats.schedfile import FileError, Job

Tenant = Annotated[str, typer.Option("--tenant", metavar="TENANT", help="tenant the schedules belong to")]
Output = Annotated[OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")]
# More schedules than this: show a progress bar (on a terminal only).
PROGRESS_THRESHOLD = 100
_SYMBOL = {PlanAction.CREATE: "+", PlanAction.UPDATE: "~", PlanAction.DELETE: "-", PlanAction.UNCHANGED: "="}


class ExportFormat(StrEnum):
    yaml = "yaml"
    json = "json"


def register(app: typer.Typer) -> None:
    @app.command(
        "apply",
        epilog="Example: clockctl apply -f /etc/clockd/schedules.d --prune --dry-run",
    )
    @handle_errors
    def apply(
        files: Annotated[
            list[str],
            typer.Option(
                "--file",
                "-f",
                metavar="FILE_OR_DIR",
                help="schedule file, or a directory of *.yaml/*.yml files (repeatable)",
            ),
        ],
        dry_run: Annotated[bool, typer.Option("--dry-run", help="print the diff, write nothing")] = False,
        prune: Annotated[
            bool,
            typer.Option("--prune", help="delete schedules created by apply that the files no longer list"),
        ] = False,
        tenant: Tenant = "default",
        output: Output = OutputFormat.table,
    ) -> None:
        """Make the tenant's schedules match schedule files: create, update, (prune) delete.

        The whole input is validated first; any error (printed as file:line: field:
        message) exits 2 and writes nothing. Then the diff is printed and applied in one
        transaction. Applying the same files again changes nothing. Schedules added by hand
        (clockctl add) are never updated or pruned: a file entry with such a name is refused.
        """
        from clockd.formats.schedfile import load_paths

        loaded = load_paths(files)
        if loaded.errors:
            raise _refuse(loaded.errors)
        _apply_jobs(loaded.jobs, tenant, dry_run=dry_run, prune=prune, output=output, command="apply")

    @app.command("export")
    @handle_errors
    def export(
        output: Annotated[
            ExportFormat, typer.Option("--output", "-o", metavar="yaml|json", help="output format")
        ] = ExportFormat.yaml,
        tenant: Tenant = "default",
        everything: Annotated[
            bool,
            typer.Option("--all", help="also schedules added by hand (applying those elsewhere adopts them)"),
        ] = False,
    ) -> None:
        """Write the tenant's schedules as a schedule file (stdout).

        By default only the schedules apply manages, so that `clockctl apply -f` of the
        output changes nothing. Definitions only: a paused schedule stays paused. Values
        are written as stored: secret references such as ${file:/path} stay references.
        """
        from clockd.formats.schedfile import dump_jobs, exportable, job_document

        schedules = with_ops(lambda ops: ops.list_schedules(tenant))
        chosen = []
        by_hand = 0
        for schedule in schedules:
            if not everything and not is_managed(schedule.definition):
                by_hand += 1
                continue
            reason = exportable(schedule.definition)
            if reason is not None:
                _note(f"not exported: {schedule.name}: {reason}")
                continue
            if schedule.state != "active":
                _note(f"{schedule.name} is {schedule.state}: the file carries its definition, not its state")
            chosen.append(schedule.definition)
        if by_hand:
            _note(f"{by_hand} schedule(s) added by hand (not managed by apply) left out; --all includes them")
        if output is ExportFormat.json:
            emit_json({"jobs": [job_document(d) for d in chosen]})
            return
        where = f" --tenant {tenant}" if tenant != "default" else ""
        header = f"clockd schedules of tenant {tenant!r} (clockctl export). Apply: clockctl apply -f FILE{where}"
        typer.echo(dump_jobs(chosen, [header]), nl=False)

    @app.command("import-crontab", epilog="Example: crontab -l > mine.txt; clockctl import-crontab mine.txt --dry-run")
    @handle_errors
    def import_crontab(
        file: Annotated[str, typer.Argument(metavar="FILE", help="a crontab (crontab -l output, /etc/crontab, …)")],
        user: Annotated[
            str | None,
            typer.Option(
                "--user",
                metavar="USER",
                help="whose crontab it is (a label); for a system crontab, import only USER's lines",
            ),
        ] = None,
        tz: Annotated[
            str | None,
            typer.Option("--tz", metavar="ZONE", help="zone of the times before any CRON_TZ= line (default: host's)"),
        ] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="print the equivalent schedule file")] = False,
        system: Annotated[
            bool | None,
            typer.Option("--system/--no-system", help="the file has a user column (default: detected)"),
        ] = None,
        prefix: Annotated[str, typer.Option("--prefix", metavar="TEXT", help="put TEXT before every job name")] = "",
        tenant: Tenant = "default",
        output: Output = OutputFormat.table,
    ) -> None:
        """Import a crontab: each entry becomes a schedule (shell: true, retries: 0, misfire: skip).

        Environment lines (MAILTO included) become the jobs' env, CRON_TZ=/TZ= their zone,
        the text after an unescaped % their stdin:, MAILTO=ADDR on_failure/on_success
        mails through the local sendmail, and the user column of a system crontab their
        user:. Lines that cannot be carried over (@reboot, a user that does not exist on
        this host) are listed as
        file:line with the reason; unparsable lines exit 2 and nothing is written. Without
        --dry-run the jobs are applied like `clockctl apply` (names: <program>-<line>).
        """
        from clockd.formats.crontab import parse_crontab
        from clockd.formats.schedfile import Location, dump_jobs, job_document, read_limited

        zone, zone_note = _zone(tz)
        try:
            text = read_limited(file).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except InvalidInput as exc:
            raise InvalidInput(f"{file}: {exc.message}") from None
        result = parse_crontab(
            text,
            file,
            tz=zone,
            system=system,
            user=user,
            known_users=_known_users(),
            prefix=prefix,
            source=os.path.abspath(file),
        )
        jobs, errors = result.jobs()
        if not result.default_zone_used:
            zone_note = None  # every entry follows a CRON_TZ=/TZ= line: the host's zone reads none
        # Notes, skipped lines and errors in the crontab's line order, as a reader fixes them.
        remarks = _in_line_order(
            [(n.line, "note", n.message) for n in result.notes]
            + [(n.line, "not imported", n.message) for n in result.skipped]
        )
        comments = [f"{file}: {zone_note}"] if zone_note else []
        comments += [f"{Location(file, line)}: {kind}: {message}" for line, kind, message in remarks]
        if errors:
            listed = [(line, f"{Location(file, line)}: {kind}: {message}") for line, kind, message in remarks]
            listed += [(e.where.line, str(e)) for e in errors]
            for text in comments[:1] if zone_note else []:
                _note(text)
            for _, text in _in_line_order(listed):
                _note(text)
            raise _refuse([], len(errors))
        if not (dry_run and output is OutputFormat.json):
            for line in comments:
                _note(line)
        if dry_run:
            kind = "system crontab (user column)" if result.system else "user crontab"
            if output is OutputFormat.json:
                emit_json(
                    {
                        "source": file,
                        "system": result.system,
                        "zone_note": zone_note or None,
                        "remarks": [{"line": line, "kind": kind, "message": m} for line, kind, m in remarks],
                        "jobs": [job_document(j.definition) for j in jobs],
                    }
                )
                return
            head = [f"Imported from {file} ({kind}) by clockctl import-crontab.", *comments]
            typer.echo(dump_jobs([j.definition for j in jobs], head), nl=False)
            return
        _apply_jobs(jobs, tenant, dry_run=False, prune=False, output=output, command="import-crontab")


# -- the shared apply path ----------------------------------------------------------------


def _apply_jobs(
    jobs: Sequence[Job], tenant: str, *, dry_run: bool, prune: bool, output: OutputFormat, command: str
) -> None:
    definitions = [j.definition for j in jobs]

    async def go(ops: Ops) -> tuple[ApplyPlan, ApplyResult | None]:
        with _progress(len(jobs)) as advance:
            if dry_run:
                plan = await ops.plan_apply(definitions, tenant, prune=prune, progress=advance("checking", len(jobs)))
                result = None
            else:
                # Planned and written in one pipelined transaction (Ops.apply); the plan is
                # printed once it is committed (or, with a problem, not at all).
                plan, result = await ops.apply(
                    definitions, tenant, prune=prune, progress=advance("checking and writing", len(jobs))
                )
            if not plan.problems and output is OutputFormat.table:
                _print_plan(plan, jobs, dry_run, command)
            return plan, result

    plan, result = with_ops(go, create=True)  # a dry run on a new machine shows every job as added
    if plan.problems:
        lines = [_problem(jobs[p.index], p.message) for p in plan.problems]
        for line in lines:
            err_console.print(line, markup=False, highlight=False)
        code = 2 if any(p.exit_code == 2 for p in plan.problems) else 1
        err_console.print(f"{len(lines)} error(s); nothing was applied", markup=False, highlight=False)
        raise typer.Exit(code)
    if output is OutputFormat.json:
        emit_json(_plan_doc(plan, jobs, dry_run, result))
        return
    if result is not None:
        extra = f"; canceled {result.canceled} pending occurrence(s) of older versions" if result.canceled else ""
        console.print(
            f"applied: {len(result.created)} created, {len(result.updated)} updated, "
            f"{len(result.deleted)} deleted{extra}",
            markup=False,
        )
        for schedule in result.updated:
            for line in replanned_lines([r for r in result.replanned if r.schedule_id == schedule.id], schedule.name):
                console.print(line, markup=False, highlight=False)


def _print_plan(plan: ApplyPlan, jobs: Sequence[Job], dry_run: bool, command: str) -> None:
    from clockd.formats.schedfile import changed_fields

    changes = plan.changes
    for item in changes:
        where = f"  ({jobs[item.index].where})" if item.index is not None else ""
        console.print(f"{_SYMBOL[item.action]} {item.action:<6} {item.name}{where}", markup=False, highlight=False)
        if item.action is PlanAction.UPDATE and item.current is not None and item.desired is not None:
            for name, old, new in changed_fields(item.current.definition, item.desired):
                console.print(f"      {name}: {_show(old)} → {_show(new)}", markup=False, highlight=False)
        if item.action in (PlanAction.CREATE, PlanAction.UPDATE) and item.desired is not None:
            console.print(f"      next run: {_next(item)}", markup=False, highlight=False)
    unchanged = plan.count(PlanAction.UNCHANGED)
    if not changes:
        console.print(f"no changes ({unchanged} unchanged)", markup=False)
    else:
        counts = ", ".join(
            f"{plan.count(action)} to {action.value}"
            for action in (PlanAction.CREATE, PlanAction.UPDATE, PlanAction.DELETE)
        )
        console.print(
            f"{counts}, {unchanged} unchanged" + ("; dry run: nothing written" if dry_run else ""), markup=False
        )
    if plan.not_listed:
        shown = ", ".join(plan.not_listed[:10]) + (", …" if len(plan.not_listed) > 10 else "")
        hint = "; apply --prune deletes them" if command == "apply" else ""
        console.print(
            f"{len(plan.not_listed)} schedule(s) created by apply are not in this input (kept{hint}): {shown}",
            markup=False,
            highlight=False,
        )


def _next(item: PlanItem) -> str:
    if item.next_run_at is None or item.desired is None:
        return "none" + (" (paused)" if item.current is not None and item.current.state == "paused" else "")
    paused = item.current is not None and item.current.state == "paused"
    text = f"{local(item.next_run_at, item.desired.tz)} ({stamp(item.next_run_at)})"
    return text + (" — paused: it stays paused" if paused else "")


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    return json.dumps(value, ensure_ascii=False)


def _problem(job: Job, message: str) -> str:
    """``file:line: field: message`` for a problem found while planning."""
    from clockd.formats.schedfile import FIELD_NAMES

    named = message.split(":", 1)[0]
    if named in FIELD_NAMES:
        return f"{job.at(named)}: {message}"
    if "never fires" in message:  # about the expression: point at schedule/at/every
        return f"{job.at(job.when_field)}: {job.when_field}: {message}"
    return f"{job.where}: {message}"


def _plan_doc(plan: ApplyPlan, jobs: Sequence[Job], dry_run: bool, result: ApplyResult | None) -> dict[str, Any]:
    from clockd.formats.schedfile import changed_fields

    changes = []
    for item in plan.changes:
        fields = []
        if item.action is PlanAction.UPDATE and item.current is not None and item.desired is not None:
            fields = [
                {"field": n, "old": o, "new": v} for n, o, v in changed_fields(item.current.definition, item.desired)
            ]
        replanned = []
        if result is not None and item.current is not None:
            replanned = [r for r in result.replanned if r.schedule_id == item.current.id]
        changes.append(
            {
                "action": item.action.value,
                "name": item.name,
                "source": str(jobs[item.index].where) if item.index is not None else None,
                "fields": fields,
                "next_run_at": iso(item.next_run_at),
                **replanned_doc(replanned),
            }
        )
    return {
        "tenant": plan.tenant,
        "dry_run": dry_run,
        "applied": result is not None,
        "changes": changes,
        "unchanged": plan.count(PlanAction.UNCHANGED),
        "not_listed": plan.not_listed,
        "canceled": result.canceled if result is not None else 0,
    }


_Remark = TypeVar("_Remark", bound=tuple[Any, ...])


def _in_line_order(remarks: list[_Remark]) -> list[_Remark]:
    """Sorted by line (each remark's first item); a remark about the whole file (line None)
    stays after the one before it."""
    keyed = []
    last = 0
    for position, remark in enumerate(remarks):
        last = remark[0] if remark[0] is not None else last
        keyed.append(((last, position), remark))
    return [remark for _, remark in sorted(keyed, key=lambda item: item[0])]


def _refuse(errors: Sequence[FileError], count: int | None = None) -> typer.Exit:
    for error in errors:
        err_console.print(str(error), markup=False, highlight=False)
    err_console.print(f"{len(errors) if count is None else count} error(s); nothing was applied", markup=False,
                      highlight=False)  # fmt: skip
    return typer.Exit(2)


def _note(text: str) -> None:
    err_console.print(text, markup=False, highlight=False)


# -- progress --------------------------------------------------------------------------------

Advance = Callable[[str, int | None], Callable[[int], None]]


@contextmanager
def _progress(count: int, stream: Console | None = None) -> Iterator[Advance]:
    """A progress bar on stderr for more than ``PROGRESS_THRESHOLD`` schedules, only on a
    terminal. Yields ``advance(description, total)``: starts a step (total None: a spinner)
    and returns the callback that moves it."""
    target = err_console if stream is None else stream
    if count <= PROGRESS_THRESHOLD or not target.is_terminal:
        yield lambda description, total: lambda n: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=target, transient=True) as progress:
        current: list[Any] = []

        def advance(description: str, total: int | None) -> Callable[[int], None]:
            for task in current:
                progress.update(task, completed=progress.tasks[task].total or 0)
            task = progress.add_task(description, total=total)
            current[:] = [task]
            return lambda n: progress.advance(task, n)

        yield advance


# -- crontab helpers -------------------------------------------------------------------------


def _zone(given: str | None) -> tuple[str, str | None]:
    """The zone of crontab times: --tz, else the host's (said in a note), else UTC."""
    if given:
        from clockd.core.zones import get_zone

        try:
            get_zone(given)  # checked here: a file that sets CRON_TZ= first never used it
        except InvalidInput as exc:
            raise InvalidInput(f"--tz: {exc.message}") from None
        return given, None
    from clockd.core.zones import available_zones

    candidates = []
    env = os.environ.get("TZ", "").lstrip(":")
    if env:
        candidates.append(env)
    try:
        candidates.append(Path("/etc/timezone").read_text(encoding="utf-8").strip())
    except OSError:
        pass
    try:
        link = os.readlink("/etc/localtime")
        if "zoneinfo/" in link:
            candidates.append(link.split("zoneinfo/", 1)[1])
    except OSError:
        pass
    for name in candidates:
        if name in available_zones():
            return name, f"times are read in {name} (this host's zone, as cron does; --tz to change)"
    return "UTC", "times are read in UTC (this host's zone is unknown; --tz to change)"


def _known_users() -> set[str]:
    try:
        return {entry.pw_name for entry in pwd.getpwall()} | {"root"}
    except OSError:  # pragma: no cover - no passwd database
        return {"root"}
