"""Schedule files: the loader's reading of every field, its refusals (``file:line: field:
message``, all at once), its limits against hostile YAML, export round trips, and the
generated JSON Schema."""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from clockd.core.model import (
    CommandTarget,
    HttpTarget,
    MisfirePolicy,
    NoopTarget,
    OverlapPolicy,
    RetryPolicy,
    ScheduleDef,
    ScheduleKind,
)
from clockd.formats.schedfile import (
    FIELD_NAMES,
    MAX_FILE_BYTES,
    changed_fields,
    dump_jobs,
    exportable,
    job_document,
    json_schema,
    load_paths,
    load_text,
    read_limited,
    schema_text,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config"


def errors_of(text: str) -> list[str]:
    return [str(e) for e in load_text(text, "f.yaml").errors]


def only_job(text: str) -> ScheduleDef:
    result = load_text(text, "f.yaml")
    assert [str(e) for e in result.errors] == []
    assert len(result.jobs) == 1
    return result.jobs[0].definition


# -- reading ---------------------------------------------------------------------------------

FULL = """\
jobs:
  - name: nightly-report
    schedule: "0 9 * * *"
    tz: Europe/Paris
    command: ["/usr/local/bin/report.sh", "--daily"]
    env: {REPORT_DIR: /srv/reports, DEBUG: yes, PORT: 8080, EMPTY: }
    cwd: /srv
    timeout: 30m
    retries: 3
    backoff: 1m
    misfire: catch_up
    max_lateness: 1h
    overlap: queue_one
    window: 2m
    queue: reports
    labels: {team: analytics, tier: "1"}
"""


def test_every_field_is_read() -> None:
    assert only_job(FULL) == ScheduleDef(
        name="nightly-report",
        kind=ScheduleKind.CRON,
        expr="0 9 * * *",
        tz="Europe/Paris",
        target=CommandTarget(
            argv=("/usr/local/bin/report.sh", "--daily"),
            env=(("DEBUG", "yes"), ("EMPTY", ""), ("PORT", "8080"), ("REPORT_DIR", "/srv/reports")),
            cwd="/srv",
        ),
        queue="reports",
        timeout=timedelta(minutes=30),
        retry=RetryPolicy(retries=3, backoff=timedelta(minutes=1)),
        misfire=MisfirePolicy.CATCH_UP,
        max_lateness=timedelta(hours=1),
        overlap=OverlapPolicy.QUEUE_ONE,
        window=timedelta(minutes=2),
        labels=(("team", "analytics"), ("tier", "1")),
    )


def test_defaults_are_the_definition_defaults() -> None:
    got = only_job("jobs:\n  - name: a\n    schedule: '@daily'\n    command: [/bin/true]\n")
    assert got == ScheduleDef(
        name="a", kind=ScheduleKind.CRON, expr="0 0 * * *", tz="UTC", target=CommandTarget(argv=("/bin/true",))
    )


@pytest.mark.parametrize(
    ("when", "kind", "expr"),
    [
        ('schedule: "*/15 8-18 * * mon-fri"', ScheduleKind.CRON, "*/15 8-18 * * MON-FRI"),
        ("schedule: '@hourly'", ScheduleKind.CRON, "0 * * * *"),
        ("at: 2026-12-24T18:00:00+01:00", ScheduleKind.ONCE, "2026-12-24T17:00:00Z"),
        ('at: "2026-12-24T18:00"', ScheduleKind.ONCE, "2026-12-24T17:00:00Z"),  # local, read in tz
        ("every: 90m", ScheduleKind.EVERY, "1h30m"),
        ("every: 1d 2h", ScheduleKind.EVERY, "1d2h"),
    ],
)
def test_the_three_forms_are_stored_canonical(when: str, kind: ScheduleKind, expr: str) -> None:
    got = only_job(f"jobs:\n  - name: a\n    {when}\n    tz: Europe/Paris\n    noop: true\n")
    assert (got.kind, got.expr, got.target) == (kind, expr, NoopTarget())


def test_shell_string_and_argv_list() -> None:
    shell = only_job("jobs:\n  - name: a\n    every: 1m\n    command: 'cd /srv && ./run'\n    shell: true\n")
    assert shell.target == CommandTarget(argv=("cd /srv && ./run",), shell=True)
    argv = only_job("jobs:\n  - name: a\n    every: 1m\n    command: [sleep, 5, yes]\n    shell: no\n")
    assert argv.target == CommandTarget(argv=("sleep", "5", "yes"))  # items as written


def test_merge_keys_and_x_keys() -> None:
    text = """\
x-defaults: &defaults
  tz: Europe/Paris
  retries: 5
  labels: {team: ops}
jobs:
  - <<: *defaults
    name: a
    every: 1h
    noop: true
    retries: 1
"""
    got = only_job(text)
    assert (got.tz, got.retry.retries, got.labels) == ("Europe/Paris", 1, (("team", "ops"),))


@pytest.mark.parametrize("text", ["", "# only a comment\n", "jobs:\n", "jobs: []\n", "---\n"])
def test_empty_files_have_no_jobs(text: str) -> None:
    result = load_text(text, "f.yaml")
    assert (result.jobs, result.errors) == ([], [])


# -- refusals: file:line: field: message ----------------------------------------------------


def job(*lines: str) -> str:
    return "jobs:\n  - name: a\n" + "".join(f"    {line}\n" for line in lines)


VALID = ["every: 1m", "noop: true"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (job('schedule: "61 * * * *"', "noop: true"), "f.yaml:3: schedule: minute: 61 is out of range 0-59"),
        (job('schedule: "0 0 31 2 *"', "noop: true"), "f.yaml:3: schedule: "),
        (job(*VALID, "colour: red"), f"f.yaml:5: colour: unknown field (valid: {', '.join(FIELD_NAMES)})"),
        (
            job(*VALID, "retires: 3"),
            f"f.yaml:5: retires: unknown field (did you mean retries? valid: {', '.join(FIELD_NAMES)})",
        ),
        (
            job("every: 1m", "at: 2030-01-01T00:00:00Z", "noop: true"),
            "f.yaml:4: at: give only one of schedule, at or every (also every at line 3)",
        ),
        (job("noop: true"), "f.yaml:2: one of schedule, at or every is required"),
        ("jobs:\n  - every: 1m\n    noop: true\n", "f.yaml:2: name: required"),
        (job("every: 1m"), "f.yaml:2: command: required (or http:, or noop: true)"),
        (
            job("every: 1m", "command: echo hi"),
            'f.yaml:4: command: a string needs shell: true (or give a list such as ["echo", "hi"])',
        ),
        (
            job("every: 1m", "command: echo hi > /tmp/out"),  # no list can redirect (it suggested one)
            "f.yaml:4: command: a string needs shell: true (it uses the shell's >)",
        ),
        (job("every: 1m", "command: [echo, hi]", "shell: true"), "f.yaml:4: command: with shell: true give one string"),
        (job("every: 1m", "command: []"), "f.yaml:4: command: the program (first item) must not be empty"),
        (job("every: 1m", "command: [echo, [nested]]"), "f.yaml:4: command: item 2: expected a string, got a list"),
        (job(*VALID, "command: [x]"), "f.yaml:5: command: not allowed with noop: true"),
        (job(*VALID, "retries: three"), "f.yaml:5: retries: expected an integer, got a string"),
        (job(*VALID, "retries: -1"), "f.yaml:5: retries: -1 is out of range 0-1000"),
        (job(*VALID, "retries: true"), "f.yaml:5: retries: expected an integer, got a boolean"),
        (job("every: 1m", "command: x", "shell: 'yes'"), "f.yaml:5: shell: expected a boolean, got a string"),
        (job(*VALID, "timeout: 30"), "f.yaml:5: timeout: duration '30' has no unit"),
        (job(*VALID, "timeout: 0s"), "f.yaml:5: timeout: must be positive"),
        (job(*VALID, "window: 10m"), "f.yaml:5: window: 10m is not between 0 (strict) and 5m"),
        (job(*VALID, "misfire: never"), "f.yaml:5: misfire: 'never' is not one of skip, fire_once, catch_up"),
        (job(*VALID, "tz: Europe/Pari"), "f.yaml:5: tz: unknown time zone 'Europe/Pari'; did you mean Europe/Paris?"),
        (job(*VALID, "queue: 7"), "f.yaml:5: queue: expected a string, got an integer (quote it to make it a string)"),
        (job(*VALID, "queue: ''"), "f.yaml:5: queue: must not be empty"),
        (job(*VALID, "env: [A=b]"), "f.yaml:5: env: expected a mapping (key: value), got a list"),
        # A key with a line break is shown quoted: every refusal is one line (found by the fuzz test).
        (job(*VALID, 'env: {"a\\nb": [x]}'), "f.yaml:5: env: 'a\\nb': expected a string, got a list"),
        (job(*VALID, "labels: {clockd.managed-by: me}"), "f.yaml:5: labels: clockd.managed-by is reserved"),
        (job("at: now+5m", "noop: true"), "f.yaml:3: at: relative instants (now+…) would move at every apply"),
        (
            job("at: 2026-03-29T02:30:00", "tz: Europe/Paris", "noop: true"),
            "f.yaml:3: at: 2026-03-29T02:30:00 does not exist in Europe/Paris",
        ),
        (job(*VALID, "1: x"), "f.yaml:5: keys must be strings, got an integer '1' (quote it)"),
        (job(*VALID, "on: x"), "f.yaml:5: keys must be strings, got a boolean 'on' (quote it)"),
        (job(*VALID, "? [a, b]\n    : x"), "f.yaml:5: keys must be strings, got a list (quote it)"),
        (job(*VALID, "every: 2m"), "f.yaml:5: every: duplicate key (first at line 3)"),
        ("jobs:\n  - name: a\n    every: 1m\n   noop: true\n", "f.yaml:4: invalid YAML:"),
        ("jobs: {a: 1}\n", "f.yaml:1: jobs: expected a list of jobs, got a mapping"),
        ("jobs:\n  - just a string\n", "f.yaml:2: a job must be a mapping of fields"),
        ("- name: a\n", "f.yaml:1: expected a mapping with a jobs: list"),
        ("job:\n  - name: a\n", "f.yaml:1: unknown top-level key 'job' (valid: jobs, x-…)"),
        ("jobs: []\n---\njobs: []\n", "f.yaml:2: one YAML document per file"),
        ("jobs: !!binary aGVsbG8=\n", "f.yaml:1: unsupported tag tag:yaml.org,2002:binary"),
        ("jobs: !!python/object:os.system {}\n", "f.yaml:1: unsupported tag tag:yaml.org,2002:python/object:os.system"),
        ("jobs: *nowhere\n", "f.yaml:1: alias *nowhere refers to no anchor defined before it"),
        ("jobs: &a [*a]\n", "f.yaml:1: alias *a refers to no anchor defined before it"),
        (b"jobs: [\xff]\n", "f.yaml: not UTF-8 text"),
        ("jobs:\n  - [\x07]\n", "f.yaml:2: invalid YAML: control characters are not allowed (#x0007)"),
    ],
)
def test_refusals_name_file_line_and_field(text: str | bytes, expected: str) -> None:
    result = load_text(text, "f.yaml")
    assert result.jobs == []
    messages = [str(e) for e in result.errors]
    assert any(m.startswith(expected) for m in messages), messages


