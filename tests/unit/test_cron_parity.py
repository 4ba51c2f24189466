"""Schedule-file fields for cron parity (``stdin``, ``on_failure`` & co.), the runner
feeding stdin to a real process, and what a notification is made of."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime

import pytest

from clockd.core.model import AttemptOutcome, CommandTarget, OccurrenceState, ScheduleDef
from clockd.core.notify import Notification, NotifyEvent, parse_notification
from clockd.formats.schedfile import dump_jobs, load_text
from clockd.runner import RunRequest
from clockd.runner.notify import Outcome, document, idempotency_key
from clockd.runner.process import ProcessRunner

PY = sys.executable
HEAD = "jobs:\n  - name: j\n    schedule: '0 * * * *'\n    command: [cat]\n"


def load(extra: str) -> tuple[list[str], ScheduleDef | None]:
    result = load_text(HEAD + extra, "f.yaml")
    return [str(e) for e in result.errors], result.jobs[0].definition if result.jobs else None


def test_stdin_and_notifications_load_and_export_back_unchanged() -> None:
    errors, definition = load(
        "    stdin: |\n      first\n      second\n"
        "    on_failure: {command: 'logger -t cron $CLOCKD_SCHEDULE'}\n"
        "    on_dead: {command: [/usr/local/bin/page, --team, ops]}\n"
        "    on_missed: {http: 'https://hooks.example.com/x'}\n"
        "    on_success: {mail: 'ops@example.com, dev@example.com'}\n"
    )
    assert errors == []
    assert definition is not None and isinstance(definition.target, CommandTarget)
    assert definition.target.stdin == "first\nsecond\n"
    assert definition.notify == (
        Notification(NotifyEvent.FAILURE, argv=("logger -t cron $CLOCKD_SCHEDULE",), shell=True),
        Notification(NotifyEvent.DEAD, argv=("/usr/local/bin/page", "--team", "ops")),
        Notification(NotifyEvent.MISSED, url="https://hooks.example.com/x"),
        Notification(NotifyEvent.SUCCESS, mail="ops@example.com, dev@example.com"),
    )
    text = dump_jobs([definition])
    assert "stdin: |\n" in text
    again = load_text(text, "again.yaml")
    assert again.errors == [] and again.jobs[0].definition == definition


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("    on_failure: 'echo hi'\n", "f.yaml:5: on_failure: expected a mapping with one of command, http, mail"),
        ("    on_failure: {url: x}\n", "f.yaml:5: on_failure: url: unknown key (give one of command, http, mail)"),
        ("    on_dead: {http: 'ftp://x', mail: a}\n", "f.yaml:5: on_dead: give exactly one of command, http, mail"),
        ("    on_missed: {http: 'ftp://x'}\n", "f.yaml:5: on_missed: http: 'ftp://x' is not an http:// or https://"),
        ("    on_success: {mail: '-oQ/tmp'}\n", "f.yaml:5: on_success: mail: '-oQ/tmp' is not a list of addresses"),
        ("    on_success: {mail: 'a@x, -oQ'}\n", "f.yaml:5: on_success: mail: 'a@x, -oQ' is not a list of addresses"),
        ("    stdin: [a]\n", "f.yaml:5: stdin: expected a string, got a list"),
    ],
)
def test_bad_notifications_and_stdin_are_refused_at_their_line(extra: str, message: str) -> None:
    errors, definition = load(extra)
    assert definition is None and len(errors) == 1 and errors[0].startswith(message), errors


def test_stdin_is_not_allowed_on_an_http_target() -> None:
    text = "jobs:\n  - name: j\n    every: 5m\n    http: {method: GET, url: 'https://x'}\n    stdin: hi\n"
    errors = [str(e) for e in load_text(text, "f.yaml").errors]
    assert errors == ["f.yaml:5: stdin: not allowed with http: (line 4), which runs no command"]


def test_the_cli_form_of_a_notification() -> None:
    assert parse_notification(NotifyEvent.DEAD, "https://h/x") == Notification(NotifyEvent.DEAD, url="https://h/x")
    assert parse_notification(NotifyEvent.DEAD, "mail:root") == Notification(NotifyEvent.DEAD, mail="root")
    assert parse_notification(NotifyEvent.DEAD, "echo $CLOCKD_STATE") == Notification(
        NotifyEvent.DEAD, argv=("echo $CLOCKD_STATE",), shell=True
    )
    with pytest.raises(ValueError, match="--on-dead: give a command"):
        parse_notification(NotifyEvent.DEAD, " ")


def _request(target: CommandTarget) -> RunRequest:
    return RunRequest("occ-1", "j", datetime(2026, 1, 1, tzinfo=UTC), 1, target, timeout=20)


async def test_the_runner_feeds_stdin_and_closes_it() -> None:
    result = await ProcessRunner().run(_request(CommandTarget(argv=("cat",), stdin="a\nb%\n")), asyncio.Event())
    assert result.outcome is AttemptOutcome.SUCCEEDED and result.output == "a\nb%\n"


async def test_a_job_that_never_reads_a_large_stdin_does_not_hang_the_runner() -> None:
    big = "x" * (1 << 20)  # far more than a pipe holds
    result = await ProcessRunner().run(_request(CommandTarget(argv=("true",), stdin=big)), asyncio.Event())
    assert result.outcome is AttemptOutcome.SUCCEEDED


async def test_without_stdin_the_job_reads_dev_null() -> None:
    code = "import sys; print(repr(sys.stdin.read()))"
    result = await ProcessRunner().run(_request(CommandTarget(argv=(PY, "-c", code))), asyncio.Event())
    assert result.output == "''\n"


def test_what_a_notification_carries() -> None:
    failed = Outcome(
        schedule_id="s1",
        version=2,
        schedule_name="backup",
        occurrence_id="o1",
        scheduled_for=datetime(2026, 1, 1, 3, tzinfo=UTC),
        state=OccurrenceState.RETRY_WAIT,
        attempt=2,
        outcome=AttemptOutcome.TIMED_OUT,
        error="timed out after 60s",
        output="y" * 20_000,
    )
    assert failed.events() == [NotifyEvent.FAILURE]  # retried: a failure, not (yet) dead
    assert idempotency_key(failed, NotifyEvent.FAILURE) == "o1:failure:2"
    doc = document(failed, NotifyEvent.FAILURE)
    assert doc["scheduled_for"] == "2026-01-01T03:00:00Z" and doc["state"] == "RETRY_WAIT"
    assert len(doc["output_tail"]) == 8 * 1024
    missed = Outcome("s1", 2, "backup", "o2", failed.scheduled_for, OccurrenceState.MISSED)
    assert missed.events() == [NotifyEvent.MISSED] and idempotency_key(missed, NotifyEvent.MISSED) == "o2:missed"
    dead = Outcome("s1", 2, "b", "o3", failed.scheduled_for, OccurrenceState.DEAD, 3, AttemptOutcome.FAILED)
    assert dead.events() == [NotifyEvent.FAILURE, NotifyEvent.DEAD]
