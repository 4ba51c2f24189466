"""``clockctl import-crontab`` as the real program: the YAML of ``--dry-run``, applying through
the same path as ``apply`` (idempotent), system crontabs (the user column as ``user:``, users
unknown on this host listed), refusals, and the host's zone."""

from __future__ import annotations

import json
import pwd
import sys
from pathlib import Path
from typing import Any

import pytest

from clockd.formats.schedfile import load_text
from tests.cli.conftest import STORE_AND_API, make_ctl

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
DATA = "tests/data/crontabs"


@pytest.fixture(params=STORE_AND_API)
def ctl(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """clockctl on the store, and through a real clockd's HTTP API (tests.cli.conftest)."""
    return make_ctl(tmp_path, request, columns="200", cwd=ROOT)


def listed(ctl: Any) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in json.loads(ctl("list", "-o", "json").stdout)}


def test_dry_run_prints_the_equivalent_schedule_file(ctl: Any, tmp_path: Path) -> None:
    # No sendmail on this PATH (nor /usr/sbin/sendmail here): the import says so.
    result = ctl("import-crontab", f"{DATA}/user.crontab", "--user", "alice", "--tz", "UTC", "--dry-run", PATH=str(BIN))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"{DATA}/user.crontab:5: note: MAILTO=alice@example.com: no sendmail on this host (PATH, "
        "/usr/sbin/sendmail): the mail notifications of the jobs below fail until one is installed",
        f"{DATA}/user.crontab: note: cron ran these jobs as alice; clockd runs them as its worker's user "
        "(the crontab.user label records who it was)",
        f"{DATA}/user.crontab:18: not imported: @reboot: clockd has no boot event "
        "(use a systemd unit, or at: for a one-off run)",
    ]
    out = result.stdout
    assert out.startswith(f"# Imported from {DATA}/user.crontab (user crontab) by clockctl import-crontab.\n")
    assert f"# {DATA}/user.crontab:18: not imported: @reboot" in out
    loaded = load_text(out, "printed.yaml")
    assert loaded.errors == []
    assert [(j.name, j.definition.expr, j.definition.tz) for j in loaded.jobs] == [
        ("pg_dump-11", "30 2 * * *", "Europe/Paris"),
        ("sync-13", "*/15 8-18 * * 1-5", "Europe/Paris"),
        ("fetch-feeds-14", "0 * * * *", "Europe/Paris"),
        ("app.cleanup-15", "0 0 * * 0", "Europe/Paris"),
        ("monthly-report-17", "0 0 1 * *", "Europe/Paris"),
        ("mail-20", "0 8 * * MON", "Europe/Paris"),
        ("echo-22", "0 9 * * 1-5", "America/New_York"),
    ]
    assert listed(ctl) == {}  # a dry run writes nothing

    # The printed file applied, then the import itself: the same schedules, nothing to do.
    printed = tmp_path / "alice.yaml"
    printed.write_text(out)
    assert ctl("apply", "-f", str(printed)).returncode == 0
    again = ctl("import-crontab", f"{DATA}/user.crontab", "--user", "alice", "--tz", "UTC")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "no changes (7 unchanged)\n"


def test_import_applies_and_is_idempotent(ctl: Any) -> None:
    first = ctl("import-crontab", f"{DATA}/debian.crontab", "--tz", "Europe/Berlin")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[0] == f"+ create cron.hourly-19  ({DATA}/debian.crontab:19)"
    assert first.stdout.splitlines()[-1] == "applied: 4 created, 0 updated, 0 deleted"
    jobs = listed(ctl)
    assert sorted(jobs) == ["cron.daily-20", "cron.hourly-19", "cron.monthly-22", "cron.weekly-21"]
    daily = jobs["cron.daily-20"]
    assert (daily["expr"], daily["tz"], daily["retries"], daily["misfire"]) == (
        "25 6 * * *",
        "Europe/Berlin",
        0,
        "skip",
    )
    assert daily["target"]["shell"] is True
    assert daily["target"]["argv"] == ["test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }"]
    assert ctl("import-crontab", f"{DATA}/debian.crontab", "--tz", "Europe/Berlin").stdout == (
        "no changes (4 unchanged)\n"
    )


def exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def test_system_crontab_with_user_column(ctl: Any) -> None:
    result = ctl("import-crontab", f"{DATA}/cron.d-backup", "--system", "--tz", "UTC", "--tenant", "ops")
    assert result.returncode == 0, result.stderr
    docs = {d["name"]: d for d in json.loads(ctl("list", "-o", "json", "--tenant", "ops").stdout)}
    lines = {"backup-etc-7": "root", "cron-8": "www-data", "vacuumdb-9": "postgres", "logrotate-10": "root"}
    here = {name for name, user in lines.items() if exists(user)}  # www-data, postgres: not on every host
    assert set(docs) == here
    for name in here:
        assert docs[name]["target"]["user"] == lines[name]  # the user column, as the job's user
    for name in set(lines) - here:
        assert (
            f"{DATA}/cron.d-backup:{name.rsplit('-', 1)[1]}: not imported: runs as {lines[name]}, who does not "
            "exist on this host (schedules are checked where clockctl runs): create the user, or import on a host "
            "that has it"
        ) in result.stderr.splitlines()
    if "vacuumdb-9" in docs:
        assert docs["vacuumdb-9"]["target"]["argv"] == [
            "/bin/bash",
            "-c",
            "vacuumdb --all --analyze-in-stages --quiet",
        ]
        assert docs["vacuumdb-9"]["target"]["shell"] is False
    assert "clockd runs them as its worker's user" not in result.stderr
    only_root = ctl("import-crontab", f"{DATA}/cron.d-backup", "--system", "--user", "root", "--dry-run")
    assert f"{DATA}/cron.d-backup:8: not imported: runs as www-data, not root (--user)" in only_root.stderr
    assert "name: vacuumdb-9" not in only_root.stdout and "name: backup-etc-7" in only_root.stdout
    assert "    user: root\n" in only_root.stdout and "crontab.user" not in only_root.stdout


def test_a_user_unknown_here_is_listed_and_the_rest_imported(ctl: Any, tmp_path: Path) -> None:
    tab = tmp_path / "cron.d-app"
    tab.write_text(
        "# m h dom mon dow user command\n"
        "0 1 * * * root /usr/local/bin/app-backup\n"
        "0 2 * * * no-such-user-clockd /usr/local/bin/app-sync\n"
    )
    dry = ctl("import-crontab", str(tab), "--system", "--tz", "UTC", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    listed_line = (
        f"{tab}:3: not imported: runs as no-such-user-clockd, who does not exist on this host (schedules are "
        "checked where clockctl runs): create the user, or import on a host that has it"
    )
    assert listed_line in dry.stderr.splitlines()
    assert f"# {listed_line}\n" in dry.stdout
    printed = load_text(dry.stdout, "printed.yaml")
    assert printed.errors == []
    assert [(j.name, getattr(j.definition.target, "user", None)) for j in printed.jobs] == [("app-backup-2", "root")]
    applied = ctl("import-crontab", str(tab), "--system", "--tz", "UTC")
    assert applied.returncode == 0, applied.stderr
    assert listed_line in applied.stderr.splitlines()
    assert sorted(listed(ctl)) == ["app-backup-2"]


def test_an_unparsable_crontab_applies_nothing(ctl: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.crontab"
    bad.write_text("0 3 * * * /bin/backup\nonce upon a time\n61 * * * * /bin/late\n")
    result = ctl("import-crontab", str(bad), "--tz", "UTC")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"{bad}:2: not a cron entry: expected 5 time fields, then a command",
        f"{bad}:3: schedule: minute: 61 is out of range 0-59",
        "2 error(s); nothing was applied",
    ]
    assert listed(ctl) == {}


def test_times_are_read_in_the_hosts_zone_by_default(ctl: Any, tmp_path: Path) -> None:
    tab = tmp_path / "tab"
    tab.write_text("0 9 * * * /bin/true\n")
    result = ctl("import-crontab", str(tab), "--dry-run", TZ="Asia/Tokyo")
    assert result.returncode == 0, result.stderr
    assert f"{tab}: times are read in Asia/Tokyo (this host's zone, as cron does; --tz to change)" in result.stderr
    assert "    tz: Asia/Tokyo\n" in result.stdout
    missing = ctl("import-crontab", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "nope" in missing.stderr


def test_an_unknown_tz_option_is_refused_even_when_the_file_sets_its_own_first(ctl: Any, tmp_path: Path) -> None:
    # It was never checked when CRON_TZ= came before every entry, and otherwise blamed on
    # the file's first line ("tab:1: tz: unknown time zone").
    tab = tmp_path / "tab"
    tab.write_text("CRON_TZ=Europe/Paris\n0 9 * * * /bin/true\n")
    for args in (["--dry-run"], []):
        result = ctl("import-crontab", str(tab), "--tz", "Nowhere", *args)
        assert result.returncode == 2, result
        assert result.stderr.splitlines() == [
            "error: --tz: unknown time zone 'Nowhere' (use an IANA name such as Europe/Paris, or UTC)"
        ]
        assert result.stdout == ""
    assert listed(ctl) == {}


def test_the_hosts_zone_note_only_when_an_entry_is_read_in_it(ctl: Any, tmp_path: Path) -> None:
    # A crontab that sets CRON_TZ= before every entry was still told "times are read in
    # <host zone>", which none of them were.
    own = tmp_path / "own"
    own.write_text("CRON_TZ=Europe/Paris\n0 9 * * * /bin/true\n")
    result = ctl("import-crontab", str(own), "--dry-run", TZ="Asia/Tokyo")
    assert result.returncode == 0, result.stderr
    assert "times are read in" not in result.stderr + result.stdout
    mixed = tmp_path / "mixed"
    mixed.write_text("0 8 * * * /bin/true\nCRON_TZ=Europe/Paris\n0 9 * * * /bin/true\n")
    result = ctl("import-crontab", str(mixed), "--dry-run", TZ="Asia/Tokyo")
    assert f"{mixed}: times are read in Asia/Tokyo (this host's zone" in result.stderr