def test_name_rules_come_from_ops_normalize() -> None:
    assert errors_of(job(*VALID).replace("name: a", "name: " + "x" * 201)) == [
        "f.yaml:2: name: must be 1 to 200 characters"
    ]


def test_every_error_of_every_job_is_reported_in_line_order() -> None:
    text = """\
jobs:
  - name: one
    schedule: "0 25 * * *"
    command: echo one
    retries: many
  - name: good
    every: 1h
    noop: true
  - name: three
    every: soon
    noop: true
    overlap: sometimes
"""
    result = load_text(text, "f.yaml")
    assert [j.name for j in result.jobs] == ["good"]
    assert [str(e) for e in result.errors] == [
        "f.yaml:3: schedule: hour: 25 is out of range 0-23",
        'f.yaml:4: command: a string needs shell: true (or give a list such as ["echo", "one"])',
        "f.yaml:5: retries: expected an integer, got a string",
        "f.yaml:10: every: duration 'soon': cannot read 'soon' (e.g. 90m, 1h30m, 30s, 2d, 500ms)",
        "f.yaml:12: overlap: 'sometimes' is not one of allow, skip, queue_one",
    ]


def test_errors_per_file_are_capped() -> None:
    text = "jobs:\n" + "".join(f"  - name: j{i}\n    every: soon\n    noop: true\n" for i in range(500))
    errors = load_text(text, "f.yaml").errors
    assert len(errors) == 101
    assert str(errors[-1]) == "f.yaml: too many errors; stopped here"


