"""Secret references: syntax, resolution, what a failure says, and who may read what."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from clockd.errors import ClockdError, InvalidInput
from clockd.runner import secrets
from clockd.runner.secrets import Reader, Ref, Resolver, SecretError
from tests.harness.users import shared_dir


def test_parse_splits_literals_and_references() -> None:
    assert secrets.parse("plain") == ["plain"]
    assert secrets.parse("Bearer ${file:/etc/tok}") == ["Bearer ", Ref("file", "/etc/tok")]
    assert secrets.parse("${env:A}${env:B_2}") == [Ref("env", "A"), Ref("env", "B_2")]
    # The escape, and ${…} forms that are not references, stay literal.
    assert secrets.parse("$${file:/x} ${HOME} ${foo:bar} $5") == ["${file:/x} ${HOME} ${foo:bar} $5"]
    assert str(Ref("file", "/etc/tok")) == "${file:/etc/tok}"
    assert not secrets.has_references("$${env:X}")
    assert secrets.has_references("a${env:X}")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("${file:relative/path}", "must be absolute"),
        ("${file:}", "must be absolute"),
        ("${env:1BAD}", "not a valid environment variable name"),
        ("${env:}", "not a valid environment variable name"),
        ("${env:A-B}", "not a valid environment variable name"),
        ("x ${file:/no/end", "unterminated"),
        ("${file:/a\x00b}", "NUL"),
    ],
)
def test_malformed_references_are_refused_at_validation(text: str, needle: str) -> None:
    with pytest.raises(InvalidInput) as err:
        secrets.validate(text, "env TOKEN")
    assert err.value.message.startswith("env TOKEN: ")
    assert needle in err.value.message


def test_file_secret_loses_exactly_one_trailing_newline(tmp_path: Path) -> None:
    for content, expected in [("s3\n", "s3"), ("s3\n\n", "s3\n"), ("s3", "s3"), ("s3\r\n", "s3"), ("", "")]:
        path = tmp_path / "s"
        path.write_text(content, newline="")
        assert Resolver().resolve(f"${{file:{path}}}") == expected


def test_env_secret_reads_the_given_environment() -> None:
    resolver = Resolver(environ={"TOKEN": "t0k3n"})
    assert resolver.resolve("a-${env:TOKEN}-b") == "a-t0k3n-b"
    assert resolver.values == ["t0k3n"]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "No such file or directory"),
        ("directory", "not a regular file"),
        ("fifo", "not a regular file"),
        ("big", f"larger than {secrets.MAX_FILE_BYTES} bytes"),
        ("binary", "not UTF-8 text"),
        ("nul", "contains a NUL character"),
    ],
)
def test_unreadable_secrets_fail_fast_naming_the_reference_only(tmp_path: Path, setup: str, message: str) -> None:
    path = tmp_path / "secret"
    if setup == "directory":
        path.mkdir()
    elif setup == "fifo":
        os.mkfifo(path)  # nobody writes: a blocking open would hang forever
    elif setup == "big":
        path.write_bytes(b"x" * (secrets.MAX_FILE_BYTES + 1))
    elif setup == "binary":
        path.write_bytes(b"\xff\xfesecret")
    elif setup == "nul":
        path.write_bytes(b"sec\x00ret")
    started = time.perf_counter()
    with pytest.raises(SecretError) as err:
        Resolver().resolve(f"x${{file:{path}}}")
    assert time.perf_counter() - started < 1
    assert err.value.message.startswith(f"secret ${{file:{path}}}")
    assert message in err.value.message
    assert "secret" in err.value.message and "sec\x00" not in err.value.message
    assert isinstance(err.value, ClockdError)


def test_dev_zero_is_refused_not_read() -> None:
    with pytest.raises(SecretError, match="not a regular file"):
        Resolver().resolve("${file:/dev/zero}")


def test_missing_env_and_refused_env() -> None:
    with pytest.raises(SecretError) as err:
        Resolver(environ={}).resolve("${env:NOPE}")
    assert err.value.message == "secret ${env:NOPE} cannot be read: the daemon has no such environment variable"
    with pytest.raises(SecretError, match="only tenants allowed to run jobs as the daemon's own user"):
        Resolver(Reader(uid=12345, environ=False), environ={"X": "1"}).resolve("${env:X}")


def test_env_file_lines(tmp_path: Path) -> None:
    path = tmp_path / "job.env"
    path.write_text(
        "# a comment\n\nPLAIN=value with spaces\nexport EXPORTED=1\nQUOTED=\"q v\"\nSINGLE='s'\nEMPTY=\nEQ=a=b\n"
    )
    pairs = Resolver().env_file(str(path))
    assert pairs == [
        ("PLAIN", "value with spaces"),
        ("EXPORTED", "1"),
        ("QUOTED", "q v"),
        ("SINGLE", "s"),
        ("EMPTY", ""),
        ("EQ", "a=b"),
    ]


def test_env_file_errors_name_the_line_not_its_content(tmp_path: Path) -> None:
    path = tmp_path / "job.env"
    path.write_text("OK=1\nhunter2-without-a-key\n")
    with pytest.raises(SecretError) as err:
        Resolver().env_file(str(path))
    assert err.value.message == f"env_from_file {path}: line 2: expected KEY=VALUE"
    assert "hunter2" not in err.value.message


def test_reader_checks_owner_group_and_mode_bits() -> None:
    """A reader that is not the daemon gets the access its uid/gids would get."""
    with shared_dir() as shared:
        tmp_path = shared / "d"
        tmp_path.mkdir()
        _check_reader(tmp_path)


def _check_reader(tmp_path: Path) -> None:
    me, my_gid = os.getuid(), os.getgid()
    stranger = 54321 if me != 54321 else 54322
    secret = tmp_path / "s"
    secret.write_text("v\n")
    tmp_path.chmod(0o755)

    def read_as(uid: int, gids: frozenset[int] = frozenset()) -> str:
        return Resolver(Reader(uid=uid, gids=gids, name=f"u{uid}")).resolve(f"${{file:{secret}}}")

    secret.chmod(0o600)
    if me != 0:
        assert read_as(me) == "v"
    with pytest.raises(SecretError) as err:
        read_as(stranger)
    assert err.value.message == f"secret ${{file:{secret}}} cannot be read: permission denied for user 'u{stranger}'"
    secret.chmod(0o640)
    assert read_as(stranger, frozenset({my_gid})) == "v"
    with pytest.raises(SecretError):
        read_as(stranger)
    secret.chmod(0o644)
    assert read_as(stranger) == "v"
    # A directory on the way that the reader may not search hides the file.
    tmp_path.chmod(0o700)
    try:
        with pytest.raises(SecretError, match="permission denied"):
            read_as(stranger)
    finally:
        tmp_path.chmod(0o755)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o644


def test_scrub_removes_resolved_values_longest_first() -> None:
    text = "token=abcd1234 and abcd and ab"
    assert secrets.scrub(text, ["abcd", "abcd1234", "ab"]) == "token=*** and *** and ab"


def test_references_resolve_concurrently_without_sharing_state(tmp_path: Path) -> None:
    """Each run has its own Resolver: values never cross between runs."""
    paths = []
    for i in range(8):
        p = tmp_path / f"s{i}"
        p.write_text(f"value-{i}\n")
        paths.append(p)
    out: dict[int, list[str]] = {}

    def work(i: int) -> None:
        r = Resolver()
        r.resolve(f"${{file:{paths[i]}}}")
        out[i] = r.values

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {i: [f"value-{i}"] for i in range(8)}
