"""Daemon settings: precedence, validation, and the shipped example covering every key."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from clockd.config import Settings, load_settings, redact_dsn, resolve_store
from clockd.errors import InvalidInput

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "clockd.yaml"


def test_example_config_documents_every_key() -> None:
    text = EXAMPLE.read_text()
    documented = set(re.findall(r"^#?\s?([a-z_]+):", text, flags=re.M))
    keys = {f.name for f in dataclasses.fields(Settings)}
    assert keys - documented == set()
    assert documented - keys == set()


def test_example_config_loads_and_matches_defaults() -> None:
    loaded = load_settings(config_path=str(EXAMPLE), env={})
    defaults = Settings()
    for f in dataclasses.fields(Settings):
        if f.name in ("node_id", "concurrency"):
            continue
        assert getattr(loaded, f.name) == getattr(defaults, f.name), f.name


def test_precedence_flag_over_env_over_file(tmp_path: Path) -> None:
    cfg = tmp_path / "clockd.yaml"
    cfg.write_text("cluster: from-file\nconcurrency: 3\nhorizon: 5m\n")
    env = {"CLOCKD_CLUSTER": "from-env", "CLOCKD_CONCURRENCY": "4"}
    s = load_settings({"cluster": "from-flag"}, str(cfg), env)
    assert (s.cluster, s.concurrency, s.horizon.total_seconds()) == ("from-flag", 4, 300)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("concurrency: lots\n", "concurrency"),
        ("horizon: soon\n", "horizon"),
        ("modes: [leader, sorcerer]\n", "sorcerer"),
        ("colour: blue\n", "unknown setting 'colour'"),
        ("cluster: [unclosed\n", ":2"),
        # Not checked outside the flags: a traceback when clockd set up its logging.
        ("log_level: verbose\n", "log_level: 'verbose' is not one of debug, info, warning, error"),
        ("log_format: xml\n", "log_format: 'xml' is not one of auto, text, json, journald"),
    ],
)
def test_bad_config_names_file_and_key(tmp_path: Path, text: str, needle: str) -> None:
    cfg = tmp_path / "clockd.yaml"
    cfg.write_text(text)
    with pytest.raises(InvalidInput) as err:
        load_settings(config_path=str(cfg), env={})
    assert needle in err.value.message
    assert str(cfg) in err.value.message


def test_every_bad_setting_is_reported_at_once(tmp_path: Path) -> None:
    # check-config stopped at the first: a file with three mistakes took three rounds.
    cfg = tmp_path / "clockd.yaml"
    cfg.write_text("concurency: 4\nhorizon: soon\nlog_level: loud\n")
    with pytest.raises(InvalidInput) as err:
        load_settings(config_path=str(cfg), env={})
    message = err.value.message
    assert "unknown setting 'concurency'" in message and "horizon: duration 'soon'" in message
    assert "log_level: 'loud'" in message and "\n" not in message


def test_the_environment_is_checked_like_the_file() -> None:
    with pytest.raises(InvalidInput, match="environment: log_level: 'loud' is not one of"):
        load_settings(env={"CLOCKD_LOG_LEVEL": "loud"})
    assert load_settings(env={"CLOCKD_LOG_LEVEL": "DEBUG"}).log_level == "debug"


def test_store_locations() -> None:
    assert resolve_store("sqlite:///", {"CLOCKD_HOME": "/h"}).target == "/h/clockd.db"
    assert resolve_store(None, {"CLOCKD_HOME": "/h"}).target == "/h/clockd.db"
    assert resolve_store("sqlite:///var/x.db", {}).target == "/var/x.db"
    assert resolve_store(None, {"CLOCKD_STORE": "postgresql://u:pw@h/db"}).kind == "postgresql"
    with pytest.raises(InvalidInput):
        resolve_store("mysql://x", {})


def test_passwords_are_redacted() -> None:
    assert "s3cret" not in redact_dsn("postgresql://clockd:s3cret@db:5432/clockd")
    assert "s3cret" not in redact_dsn("host=db password=s3cret dbname=clockd")
    assert "s3cret" not in redact_dsn("postgresql://db/clockd?password=s3cret")


def test_libpq_keyword_dsn_is_postgresql_not_a_file() -> None:
    loc = resolve_store("host=127.0.0.1 port=5432 dbname=clockd user=clockd password=pw", {})
    assert loc.kind == "postgresql"
    assert "pw" not in loc.display


def test_a_heartbeat_as_long_as_the_lease_is_refused(tmp_path: Path) -> None:
    # heartbeat 60s with visibility_timeout 5s ran a healthy job three times at once.
    cfg = tmp_path / "clockd.yaml"
    cfg.write_text("heartbeat: 60s\nvisibility_timeout: 5s\n")
    with pytest.raises(InvalidInput, match=r"heartbeat \(1m\) must be at most half of visibility_timeout \(5s\)"):
        load_settings(config_path=str(cfg), env={})
    assert load_settings({"heartbeat": "2s", "visibility_timeout": "4s"}, env={}).heartbeat.total_seconds() == 2


def test_check_config_refuses_the_api_address_run_refuses(tmp_path: Path) -> None:
    # check-config passed `api_addr: 0.0.0.0:8470` without TLS; `clockd run` exited 2 on it.
    cfg = tmp_path / "clockd.yaml"
    cfg.write_text("api_addr: 0.0.0.0:8470\n")
    with pytest.raises(InvalidInput, match="is not a loopback address"):
        load_settings(config_path=str(cfg), env={})
    assert load_settings(config_path=str(cfg), env={"CLOCKD_MODES": "leader,worker"}).api_addr == "0.0.0.0:8470"
    assert load_settings(config_path=str(cfg), env={"CLOCKD_API_INSECURE": "true"}).api_insecure
    with pytest.raises(InvalidInput, match="api_tls_cert and api_tls_key go together"):
        load_settings(config_path=str(cfg), env={"CLOCKD_API_TLS_CERT": "/etc/ssl/cert.pem"})