# -- several files --------------------------------------------------------------------------


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_directory_means_its_yaml_files_sorted(tmp_path: Path) -> None:
    d = tmp_path / "schedules.d"
    write(d / "b.yml", "jobs:\n  - {name: b, every: 1m, noop: true}\n")
    write(d / "a.yaml", "jobs:\n  - {name: a, every: 1m, noop: true}\n")
    write(d / "notes.txt", "not yaml")
    write(d / ".hidden.yaml", "jobs: [broken")
    (d / "sub.yaml").mkdir()
    result = load_paths([str(d)])
    assert result.errors == []
    assert result.files == [str(d / "a.yaml"), str(d / "b.yml")]
    assert [j.name for j in result.jobs] == ["a", "b"]


def test_missing_path_and_empty_directory_are_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = load_paths([str(tmp_path / "nope.yaml"), str(tmp_path / "empty")])
    assert [str(e) for e in result.errors] == [
        f"{tmp_path / 'nope.yaml'}: no such file or directory",
        f"{tmp_path / 'empty'}: directory has no *.yaml or *.yml files",
    ]


def test_duplicate_names_across_files_report_both_places(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", "jobs:\n  - name: report\n    every: 1m\n    noop: true\n")
    b = write(
        tmp_path / "b.yaml",
        "jobs:\n  - name: other\n    every: 1m\n    noop: true\n  - name: report\n    every: 2m\n    noop: true\n",
    )
    result = load_paths([a, b])
    assert sorted(str(e) for e in result.errors) == [
        f"{a}:2: name: 'report' is defined more than once (also at {b}:5)",
        f"{b}:5: name: 'report' is defined more than once (also at {a}:2)",
    ]


def test_the_shipped_examples_are_valid() -> None:
    files = sorted((CONFIG / "schedules.d").glob("*.y*ml"))
    assert files, "config/schedules.d has examples"
    result = load_paths([str(CONFIG / "schedules.d")])
    assert [str(e) for e in result.errors] == []
    definitions = [j.definition for j in result.jobs]
    assert {d.kind for d in definitions} == set(ScheduleKind)
    assert {d.misfire for d in definitions} == set(MisfirePolicy)
    assert {d.overlap for d in definitions} == set(OverlapPolicy)
    assert any(isinstance(d.target, NoopTarget) for d in definitions)
    assert any(isinstance(d.target, CommandTarget) and d.target.shell for d in definitions)
    assert any(isinstance(d.target, HttpTarget) for d in definitions)


# -- hostile input ----------------------------------------------------------------------------

BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
jobs:
  - name: bomb
    every: 1m
    command: *i
"""


def refused_quickly(text: str | bytes) -> list[str]:
    started = time.perf_counter()
    result = load_text(text, "f.yaml")
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, elapsed
    assert result.jobs == []
    return [str(e) for e in result.errors]


def test_billion_laughs_is_refused_without_expanding() -> None:
    assert refused_quickly(BILLION_LAUGHS) == [
        "f.yaml:6: aliases here stand for more than 100000 values (an anchor bomb?): refused"
    ]


def test_too_many_aliases_are_refused() -> None:
    text = "x-a: &a 1\njobs: [" + ",".join(["*a"] * 10_001) + "]\n"
    assert refused_quickly(text) == ["f.yaml:2: more than 10000 aliases in one document: refused"]


def test_deep_nesting_is_refused() -> None:
    assert refused_quickly("jobs: " + "[" * 100_000 + "]" * 100_000 + "\n") == [
        "f.yaml:1: nested more than 64 levels deep: refused"
    ]
    block = "jobs:\n" + "".join(" " * (2 * i) + "- \n" for i in range(1, 200))
    assert refused_quickly(block)[0].endswith("nested more than 64 levels deep: refused")


def test_oversize_content_is_refused_before_parsing() -> None:
    assert refused_quickly(b"#" * (MAX_FILE_BYTES + 1)) == ["f.yaml: larger than 10 MiB: refused"]


def test_oversize_file_is_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as stream:
        stream.truncate(MAX_FILE_BYTES + 1)  # sparse: nothing to read, only its size
    started = time.perf_counter()
    result = load_paths([str(big)])
    assert time.perf_counter() - started < 1.0
    assert [str(e) for e in result.errors] == [f"{big}: larger than 10 MiB: refused"]
    with pytest.raises(Exception, match="larger than 10 MiB"):
        read_limited(str(big))


def test_a_large_honest_file_loads() -> None:
    text = "jobs:\n" + "".join(
        f"  - name: job-{i}\n    schedule: '{i % 60} {i % 24} * * *'\n    command: [/bin/echo, '{i}']\n"
        for i in range(2000)
    )
    result = load_text(text, "f.yaml")
    assert result.errors == []
    assert len(result.jobs) == 2000


# -- export: the inverse of the loader ----------------------------------------------------------


def test_dump_then_load_gives_the_same_definitions() -> None:
    loaded = load_paths([str(CONFIG / "schedules.d")])
    definitions = [j.definition for j in loaded.jobs]
    text = dump_jobs(definitions, ["a comment", "", "and another"])
    assert text.startswith("# a comment\n#\n# and another\njobs:\n  - name: nightly-report\n")
    again = load_text(text, "exported.yaml")
    assert again.errors == []
    assert [j.definition for j in again.jobs] == definitions


WEIRD = [
    *("yes", "8080", "1.5", "null", "~", "- x", "a: b", "#hash", " padded ", "'quoted'", 'say "hi"'),
    *("naïve ☃ 日本", "tab\there", "line\nbreak", "*star", "&amp", "!bang", "%pct", "@at", "`tick`", ""),
]


@pytest.mark.parametrize("text", WEIRD)
def test_odd_strings_survive_dump_and_load(text: str) -> None:
    definition = ScheduleDef(
        name=f"n-{WEIRD.index(text)}",
        kind=ScheduleKind.CRON,
        expr="0 9 * * *",
        tz="Europe/Paris",
        target=CommandTarget(argv=("/bin/echo", text), env=(("V", text),), cwd=f"/srv/{text}"),
        # A queue is a name: control characters are refused in it (clockd.core.limits).
        queue=f"q{text}" if text.isprintable() else "q",
        labels=(("k", text),),
    )
    assert exportable(definition) is None
    again = load_text(dump_jobs([definition]), "x.yaml")
    assert [str(e) for e in again.errors] == []
    assert [j.definition for j in again.jobs] == [definition]


def test_export_leaves_out_defaults_and_the_managed_label() -> None:
    definition = ScheduleDef(
        name="a",
        kind=ScheduleKind.EVERY,
        expr="1h30m",
        tz="UTC",
        target=CommandTarget(argv=("/bin/true",)),
        labels=(("clockd.managed-by", "apply"), ("team", "x")),
    )
    assert job_document(definition) == {
        "name": "a",
        "every": "1h30m",
        "tz": "UTC",
        "command": ["/bin/true"],
        "labels": {"team": "x"},
    }


def test_what_the_format_cannot_carry_is_said() -> None:
    base = ScheduleDef(name="a", kind=ScheduleKind.EVERY, expr="1m", tz="UTC", target=NoopTarget())
    assert exportable(base) is None
    http = ScheduleDef(name="a", kind=ScheduleKind.EVERY, expr="1m", tz="UTC", target=HttpTarget("GET", "https://x"))
    assert exportable(http) is None
    custom = ScheduleDef(
        name="a", kind=ScheduleKind.EVERY, expr="1m", tz="UTC", target=NoopTarget(),
        retry=RetryPolicy(backoff_max=timedelta(hours=1)),
    )  # fmt: skip
    assert exportable(custom) == "it has settings the file format does not carry (retry.backoff_max)"
    shell_args = ScheduleDef(
        name="a", kind=ScheduleKind.EVERY, expr="1m", tz="UTC", target=CommandTarget(("echo $1", "x"), shell=True)
    )
    assert exportable(shell_args) is not None


def test_changed_fields_speak_the_file_format() -> None:
    old = only_job(job("schedule: '0 9 * * *'", "command: [a]", "timeout: 30m"))
    new = only_job(job("every: 2h", "command: [a, b]", "env: {X: y}"))
    assert changed_fields(old, new) == [
        ("schedule", "0 9 * * *", None),
        ("every", None, "2h"),
        ("command", ["a"], ["a", "b"]),
        ("env", {}, {"X": "y"}),
        ("timeout", "30m", None),
    ]
    assert changed_fields(old, old) == []


# -- users, limits, retry and misfire policies, HTTP targets ------------------------------------


@pytest.fixture
def me() -> tuple[str, str]:
    """This process's user and group names: they exist here, whatever the host."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    except KeyError:
        pytest.skip("this uid or gid has no name on this host")


def backup_job(user: str, group: str) -> str:
    return f"""\
jobs:
  - name: backup
    schedule: "0 3 * * *"
    command: [/usr/local/bin/backup]
    user: {user}
    group: {group}
    env_from_file: /etc/clockd/backup.env
    memory_limit: 512M
    cpu_limit: 10m
    nproc_limit: 64
    permanent_exit_codes: [64, 2]
    misfire: catch_up
    catch_up_limit: 3
"""


def test_user_limits_and_policies_are_read(me: tuple[str, str]) -> None:
    user, group = me
    got = only_job(backup_job(user, group))
    assert got.target == CommandTarget(
        argv=("/usr/local/bin/backup",),
        user=user,
        group=group,
        env_from_file="/etc/clockd/backup.env",
        memory_limit=512 * 1024 * 1024,
        cpu_limit=600,
        nproc_limit=64,
    )
    assert got.retry == RetryPolicy(permanent_exit_codes=(2, 64))  # sorted, as clockctl add stores them
    assert (got.misfire, got.catch_up_limit) == (MisfirePolicy.CATCH_UP, 3)


@pytest.mark.parametrize(
    ("written", "size"),
    [("512M", 512 << 20), ("2GiB", 2 << 30), ("'1 g'", 1 << 30), ("1048576", 1 << 20), ("'3145728'", 3 << 20)],
)
def test_memory_limit_sizes(written: str, size: int) -> None:
    got = only_job(job("every: 1m", "command: [x]", f"memory_limit: {written}"))
    assert isinstance(got.target, CommandTarget) and got.target.memory_limit == size


HTTP = """\
jobs:
  - name: ping
    every: 5m
    http:
      method: post
      url: https://hooks.example.com/ping
      headers:
        - "Authorization: Bearer ${file:/etc/clockd/token}"
        - [X-Padded, "  kept  "]
        - "X-Dup: 1"
        - [X-Dup, 2]
        - "X-Empty:"
      body: |
        {"event": "ping"}
      expect_status: [200, 204]
      insecure: true
"""


def test_http_target_is_read_headers_in_order_with_repeats() -> None:
    assert only_job(HTTP).target == HttpTarget(
        method="POST",  # canonical, as clockctl add stores it
        url="https://hooks.example.com/ping",
        headers=(
            ("Authorization", "Bearer ${file:/etc/clockd/token}"),  # a reference, never resolved here
            ("X-Padded", "  kept  "),
            ("X-Dup", "1"),
            ("X-Dup", "2"),
            ("X-Empty", ""),
        ),
        body='{"event": "ping"}\n',
        expect_status=(200, 204),
        insecure=True,
    )
    plain = only_job(job("every: 1m", "http: {method: GET, url: 'https://example.com/health'}"))
    assert plain.target == HttpTarget("GET", "https://example.com/health")


HTTP_JOB = ("every: 1m", "http:")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (job(*VALID, "catch_up_limit: 0"), "f.yaml:5: catch_up_limit: 0 is out of range 1-10000"),
        (job(*VALID, "catch_up_limit: ten"), "f.yaml:5: catch_up_limit: expected an integer, got a string"),
        (
            job(*VALID, "permanent_exit_codes: [2, 0]"),
            "f.yaml:5: permanent_exit_codes: item 2: 0 is out of range 1-255",
        ),
        (job(*VALID, "permanent_exit_codes: [2, 2]"), "f.yaml:5: permanent_exit_codes: item 2: 2 is listed twice"),
        (
            job(*VALID, "permanent_exit_codes: 2"),
            "f.yaml:5: permanent_exit_codes: expected a list of exit codes, e.g. [2, 64], got an integer",
        ),
        (
            job("every: 1m", "command: [x]", "env_from_file: etc/x.env"),
            "f.yaml:5: env_from_file: 'etc/x.env' must be an absolute path",
        ),
        (
            job("every: 1m", "command: [x]", "memory_limit: 512Q"),
            "f.yaml:5: memory_limit: size '512Q': expected a number with an optional unit K, M, G or T, e.g. 512M",
        ),
        (
            job("every: 1m", "command: [x]", "memory_limit: 64K"),
            "f.yaml:5: memory_limit: 64K is out of range: at least 1M, below 4E",
        ),
        (
            job("every: 1m", "command: [x]", "cpu_limit: 1500ms"),
            "f.yaml:5: cpu_limit: 1500ms is not a whole number of seconds",
        ),
        (job("every: 1m", "command: [x]", "cpu_limit: 30"), "f.yaml:5: cpu_limit: duration '30' has no unit"),
        (job("every: 1m", "command: [x]", "nproc_limit: 0"), "f.yaml:5: nproc_limit: 0 is out of range 1-2147483648"),
        (
            job("every: 1m", "command: [x]", "user: 1000"),
            "f.yaml:5: user: expected a string, got an integer (quote it to make it a string)",
        ),
        (
            job("every: 1m", "command: [x]", "user: no-such-user-clockd-test"),
            "f.yaml:5: user: 'no-such-user-clockd-test' does not exist on this host "
            "(checked where clockctl runs; the worker checks again where the job runs)",
        ),
        (job("every: 1m", "command: [x]", "group: root"), "f.yaml:5: group: needs user"),
        (job(*VALID, "user: root"), "f.yaml:5: user: not allowed with noop: true"),
        (job(*VALID, "http: {method: GET, url: 'https://x'}"), "f.yaml:5: http: not allowed with noop: true"),
        (
            job("every: 1m", "http: {method: GET, url: 'https://x'}", "command: [x]"),
            "f.yaml:5: command: not allowed with http: (line 4), which runs no command",
        ),
        (
            job("every: 1m", "http: {method: GET, url: 'https://x'}", "cpu_limit: 1m"),
            "f.yaml:5: cpu_limit: not allowed with http: (line 4), which runs no command",
        ),
        (
            job("every: 1m", "http: https://x"),
            "f.yaml:4: http: expected a mapping (method, url, headers, body, expect_status, insecure), got a string",
        ),
        (job("every: 1m", "http: {method: GET}"), "f.yaml:4: http: url: required (e.g. https://example.com/hook)"),
        (
            job("every: 1m", "http: {method: GET, url: 'ftp://x'}"),
            "f.yaml:4: http: url: the URL must be http:// or https:// with a host",
        ),
        (
            job("every: 1m", "http: {method: GET, url: 'https://x/?t=${file:/t}'}"),
            "f.yaml:4: http: url: secret references are not supported in the URL",
        ),
        (
            job("every: 1m", "http: {method: GET, url: 'https://x', headers: {A: b}}"),
            'f.yaml:4: http: headers: expected a list of "Name: value" strings or [name, value] pairs, got a mapping',
        ),
        (
            job("every: 1m", "http: {method: GET, url: 'https://x', body: {a: 1}}"),
            "f.yaml:4: http: body: expected a string (JSON in quotes, or a | block), got a mapping",
        ),
        (
            job("every: 1m", "http: {method: GET, url: 'https://x', expect_status: [99]}"),
            "f.yaml:4: http: expect_status: item 1: 99 is out of range 100-599",
        ),
        (
            job("every: 1m", "http: {method: GET, url: 'https://x', insecure: 'yes'}"),
            "f.yaml:4: http: insecure: expected a boolean, got a string",
        ),
    ],
)
def test_refusals_of_the_newer_fields(text: str, expected: str) -> None:
    result = load_text(text, "f.yaml")
    assert result.jobs == []
    messages = [str(e) for e in result.errors]
    assert any(m.startswith(expected) for m in messages), messages


