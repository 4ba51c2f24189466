"""``clockctl update``: a new version of a schedule's definition.

The store writes the new version, cancels the not-yet-claimed occurrences of
older versions and re-plans those instants under the new version where it still
fires, in one transaction (the command says how many it re-planned and dropped); the
new version starts at its first instant after now and no instant runs twice;
occurrences already claimed finish under their version (the command says how many).
"""

from __future__ import annotations

import dataclasses
import shlex
from collections import Counter
from datetime import timedelta
from typing import Annotated

import typer

from clockctl import policyopts
from clockctl.commands.schedules import notify_options, validated, whole_second_now
from clockctl.context import with_ops
from clockctl.output import OutputFormat, console, emit_json, handle_errors
from clockctl.render import iso, local, occurrence_doc, replanned_doc, replanned_lines, schedule_doc, stamp
from clockd.core.instants import format_instant, parse_instant
from clockd.core.model import CommandTarget, MisfirePolicy, OccurrenceState, OverlapPolicy, ScheduleDef
from clockd.core.notify import NotifyEvent
from clockd.errors import InvalidInput
from clockd.services.ops import Change, Ops, next_runs, spec_of, starts_of

Output = Annotated[OutputFormat, typer.Option("--output", "-o", metavar="table|json", help="output format")]


def register(app: typer.Typer) -> None:
    @app.command(
        "update",
        context_settings={"allow_extra_args": False},
        epilog='Example: clockctl update report --cron "30 9 * * 1-5" --overlap skip',
    )
    @handle_errors
    def update(
        name: Annotated[str, typer.Argument(metavar="NAME", help="schedule name")],
        args: Annotated[
            list[str] | None,
            typer.Argument(metavar="[-- COMMAND [ARGS]...]", help="a new command, after --"),
        ] = None,
        cron: Annotated[str | None, typer.Option("--cron", metavar="EXPR", help="a new cron expression")] = None,
        every: Annotated[
            str | None, typer.Option("--every", metavar="DURATION", help="run at a fixed rate instead")
        ] = None,
        at: Annotated[str | None, typer.Option("--at", metavar="INSTANT", help="run once at INSTANT instead")] = None,
        tz: Annotated[str | None, typer.Option("--tz", metavar="ZONE", help="a new IANA time zone")] = None,
        command: Annotated[
            str | None,
            typer.Option("--command", metavar="TEXT", help="a new command line (split like a shell would)"),
        ] = None,
        shell: Annotated[bool, typer.Option("--shell", help="run the new command string through /bin/sh -c")] = False,
        queue: Annotated[str | None, typer.Option("--queue", metavar="QUEUE", help="a new queue")] = None,
        user: Annotated[
            str | None, typer.Option("--user", metavar="USER|none", help="run the command as USER (none: the worker's)")
        ] = None,
        group: Annotated[
            str | None, typer.Option("--group", metavar="GROUP|none", help="run the command with GROUP (none: USER's)")
        ] = None,
        timeout: Annotated[
            str | None, typer.Option("--timeout", metavar="DURATION|none", help="a new attempt timeout")
        ] = None,
        retries: Annotated[int | None, typer.Option("--retries", metavar="N", help="retries after a failure")] = None,
        backoff: Annotated[str | None, typer.Option("--backoff", metavar="DURATION", help="first retry delay")] = None,
        misfire: policyopts.Misfire = None,
        max_lateness: policyopts.MaxLateness = None,
        catch_up_limit: policyopts.CatchUpLimit = None,
        overlap: policyopts.Overlap = None,
        window: policyopts.Window = None,
        permanent_exit_codes: policyopts.PermanentExitCodes = None,
        stdin: policyopts.Stdin = None,
        on_failure: policyopts.OnFailure = None,
        on_dead: policyopts.OnDead = None,
        on_missed: policyopts.OnMissed = None,
        on_success: policyopts.OnSuccess = None,
        tenant: Annotated[str, typer.Option("--tenant", metavar="TENANT", help="tenant of the schedule")] = "default",
        output: Output = OutputFormat.table,
    ) -> None:
        """Change a schedule: a new version. Pending occurrences of the old version are
        canceled and re-planned under the new one where it still fires (the next runs are
        kept; the others are dropped, saying why); running ones finish under the old one;
        no instant runs twice. Options left out keep their value; --stdin '' and
        --on-EVENT none remove the stdin text or the notification."""
        notify = {NotifyEvent.FAILURE: on_failure, NotifyEvent.DEAD: on_dead, NotifyEvent.MISSED: on_missed,
                  NotifyEvent.SUCCESS: on_success}  # fmt: skip
        edits = _Edits(
            args or [], cron, every, at, tz, command, shell, queue, user, group, timeout, retries, backoff,
            misfire, max_lateness, catch_up_limit, overlap, window, permanent_exit_codes, stdin,
            tuple((event, text) for event, text in notify.items() if text is not None),
        )  # fmt: skip

        async def go(ops: Ops) -> tuple[int, Change]:
            current = await ops.get(name, tenant)
            return current.version, await ops.update(name, edits.apply(current.definition), tenant)

        before, change = with_ops(go)
        schedule = change.schedule
        upcoming = (
            next_runs(spec_of(schedule), schedule.next_run_at - timedelta(microseconds=1), 5)
            if schedule.next_run_at and schedule.state == "active"
            else []
        )
        # The instants re-planned under the new version come before its cursor: they are
        # the next runs (a MISSED one will not run).
        replanned = [r.scheduled_for for r in change.kept if r.state is OccurrenceState.SCHEDULED]
        upcoming = sorted(set(replanned + upcoming))[:5]
        if output is OutputFormat.json:
            emit_json(
                {
                    **schedule_doc(schedule),
                    "previous_version": before,
                    "canceled": change.canceled,
                    **replanned_doc(change.replanned),
                    "running": [occurrence_doc(o) for o in change.running],
                    "next_runs": [iso(t) for t in upcoming],
                    "next_starts": [iso(t) for t in starts_of(schedule, upcoming)],
                }
            )
            return
        if schedule.version == before:
            console.print(f"{schedule.name} unchanged (version {before})")
            return
        console.print(
            f"updated {schedule.name}: version {before} → {schedule.version}; canceled {change.canceled} "
            f"pending occurrence{'s' if change.canceled != 1 else ''} of older versions"
        )
        for line in replanned_lines(change.replanned):
            console.print(line, markup=False, highlight=False)
        for version, count in sorted(Counter(o.version for o in change.running).items()):
            console.print(
                f"{count} running occurrence{'s' if count > 1 else ''} of version {version} will finish "
                f"under version {version}"
            )
        if upcoming:
            console.print("next runs:")
            for t, start in zip(upcoming, starts_of(schedule, upcoming), strict=True):
                line = f"  {local(t, schedule.definition.tz)}  ({stamp(t)})"
                if start != t:
                    line += f"  starts {stamp(start)}"
                console.print(line)


