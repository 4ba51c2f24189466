"""Targets as stored and as validated: JSON shapes (old documents still read), clockctl
options, Ops.normalize's refusals, and what show/list reveal."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict, Unpack, cast

import pytest

from clockctl.commands.schedules import build_definition
from clockctl.render import schedule_doc, target_doc, target_rows
from clockd.core.model import (
    CommandTarget,
    HttpTarget,
    NoopTarget,
    Schedule,
    ScheduleDef,
    ScheduleKind,
    ScheduleState,
    redact_url,
    target_from_json,
)
from clockd.core.notify import Notification
from clockd.errors import InvalidInput
from clockd.formats.validate import normalize
from clockd.store import codec
from tests.contract.store.support import Settings

ME = pwd.getpwuid(os.geteuid()).pw_name


def definition(
    target: CommandTarget | HttpTarget | NoopTarget, *, name: str = "job", **kw: Unpack[Settings]
) -> ScheduleDef:
    return ScheduleDef(kind=ScheduleKind.EVERY, expr="1h", tz="UTC", target=target, name=name, **kw)


# -- JSON shapes ----------------------------------------------------------------------------


def test_a_command_document_from_before_the_new_fields_reads_and_re_encodes_unchanged() -> None:
    old = {"type": "command", "argv": ["echo", "hi"], "shell": False, "env": {"A": "1"}, "cwd": None}
    target = target_from_json(old)
    assert target == CommandTarget(argv=("echo", "hi"), env=(("A", "1"),))
    assert target.to_json() == old


def test_new_command_fields_round_trip() -> None:
    target = CommandTarget(
        argv=("backup",),
        env=(("TOKEN", "${file:/etc/clockd/token}"),),
        user="backup",
        group="disk",
        env_from_file="/etc/clockd/backup.env",
        memory_limit=512 << 20,
        cpu_limit=600,
        nproc_limit=64,
    )
    doc = target.to_json()
    assert doc == {
        "type": "command",
        "argv": ["backup"],
        "shell": False,
        "env": {"TOKEN": "${file:/etc/clockd/token}"},
        "cwd": None,
        "user": "backup",
        "group": "disk",
        "env_from_file": "/etc/clockd/backup.env",
        "memory_limit": 536870912,
        "cpu_limit": 600,
        "nproc_limit": 64,
    }
    assert target_from_json(json.loads(json.dumps(doc))) == target


def test_http_target_round_trips_through_the_store_codec() -> None:
    target = HttpTarget(
        method="POST",
        url="https://example.test/hook",
        headers=(("Authorization", "Bearer ${file:/etc/t}"), ("X-A", "1"), ("X-A", "2")),
        body='{"a": 1}',
        expect_status=(200, 204),
        insecure=True,
    )
    assert target.to_json() == {
        "type": "http",
        "method": "POST",
        "url": "https://example.test/hook",
        "headers": [["Authorization", "Bearer ${file:/etc/t}"], ["X-A", "1"], ["X-A", "2"]],
        "body": '{"a": 1}',
        "expect_status": [200, 204],
        "insecure": True,
    }
    d = definition(target)
    assert codec.definition_from_json(codec.definition_json(d)) == d
    minimal = target_from_json({"type": "http", "method": "GET", "url": "http://x"})
    assert minimal == HttpTarget(method="GET", url="http://x")


# -- clockctl add ------------------------------------------------------------------------


class AddOptions(TypedDict, total=False):
    """``build_definition``'s keyword-only options (``clockctl add``'s target options)."""

    user: str | None
    group: str | None
    env_from_file: str | None
    memory_limit: str | None
    cpu_limit: str | None
    nproc_limit: int | None
    http: tuple[str, str] | None
    headers: list[str] | None
    body: str | None
    expect_status: str | None
    insecure: bool
    policies: Mapping[str, Any] | None
    stdin: str | None
    notify: tuple[Notification, ...]


def build(*args: str, **kw: Unpack[AddOptions]) -> ScheduleDef:
    return build_definition(
        list(args), None, "1h", "UTC", None, "default", None, 2, "10s", False, [], None, False, "default", **kw
    )


def test_build_http_target(tmp_path: Path) -> None:
    body = tmp_path / "body.json"
    body.write_text('{"from": "file"}')
    d = build(
        http=("post", "https://hooks.example.test/x"),
        headers=["Authorization: Bearer ${file:/etc/t}", "X-Empty:"],
        body=f"@{body}",
        expect_status="200,204",
    )
    assert d.name == "hooks.example.test"
    # build_definition returns what the one validator made of it: normalized (method upper-cased).
    assert d.target == HttpTarget(
        method="POST",
        url="https://hooks.example.test/x",
        headers=(("Authorization", "Bearer ${file:/etc/t}"), ("X-Empty", "")),
        body='{"from": "file"}',
        expect_status=(200, 204),
    )
    normalized = normalize(d).target
    assert isinstance(normalized, HttpTarget) and normalized.method == "POST"
    literal = build(http=("GET", "http://x"), body="@@literal").target
    assert isinstance(literal, HttpTarget) and literal.body == "@literal"


def test_build_command_options() -> None:
    d = build(
        "--",
        "pg_dump",
        "db; rm -rf /",
        user=ME,
        env_from_file="/etc/x.env",
        memory_limit="1G",
        cpu_limit="90s",
        nproc_limit=32,
    )
    assert d.target == CommandTarget(
        argv=("--", "pg_dump", "db; rm -rf /"),
        user=ME,
        env_from_file="/etc/x.env",
        memory_limit=1 << 30,
        cpu_limit=90,
        nproc_limit=32,
    )
    rounded = build("true", cpu_limit="1500ms").target
    assert isinstance(rounded, CommandTarget) and rounded.cpu_limit == 2


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"http": ("GET", "http://x"), "user": "root"}, "--user applies to commands, not to --http"),
        ({"header": None, "headers": ["X: 1"]}, "--header applies to --http targets"),
        ({"http": ("GET", "http://x"), "headers": ["no colon"]}, "--header: expected 'Name: value'"),
        ({"http": ("GET", "http://x"), "expect_status": "2xx"}, "--expect-status"),
        ({"http": ("GET", "http://x"), "body": "@/no/such/file"}, "--body: cannot read /no/such/file"),
        ({"memory_limit": "lots"}, "size 'lots'"),
    ],
)
def test_build_refuses_mixed_or_malformed_options(kw: dict[str, object], needle: str) -> None:
    kw.pop("header", None)
    args = () if "http" in kw else ("true",)
    with pytest.raises(InvalidInput) as err:
        build(*args, **cast(AddOptions, kw))  # the table's options, "header" popped
    assert needle in err.value.message


# -- Ops.normalize ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        (CommandTarget(argv=("true",), user="clockd-no-such-user"), "does not exist on this host"),
        (CommandTarget(argv=("true",), user=ME, group="clockd-no-such-group"), "does not exist on this host"),
        (CommandTarget(argv=("true",), group="root"), "group: needs user"),
        (CommandTarget(argv=("true",), user="bad name"), "not a valid user name"),
        (CommandTarget(argv=("true",), env=(("T", "${file:etc/t}"),)), "env T: secret reference"),
        (CommandTarget(argv=("true",), env=(("A=B", "1"),)), "invalid variable name"),
        (CommandTarget(argv=("true",), env_from_file="rel.env"), "must be an absolute path"),
        (CommandTarget(argv=("true",), memory_limit=1000), "memory_limit: must be at least 1M"),
        (CommandTarget(argv=("true",), cpu_limit=0), "cpu_limit"),
        (CommandTarget(argv=("true",), nproc_limit=0), "nproc_limit"),
        (CommandTarget(argv=("a\x00b",)), "command argument 0: NUL"),
        (CommandTarget(argv=("true",), env=(("A", "x\x00"),)), "env A: NUL"),
        (HttpTarget(method="GE T", url="http://x"), "not a valid HTTP method"),
        (HttpTarget(method="GET", url="ftp://x"), "must be http:// or https://"),
        (HttpTarget(method="GET", url="http://x y"), "spaces or control characters"),
        (HttpTarget(method="GET", url="http://x:99999"), "invalid URL"),
        (HttpTarget(method="GET", url="http://x/${file:/t}"), "not supported in the URL"),
        (HttpTarget(method="GET", url="http://x", headers=(("Idempotency-Key", "k"),)), "set by clockd"),
        (HttpTarget(method="GET", url="http://x", headers=(("Content-Length", "1"),)), "computed from the body"),
        (HttpTarget(method="GET", url="http://x", headers=(("Bad Name", "1"),)), "not a valid header name"),
        (HttpTarget(method="GET", url="http://x", headers=(("X", "a\r\nInjected: 1"),)), "line breaks"),
        (HttpTarget(method="GET", url="http://x", expect_status=(99,)), "not an HTTP status"),
        (HttpTarget(method="GET", url="http://x", body="a\x00"), "body: NUL"),
    ],
)
def test_normalize_refuses_bad_targets(target: CommandTarget | HttpTarget, needle: str) -> None:
    with pytest.raises(InvalidInput) as err:
        normalize(definition(target))
    assert needle in err.value.message


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("name", "a\x00b", "name: NUL characters (\\x00) are not allowed"),
        ("queue", "q\x00", "queue: NUL"),
        ("tenant", "t\x00", "tenant: NUL"),
        ("labels", (("k", "v\x00"),), "label k: NUL"),
    ],
)
def test_nul_is_refused_in_every_string(field: str, value: Any, needle: str) -> None:
    with pytest.raises(InvalidInput) as err:
        normalize(definition(NoopTarget(), **{field: value}))
    assert needle in err.value.message


def test_valid_targets_pass_unchanged() -> None:
    target = CommandTarget(argv=("true",), user=ME, env=(("T", "${env:T} $${literal}"),), memory_limit=1 << 20)
    assert normalize(definition(target)).target == target


# -- what clockctl shows -----------------------------------------------------------------------


def test_show_keeps_references_and_masks_literal_secrets() -> None:
    command = CommandTarget(
        argv=("job",),
        env=(("DB_PASSWORD", "hunter2"), ("API_TOKEN", "${file:/etc/t}"), ("REGION", "eu")),
        user=ME,
        memory_limit=256 << 20,
    )
    doc = target_doc(command)
    assert doc["env"] == {"DB_PASSWORD": "***", "API_TOKEN": "${file:/etc/t}", "REGION": "eu"}
    rows = target_rows(command)
    assert ("env", "DB_PASSWORD=***") in rows and ("limits", "memory 256M") in rows
    http = HttpTarget(
        method="GET",
        url="https://u:pw@example.test/x?token=abc&page=2",
        headers=(("Authorization", "Bearer lit"), ("X-Key", "${env:K}"), ("Accept", "text/plain")),
    )
    doc = target_doc(http)
    assert doc["url"] == "https://u:***@example.test/x?token=***&page=2"
    assert doc["headers"] == [["Authorization", "***"], ["X-Key", "${env:K}"], ["Accept", "text/plain"]]
    assert http.describe() == "GET https://u:***@example.test/x?token=***&page=2"
    now = datetime(2026, 1, 1, tzinfo=UTC)
    schedule = Schedule("id", 1, ScheduleState.ACTIVE, definition(http), now, 0, now, now)
    dumped = json.dumps(schedule_doc(schedule))
    assert "pw@" not in dumped and "Bearer lit" not in dumped and "abc" not in dumped


def test_redact_url_leaves_ordinary_urls_alone() -> None:
    for url in ("http://h:80/p?x=1", "https://h/a@b", "https://user@h/"):
        assert redact_url(url) == url


WEIRD = [
    'it\'s "quoted"; DROP TABLE schedules; --',
    "naïve ☃ 日本語 🙂",
    "tab\tline\nbell\x07esc\x1b[31m",
    "${file:/x} $${y}",
]


@pytest.mark.parametrize("text", WEIRD)
async def test_new_target_fields_round_trip_through_the_sqlite_store(tmp_path: Path, text: str) -> None:
    from clockd.core.ids import new_schedule_id
    from clockd.store.sqlite.store import SqliteStore

    store = SqliteStore(tmp_path / "clockd.db")
    await store.open()
    try:
        command = CommandTarget(
            argv=("printf", text), env=(("K", text),), user=text, group=text, env_from_file=f"/{text}",
            memory_limit=1 << 40, cpu_limit=1, nproc_limit=7,
        )  # fmt: skip
        http = HttpTarget(
            method="PATCH", url=f"https://h/{text}", headers=((text, text),), body=text, expect_status=(418,)
        )
        targets: tuple[CommandTarget | HttpTarget, ...] = (command, http)
        for i, target in enumerate(targets):
            defn = definition(target, name=f"{text} {i}", labels=((text, text),))
            created = await store.create_schedule(new_schedule_id(), defn, 0, None, datetime(2026, 1, 1, tzinfo=UTC))
            fetched = await store.get_schedule("default", f"{text} {i}")
            assert fetched == created and fetched is not None and fetched.definition == defn
    finally:
        await store.close()