def test_every_http_refusal_points_at_its_own_line() -> None:
    text = """\
jobs:
  - name: ping
    every: 5m
    http:
      method: "GET X"
      url: https://example.com/ping
      headers:
        - NoColon
        - Authorization: Bearer x
        - [X-Ok, fine]
        - "Idempotency-Key: 1"
        - "Bad Name: x"
        - "X-Token: ${file:relative}"
      verb: PUT
    user: root
"""
    assert errors_of(text) == [
        "f.yaml:5: http: method: 'GET X' is not a valid HTTP method",
        "f.yaml:8: http: headers: item 1: expected \"Name: value\", got 'NoColon'",
        'f.yaml:9: http: headers: item 2: expected "Name: value" or a pair [name, value], got a mapping '
        '(quote the whole header: - "Name: value")',
        "f.yaml:11: http: headers: item 4: Idempotency-Key is set by clockd "
        "(the occurrence id, scheduled time, attempt)",
        "f.yaml:12: http: headers: item 5: 'Bad Name' is not a valid header name",
        "f.yaml:13: http: headers: item 6: secret reference ${file:relative}: the path must be absolute",
        "f.yaml:14: http: verb: unknown key (valid: method, url, headers, body, expect_status, insecure)",
        "f.yaml:15: user: not allowed with http: (line 4), which runs no command",
    ]