@dataclasses.dataclass(frozen=True, slots=True)
class _Edits:
    args: list[str]
    cron: str | None
    every: str | None
    at: str | None
    tz: str | None
    command: str | None
    shell: bool
    queue: str | None
    user: str | None  # "none" removes it (as --timeout none)
    group: str | None
    timeout: str | None
    retries: int | None
    backoff: str | None
    misfire: MisfirePolicy | None
    max_lateness: str | None
    catch_up_limit: int | None
    overlap: OverlapPolicy | None
    window: str | None
    permanent_exit_codes: str | None
    stdin: str | None
    notify: tuple[tuple[NotifyEvent, str], ...]  # --on-EVENT given; "none" removes

    def apply(self, current: ScheduleDef) -> ScheduleDef:
        """``current`` with these edits, validated as a whole by the one validator: the
        edits are laid over the schedule's file form (``job_document``) and the result goes
        through ``validate_job``, as a schedule file's entry would."""
        if sum(x is not None for x in (self.cron, self.every, self.at)) > 1:
            raise InvalidInput("give one of --cron, --every or --at")
        if self.command is not None and self.args:
            raise InvalidInput("give the new command either with --command or after --, not both")
        from clockd.formats.schedfile import job_document, notification_document  # with the verb (start-up)

        job = job_document(current)
        tz = self.tz if self.tz is not None else current.tz
        if self.tz is not None:
            job["tz"] = self.tz
        when: dict[str, str] = {}
        if self.cron is not None:
            when["schedule"] = self.cron
        elif self.every is not None:
            when["every"] = self.every
        elif self.at is not None:
            when["at"] = format_instant(parse_instant(self.at, tz, whole_second_now()))
        if when:
            for key in ("schedule", "at", "every"):
                job.pop(key, None)
            job.update(when)
        argv = self._argv()
        if argv is not None:
            if not isinstance(current.target, CommandTarget):
                job.pop("http", None)
                job.pop("noop", None)
            job["command"] = argv[0] if self.shell else list(argv)
            job["shell"] = self.shell
        elif self.shell:
            raise InvalidInput("--shell applies to a new command (--command or after --)")
        if self.queue is not None:
            job["queue"] = self.queue
        # A value, or "none" to remove it. user/group: a team's jobs run as its user, and
        # changing it took an rm and an add, losing the history (the validator refuses
        # them for a non-command target).
        for key, value in (("user", self.user), ("group", self.group), ("timeout", self.timeout)):
            if value is not None:
                job.pop(key, None)
                if value.strip().lower() != "none":
                    job[key] = value
        if self.retries is not None:
            job["retries"] = self.retries
        if self.backoff is not None:
            job["backoff"] = self.backoff
        job.update(
            policyopts.policy_fields(
                misfire=self.misfire,
                max_lateness=self.max_lateness,
                catch_up_limit=self.catch_up_limit,
                overlap=self.overlap,
                window=self.window,
                permanent_exit_codes=self.permanent_exit_codes,
            )
        )
        if self.stdin is not None:
            job.pop("stdin", None)
            if self.stdin:
                job["stdin"] = self.stdin  # the validator refuses it for a non-command target
        wanted = {event.value: text for event, text in self.notify if text.strip().lower() != "none"}
        for event, _ in self.notify:
            job.pop(event.field, None)
        job.update((n.event.field, notification_document(n)) for n in notify_options(**wanted))
        # Labels (apply's managed-by mark included) are not the user's to edit here.
        return dataclasses.replace(validated(job, current.tenant), labels=current.labels)

    def _argv(self) -> tuple[str, ...] | None:
        """The new command's argv (one string with --shell); None if no new command."""
        if self.command is None and not self.args:
            return None
        if self.shell:
            return (self.command if self.command is not None else " ".join(self.args),)
        if self.command is not None:
            try:
                return tuple(shlex.split(self.command))
            except ValueError as exc:
                raise InvalidInput(f"--command: {exc}") from None
        return tuple(self.args)
