"""One validator for every front end (issue 14 item 8, issue 15 item 8), through the real
``clockctl``: bad input exits 2 with one line on stderr, no traceback, nothing written;
a schedule file refuses the same things with the same words."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from clockd.core.limits import MAX_ARG_BYTES
from clockd.formats.schedfile import load_text, validate_job


def refused(result: subprocess.CompletedProcess[str], needle: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert needle in result.stderr, result.stderr
    assert result.stdout == ""


def nothing_stored(ctl: Any) -> None:
    listed = ctl("list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []


BAD_ADDS = [
    # The field named once (it was "every: every: …").
    (["--every", "0s", "--", "true"], "error: every: the interval must be at least 1s, got 0s\n"),
    # A forgotten expression: click drops the --, so the command's first word came in as
    # the expression ("expected 5 fields, got 1", or "missing the command").
    (["--name", "x", "--", "echo", "hi"], "missing the cron expression ('echo' is not one)"),
    (["--name", "x", "--", "/bin/true"], "missing the cron expression ('/bin/true' is not one)"),
    (["--every", "1h", "--", ""], "command: the program (first item) must not be empty"),
    (["--every", "1h", "--", " "], "command: the program (first item) must not be empty or blank"),
    (["--every", "1h", "--name", "x", "--", ""], "must not be empty"),
    (["--every", "1h", "--retries", "100000000000000000000", "--", "true"], "retries: 100000000000000000000 is out"),
    (["--every", "1h", "--tenant", "", "--", "true"], "tenant: must be 1 to 200 characters"),
    (["--every", "1h", "--tenant", "a\nb", "--", "true"], "tenant: character U+000A"),
    (["--every", "1h", "--queue", "", "--", "true"], "queue: must not be empty"),
    (["--every", "1h", "--name", "a\u009b2J", "--", "true"], "name: character U+009B"),
    (["--every", "1h", "--name", "a\x7f", "--", "true"], "name: character U+007F"),
    (["--every", "1h", "--name", "evil\u202etxt.sh", "--", "true"], "name: character U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    # Two words clockctl itself can be given, joined into one shell line Linux cannot exec.
    (
        ["--every", "1h", "--shell", "--name", "x", "--", *["x" * (MAX_ARG_BYTES // 2 + 1)] * 2],
        "command: the shell line is 131073 bytes; Linux cannot run an argument over 131071 bytes",
    ),
    (["* * * * *", "--every", "1h", "--", "true"], "'* * * * *' is a cron expression: give one of"),
    (["--at", "now+1s", "--", "echo hi > /tmp/x"], "add --shell"),
    (["--at", "now+1s", "--", "echo hi there"], "(-- echo hi there)"),
]


@pytest.mark.parametrize(("args", "needle"), BAD_ADDS)
def test_add_refuses_bad_input_with_one_line_and_writes_nothing(ctl: Any, args: list[str], needle: str) -> None:
    refused(ctl("add", *args), needle)
    nothing_stored(ctl)


def test_tenant_limits_take_the_same_tenant_names(ctl: Any) -> None:
    refused(ctl("tenant", "set", "team\u202e", "--max-schedules", "3"), "tenant: character U+202E")
    assert ctl("tenant", "set", "team-a", "--max-schedules", "3").returncode == 0


def test_argv_and_env_too_big_to_exec_are_refused_wherever_they_come_from() -> None:
    one = validate_job({"name": "big", "every": "1h", "command": ["echo", "x" * (MAX_ARG_BYTES + 1)]})
    assert isinstance(one, list)
    assert [str(p) for p in one] == [
        "command: argument 1 is 131072 bytes; Linux cannot run an argument over 131071 bytes "
        "(put large data in a file and pass its path)"
    ]
    # Each argument and value fits, together they pass what a job can be given.
    env = {f"V{i}": "y" * (100 * 1024) for i in range(11)}
    many = validate_job({"name": "big", "every": "1h", "command": ["true"], "env": env})
    assert isinstance(many, list) and "at most 1048576 can be passed to a job" in str(many[0])


def test_a_huge_time_zone_is_refused_quickly(ctl: Any) -> None:
    started = time.monotonic()
    result = ctl("add", "--every", "1h", "--tz", "Europe/" * 2300, "--", "true")
    refused(result, "time zone name longer than 64 characters")
    assert time.monotonic() - started < 5  # 10.7 s before: difflib over every zone name


def test_update_goes_through_the_same_validator(ctl: Any) -> None:
    assert ctl("add", "--every", "1h", "--name", "job", "--", "true").returncode == 0
    refused(ctl("update", "job", "--retries", "100000000000000000000"), "retries: 100000000000000000000 is out")
    refused(ctl("update", "job", "--queue", "q\u202e"), "queue: character U+202E")
    refused(ctl("update", "job", "--", "echo hi > /tmp/x"), "add --shell")
    doc = json.loads(ctl("show", "job", "-o", "json").stdout)
    assert doc["version"] == 1 and doc["target"]["argv"] == ["true"]


def test_a_shell_line_with_shell_runs_through_sh_and_needs_a_name(ctl: Any) -> None:
    refused(ctl("add", "--at", "now+1h", "--shell", "--", "echo hi > /tmp/x"), "--name: required with --shell")
    added = ctl("add", "--at", "now+1h", "--shell", "--name", "hi", "--", "echo hi > /tmp/x")
    assert added.returncode == 0, added.stderr


def test_the_default_name_is_the_program_basename(ctl: Any) -> None:
    added = ctl("add", "--every", "1h", "--", "/usr/bin/env", "true")
    assert added.returncode == 0, added.stderr
    assert "added env " in added.stdout
    again = ctl("add", "--every", "2h", "--", "/usr/bin/env", "false")
    assert again.returncode == 1 and "give another with --name" in again.stderr, again.stderr


def test_the_file_loader_refuses_the_same_things_with_the_same_words() -> None:
    text = (
        "jobs:\n"
        '  - name: "a\\u202e"\n'
        "    every: 1h\n"
        "    retries: 100000000000000000000\n"
        '    command: ["echo hi > /tmp/x"]\n'
    )
    messages = [str(e) for e in load_text(text, "f.yaml").errors]
    assert messages == [
        "f.yaml:2: name: character U+202E (RIGHT-TO-LEFT OVERRIDE) is not allowed: no control or invisible characters",
        "f.yaml:4: retries: 100000000000000000000 is out of range 0-1000",
        "f.yaml:5: command: the program 'echo hi > /tmp/x' holds spaces or shell syntax: add --shell "
        "(in a file: shell: true) to run it with /bin/sh -c",
    ]


def test_validate_job_gives_every_problem_with_a_json_pointer() -> None:
    problems = validate_job(
        {"name": "ok", "every": "1h", "retries": -1, "http": {"method": "GET", "url": "ftp://x"}, "bogus": 1}
    )
    assert isinstance(problems, list)
    assert [(p.pointer, p.message) for p in problems] == [
        ("/retries", "-1 is out of range 0-1000"),
        ("/http/url", "the URL must be http:// or https:// with a host"),
        ("/bogus", problems[2].message),
    ]
    assert problems[2].message.startswith("unknown field (valid: name, ")
    assert validate_job({"name": "ok", "every": "1h", "noop": True}, tenant="t\u0085") == [
        problems[0].__class__(("tenant",), "character U+0085 (a control character) is not allowed: "
                              "no control or invisible characters")
    ]  # fmt: skip
    good = validate_job({"name": "ok", "every": "90m", "command": ["true"]}, tenant="team-a")
    assert not isinstance(good, list) and good.tenant == "team-a" and good.expr == "1h30m"


# click's own refusals (a value not among an option's choices, a number out of range, an
# unknown option or command) are bad input like any other: one line, exit 2, the verb's
# --help named. They printed click's three-line usage block before.
CLICK_REFUSALS = [
    (["add", "--name", "x", "--misfire", "never", "--every", "1h", "--", "true"], "'never' is not one of"),
    (["list", "-o", "yaml"], "'yaml' is not one of 'table', 'json'"),
    (["preview", "* * * * *", "-n", "0"], "0 is not in the range"),
    (["runs", "--bogus"], "No such option: --bogus"),
    (["lst"], "No such command 'lst'. Did you mean 'list'?"),
]


@pytest.mark.parametrize(("args", "needle"), CLICK_REFUSALS)
def test_option_parsing_errors_are_one_line_with_exit_2(ctl: Any, args: list[str], needle: str) -> None:
    result = ctl(*args)
    refused(result, needle)
    assert "Usage:" not in result.stderr
    assert "--help)" in result.stderr
    nothing_stored(ctl)


def test_a_server_that_is_not_a_url_is_bad_input(ctl: Any) -> None:
    # It was tried as a URL and reported "cannot reach the API" (exit 4).
    refused(ctl("--server", "127.0.0.1:8470", "list"), "server: '127.0.0.1:8470' is not a URL")


def test_a_bare_group_still_prints_its_help(ctl: Any) -> None:
    result = ctl("tenant")
    assert result.returncode == 2
    assert "Usage: clockctl tenant" in result.stderr + result.stdout