def test_http_and_user_jobs_survive_export_as_written(me: tuple[str, str]) -> None:
    user, group = me
    http, backup = only_job(HTTP), only_job(backup_job(user, group))
    assert exportable(http) is None and exportable(backup) is None
    text = dump_jobs([http, backup])
    assert (
        """\
    http:
      method: POST
      url: https://hooks.example.com/ping
      headers:
        - 'Authorization: Bearer ${file:/etc/clockd/token}'
        - [X-Padded, '  kept  ']
        - 'X-Dup: 1'
        - 'X-Dup: 2'
        - 'X-Empty:'
      body: |
        {"event": "ping"}
      expect_status: [200, 204]
      insecure: true
"""
        in text
    )
    assert (
        f"""\
    command: [/usr/local/bin/backup]
    user: {user}
    group: {group}
    env_from_file: /etc/clockd/backup.env
    memory_limit: 512M
    cpu_limit: 10m
    nproc_limit: 64
    permanent_exit_codes: [2, 64]
    misfire: catch_up
    catch_up_limit: 3
"""
        in text
    )
    again = load_text(text, "exported.yaml")
    assert [str(e) for e in again.errors] == []
    assert [j.definition for j in again.jobs] == [http, backup]


def test_odd_sizes_and_bodies_survive_export() -> None:
    definition = ScheduleDef(
        name="a",
        kind=ScheduleKind.EVERY,
        expr="1m",
        tz="UTC",
        target=HttpTarget("PUT", "https://x", body=" lead\n\ntrail  \n\n", headers=(("A", " b"),)),
    )
    limited = ScheduleDef(
        name="b",
        kind=ScheduleKind.EVERY,
        expr="1m",
        tz="UTC",
        target=CommandTarget(("x",), memory_limit=(1 << 20) + 1, cpu_limit=3601),
    )
    text = dump_jobs([definition, limited])
    assert "memory_limit: '1048577'\n    cpu_limit: 1h1s\n" in text
    assert [j.definition for j in load_text(text, "x.yaml").jobs] == [definition, limited]


def test_a_user_unknown_here_is_exported_and_named_when_applied() -> None:
    definition = ScheduleDef(
        name="a",
        kind=ScheduleKind.EVERY,
        expr="1m",
        tz="UTC",
        target=CommandTarget(("/bin/true",), user="no-such-user-clockd-test", group="no-such-group-clockd-test"),
    )
    assert exportable(definition) is None  # left out, apply --prune of the export would delete it
    text = dump_jobs([definition])
    assert "    user: no-such-user-clockd-test\n    group: no-such-group-clockd-test\n" in text
    assert errors_of(text) == [
        "f.yaml:6: user: 'no-such-user-clockd-test' does not exist on this host "
        "(checked where clockctl runs; the worker checks again where the job runs)"
    ]


def test_changed_fields_of_http_targets() -> None:
    http = only_job(HTTP)
    moved = only_job(
        HTTP.replace("/ping", "/pong").replace("    every: 5m\n", "    every: 5m\n    catch_up_limit: 2\n")
    )
    changes = changed_fields(http, moved)
    assert [name for name, _, _ in changes] == ["http", "catch_up_limit"]
    _, old, new = changes[0]
    assert (old["url"], new["url"]) == ("https://hooks.example.com/ping", "https://hooks.example.com/pong")
    assert changes[1] == ("catch_up_limit", 10, 2)
    to_command = only_job(job("every: 5m", "command: [a]").replace("name: a", "name: ping"))
    assert [(name, old is None, new is None) for name, old, new in changed_fields(http, to_command)] == [
        ("command", True, False),
        ("http", False, True),
    ]


# -- the JSON Schema ---------------------------------------------------------------------------


def test_committed_schema_is_the_generated_one() -> None:
    committed = (CONFIG / "schedules.schema.json").read_text()
    assert committed == schema_text(), (
        "config/schedules.schema.json is stale: "
        "python -m clockd.formats.schedfile --schema > config/schedules.schema.json"
    )


def test_schema_describes_every_field_and_regenerates_from_the_command_line() -> None:
    schema = json_schema()
    assert list(schema["$defs"]["job"]["properties"]) == list(FIELD_NAMES)
    assert schema["$defs"]["job"]["additionalProperties"] is False
    assert schema["$defs"]["job"]["properties"]["misfire"]["enum"] == ["skip", "fire_once", "catch_up"]
    assert schema["$defs"]["job"]["properties"]["retries"]["default"] == 2
    assert schema["$defs"]["job"]["properties"]["catch_up_limit"]["default"] == 10
    assert schema["$defs"]["job"]["properties"]["http"]["required"] == ["method", "url"]
    out = subprocess.run(
        [sys.executable, "-m", "clockd.formats.schedfile", "--schema"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert json.loads(out) == schema
