"""Crontab import: real-world crontabs (tests/data/crontabs) translated to exact schedules;
environment, zone and SHELL lines; ``%``; macros; system crontabs; derived names; and
that nothing is dropped silently; the user column of system crontabs as ``user:``. Fuzzed:
any text, only ``InvalidInput`` at worst."""

from __future__ import annotations

import pwd
from collections.abc import Callable, Collection
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clockd.core.model import CommandTarget, MisfirePolicy, RetryPolicy, ScheduleDef, ScheduleKind
from clockd.core.notify import Notification, NotifyEvent
from clockd.errors import InvalidInput
from clockd.formats.crontab import Note, _stem, parse_crontab

DATA = Path(__file__).resolve().parents[1] / "data" / "crontabs"
USER_PATH = "tests/data/crontabs/user.crontab"


def read(name: str) -> str:
    return (DATA / name).read_text()


HostUsers = Callable[[Collection[str]], None]


@pytest.fixture
def host_users(monkeypatch: pytest.MonkeyPatch) -> HostUsers:
    """Make this host know exactly these users (for the importer and for validation alike)."""

    def known(names: Collection[str]) -> None:
        def getpwnam(name: str) -> pwd.struct_passwd:
            if name not in names:
                raise KeyError(name)
            return pwd.struct_passwd((name, "x", 1000, 1000, "", "/", "/bin/sh"))

        monkeypatch.setattr(pwd, "getpwnam", getpwnam)

    return known


def job(
    name: str,
    expr: str,
    tz: str,
    argv: tuple[str, ...],
    env: dict[str, str],
    source: str,
    user: str | None,
    *,
    shell: bool = True,
    system: bool = False,
    mail: str | None = None,
    stdin: str | None = None,
) -> ScheduleDef:
    """A translated entry: ``user`` is the job's user (system crontab) or a label (user crontab);
    ``mail``: the MAILTO in force (mail notifications on failure and on success)."""
    labels = {"crontab.source": source, **({"crontab.user": user} if user and not system else {})}
    return ScheduleDef(
        name=name,
        kind=ScheduleKind.CRON,
        expr=expr,
        tz=tz,
        target=CommandTarget(
            argv=argv, shell=shell, env=tuple(sorted(env.items())), user=user if system else None, stdin=stdin
        ),
        retry=RetryPolicy(retries=0),
        misfire=MisfirePolicy.SKIP,
        labels=tuple(sorted(labels.items())),
        notify=()
        if mail is None
        else (Notification(NotifyEvent.FAILURE, mail=mail), Notification(NotifyEvent.SUCCESS, mail=mail)),
    )


def translate(text: str, path: str, **options: Any) -> tuple[list[ScheduleDef], Any]:
    result = parse_crontab(text, path, **options)
    jobs, errors = result.jobs()
    assert [str(e) for e in errors] == []
    return [j.definition for j in jobs], result


# -- the real-world examples -------------------------------------------------------------------

USER_ENV = {  # every assignment, MAILTO and CRON_TZ included: cron exports them all
    "SHELL": "/bin/sh",
    "PATH": "/home/alice/bin:/usr/local/bin:/usr/bin:/bin",
    "MAILTO": "alice@example.com",
    "BACKUP_DIR": "/srv/backups/db",
    "GREETING": "hello world",
    "CRON_TZ": "Europe/Paris",
}
ALICE = "alice@example.com"


def no_sendmail() -> None:
    return None


def test_user_crontab_with_env_lines_macros_and_percent() -> None:
    got, result = translate(read("user.crontab"), USER_PATH, tz="UTC", user="alice", sendmail=no_sendmail)
    src = USER_PATH + ":"
    paris = "Europe/Paris"
    assert got == [
        job(
            "pg_dump-11",
            "30 2 * * *",
            paris,
            ("pg_dump -Fc app > $BACKUP_DIR/app-$(date +%Y%m%d).dump",),
            USER_ENV,
            src + "11",
            "alice",
            mail=ALICE,
        ),
        job(
            "sync-13",
            "*/15 8-18 * * 1-5",
            paris,
            ("cd /home/alice/app && ./bin/sync.sh --quiet >/dev/null 2>&1",),
            USER_ENV,
            src + "13",
            "alice",
            mail=ALICE,
        ),
        job(
            "fetch-feeds-14",
            "0 * * * *",
            paris,
            ("/usr/bin/flock -n /tmp/fetch.lock /home/alice/bin/fetch-feeds.py",),
            USER_ENV,
            src + "14",
            "alice",
            mail=ALICE,
        ),
        job(
            "app.cleanup-15",
            "0 0 * * 0",
            paris,
            ("python3 -m app.cleanup --older-than 30d",),
            USER_ENV,
            src + "15",
            "alice",
            mail=ALICE,
        ),
        job(
            "monthly-report-17",
            "0 0 1 * *",
            paris,
            ("/home/alice/bin/monthly-report.sh",),
            USER_ENV,
            src + "17",
            "alice",
            mail=ALICE,
        ),
        job(
            "mail-20",
            "0 8 * * MON",
            paris,
            ('mail -s "disk usage" alice',),
            USER_ENV,
            src + "20",
            "alice",
            mail=ALICE,
            stdin="Here is the report\nBye",
        ),
        job(
            "echo-22",
            "0 9 * * 1-5",
            "America/New_York",
            ('echo "$GREETING" | logger -t greet',),
            {**USER_ENV, "TZ": "America/New_York"},
            src + "22",
            "alice",
            mail=ALICE,
        ),
    ]
    assert result.system is False
    assert result.skipped == [
        Note(18, "@reboot: clockd has no boot event (use a systemd unit, or at: for a one-off run)"),
    ]
    assert result.errors == []
    assert [n.line for n in result.notes] == [5, None]
    assert result.notes[0].message.startswith("MAILTO=alice@example.com: no sendmail on this host")
    assert "as alice" in result.notes[1].message


BACKUP_ENV = {
    "SHELL": "/bin/bash",
    "PATH": "/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin",
    "MAILTO": "root",
}


@pytest.mark.parametrize("options", [{"system": True}, {"known_users": {"root", "www-data", "postgres"}}])
def test_system_crontab_with_a_user_column(options: dict[str, Any], host_users: HostUsers) -> None:
    host_users({"root", "www-data", "postgres"})
    path = "tests/data/crontabs/cron.d-backup"
    found = "/usr/sbin/sendmail"
    got, result = translate(read("cron.d-backup"), path, tz="Europe/Berlin", sendmail=lambda: found, **options)
    bash = ("/bin/bash", "-c")
    assert got == [
        job(
            "backup-etc-7",
            "15 3 * * *",
            "Europe/Berlin",
            (*bash, "/usr/local/sbin/backup-etc --to /srv/backup"),
            BACKUP_ENV,
            f"{path}:7",
            "root",
            shell=False,
            system=True,
            mail="root",
        ),
        job(
            "cron-8",
            "*/10 * * * *",
            "Europe/Berlin",
            (*bash, "[ -x /usr/bin/php ] && /usr/bin/php -f /var/www/nextcloud/cron.php"),
            BACKUP_ENV,
            f"{path}:8",
            "www-data",
            shell=False,
            system=True,
            mail="root",
        ),
        job(
            "vacuumdb-9",
            "0 4 * * 0",
            "Europe/Berlin",
            (*bash, "vacuumdb --all --analyze-in-stages --quiet"),
            BACKUP_ENV,
            f"{path}:9",
            "postgres",
            shell=False,
            system=True,
            mail="root",
        ),
        job(
            "logrotate-10",
            "0 0 * * *",
            "Europe/Berlin",
            (*bash, "test -x /usr/sbin/logrotate && /usr/sbin/logrotate /etc/logrotate.conf"),
            BACKUP_ENV,
            f"{path}:10",
            "root",
            shell=False,
            system=True,
            mail="root",
        ),
    ]
    assert result.system is True
    assert result.skipped == [] and result.errors == []
    assert [n.line for n in result.notes] == [2]  # SHELL; MAILTO is mail (sendmail found); user: is the user
    assert result.entries[1].fields["user"] == "www-data"
    assert result.entries[1].fields["labels"] == {"crontab.source": f"{path}:8"}


def test_lines_of_users_unknown_here_are_listed_not_imported(host_users: HostUsers) -> None:
    host_users({"root", "www-data"})  # no postgres on this host
    path = "tests/data/crontabs/cron.d-backup"
    got, result = translate(read("cron.d-backup"), path, tz="UTC", system=True)
    assert [(d.name, getattr(d.target, "user", None)) for d in got] == [
        ("backup-etc-7", "root"),
        ("cron-8", "www-data"),
        ("logrotate-10", "root"),
    ]
    assert result.skipped == [
        Note(
            9,
            "runs as postgres, who does not exist on this host (schedules are checked where clockctl runs): "
            "create the user, or import on a host that has it",
        )
    ]
    assert result.errors == []
    only = parse_crontab(read("cron.d-backup"), path, system=True, user="postgres")
    assert only.entries == []
    assert [n.line for n in only.skipped] == [7, 8, 9, 10]
    assert "does not exist on this host" in only.skipped[2].message


def test_the_host_check_can_be_given() -> None:
    result = parse_crontab("0 1 * * * alice /bin/true\n", "/etc/crontab", exists=lambda name: name == "alice")
    assert result.entries[0].fields["user"] == "alice"
    result = parse_crontab("0 1 * * * alice /bin/true\n", "/etc/crontab", exists=lambda name: False)
    assert result.entries == [] and [n.line for n in result.skipped] == [1]
    user_crontab = parse_crontab("0 1 * * * /bin/true\n", "mine", user="alice", exists=lambda name: False)
    assert "user" not in user_crontab.entries[0].fields  # whose crontab it is: a label
    assert user_crontab.entries[0].fields["labels"]["crontab.user"] == "alice"


def test_debian_etc_crontab_with_run_parts(host_users: HostUsers) -> None:
    host_users({"root"})
    path = "tests/data/crontabs/debian.crontab"
    got, result = translate(read("debian.crontab"), path, tz="Europe/Berlin")  # root: detected
    anacron = "test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.%s; }"

    def root(name: str, expr: str, command: str, line: int) -> ScheduleDef:
        return job(name, expr, "Europe/Berlin", (command,), {"SHELL": "/bin/sh"}, f"{path}:{line}", "root", system=True)

    assert got == [
        root("cron.hourly-19", "17 * * * *", "cd / && run-parts --report /etc/cron.hourly", 19),
        root("cron.daily-20", "25 6 * * *", anacron % "daily", 20),
        root("cron.weekly-21", "47 6 * * 7", anacron % "weekly", 21),
        root("cron.monthly-22", "52 6 1 * *", anacron % "monthly", 22),
    ]
    assert result.system is True and result.skipped == [] and result.errors == []


def test_a_system_crontab_is_recognised_by_its_path() -> None:
    text = "0 1 * * * somebody /bin/true\n"
    assert parse_crontab(text, "/etc/crontab").system is True
    assert parse_crontab(text, "/etc/cron.d/../cron.d/x").system is True
    assert parse_crontab(text, "mine.txt").system is False  # "somebody" is not a known user
    assert parse_crontab(text, "mine.txt", known_users={"somebody"}).system is True
    assert parse_crontab(text, "/etc/crontab", system=False).system is False


def test_user_filter_on_a_system_crontab_lists_the_others(host_users: HostUsers) -> None:
    host_users({"root"})
    result = parse_crontab(read("cron.d-backup"), "b", system=True, user="root")
    assert [e.name for e in result.entries] == ["backup-etc-7", "logrotate-10"]
    assert result.skipped == [
        Note(8, "runs as www-data, not root (--user)"),
        Note(9, "runs as postgres, not root (--user)"),
    ]


# -- lines -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "name", "value"),
    [
        ("A=b", "A", "b"),
        ("A = b c  ", "A", "b c"),
        ('A="b c "', "A", "b c "),
        ("A='b'", "A", "b"),
        ('A="unterminated', "A", '"unterminated'),
        ("A=", "A", ""),
        ("A=$HOME/bin:$PATH", "A", "$HOME/bin:$PATH"),  # cron expands nothing
        ('"QUOTED"=x', "QUOTED", "x"),
        ("  INDENTED=1", "INDENTED", "1"),
    ],
)
def test_environment_lines(line: str, name: str, value: str) -> None:
    result = parse_crontab(f"{line}\n* * * * * run\n", "c")
    assert result.entries[0].fields["env"] == {name: value}


def test_zone_lines_and_a_bad_zone() -> None:
    text = "0 9 * * * a\nCRON_TZ=Asia/Tokyo\n0 9 * * * b\nTZ=:Europe/Paris\n0 9 * * * c\nCRON_TZ=Mars/Base\n"
    result = parse_crontab(text, "c", tz="UTC")
    assert [(e.name, e.fields["tz"]) for e in result.entries] == [
        ("a-1", "UTC"),
        ("b-3", "Asia/Tokyo"),
        ("c-5", "Europe/Paris"),
    ]
    assert result.entries[1].fields["env"] == {"CRON_TZ": "Asia/Tokyo"}  # cron exports it too
    assert result.entries[2].fields["env"]["TZ"] == ":Europe/Paris"
    assert [(n.line, n.message[:28]) for n in result.errors] == [(6, "CRON_TZ: unknown time zone '")]


@pytest.mark.parametrize(
    ("command", "kept", "stdin"),
    [
        ("date +\\%F", "date +%F", None),
        ("printf '100\\%'", "printf '100%'", None),
        ("run.sh%", "run.sh", None),
        ("run.sh% ", "run.sh", None),
        ("mail -s hi bob%body%more", "mail -s hi bob", "body\nmore"),
        ("date +%F", "date +", "F"),
        ("cat%a\\%b%%c\\d", "cat", "a%b\n\nc\\d"),  # as cron: \\% is %, other backslashes kept
    ],
)
def test_percent_signs(command: str, kept: str, stdin: str | None) -> None:
    """The text after the first unescaped % is the job's stdin, later ones newlines (cron(5))."""
    result = parse_crontab(f"* * * * * {command}\n", "c")
    assert result.entries[0].fields["command"] == kept and result.skipped == []
    assert result.entries[0].fields.get("stdin") == stdin


def test_lines_that_are_not_carried_over_are_listed_never_dropped() -> None:
    text = "\n".join(
        [
            "# comment",
            "",
            "@reboot /bin/start",
            "@every 5m /bin/x",
            "this is not cron",
            "* * * *",
            "0 0 * * *",
            "61 * * * * /bin/late",
            "@daily",
            "0 0 * * * ok",
        ]
    )
    result = parse_crontab(text, "c")
    assert [n.line for n in result.skipped] == [3]
    assert [(n.line, n.message) for n in result.errors] == [
        (
            4,
            "unknown macro '@every' "
            "(known: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly, @reboot)",
        ),
        (5, "not a cron entry: expected 5 time fields, then a command"),
        (6, "not a cron entry: expected 5 time fields, then a command"),
        (7, "not a cron entry: expected 5 time fields, then a command"),
        (9, "not a cron entry: expected a macro, then a command"),
    ]
    jobs, errors = result.jobs()
    assert [j.name for j in jobs] == ["ok-10"]
    assert "c:8: schedule: minute: 61 is out of range 0-59" in [str(e) for e in errors]


def test_shell_line_changes_how_commands_run() -> None:
    result = parse_crontab("SHELL=/bin/bash\n* * * * * echo $0\nSHELL=/bin/sh\n* * * * * echo again\n", "c")
    assert result.entries[0].fields["command"] == ["/bin/bash", "-c", "echo $0"]
    assert "shell" not in result.entries[0].fields
    assert (result.entries[1].fields["command"], result.entries[1].fields["shell"]) == ("echo again", True)


def test_names_are_unique_and_prefixed() -> None:
    result = parse_crontab("* * * * * /bin/x\n", "c", prefix="host1-")
    assert [e.name for e in result.entries] == ["host1-x-1"]
    jobs, errors = result.jobs()
    assert errors == [] and jobs[0].definition.retry.retries == 0


@pytest.mark.parametrize(
    ("command", "stem"),
    [
        ("/usr/local/bin/backup.sh --full", "backup"),
        ("cd /srv && ./backup.sh", "backup"),
        ("FOO=1 BAR=2 /opt/run-me", "run-me"),
        ("nice -n 10 ionice -c3 /usr/bin/rsync -a / /mnt", "rsync"),
        ("timeout 1h flock -w 5 /tmp/l /usr/bin/php /var/www/artisan schedule:run", "artisan"),
        ("sudo -u www-data php occ files:scan --all", "occ"),
        ("/usr/bin/env python3 -m mypkg.tool", "mypkg.tool"),
        ("bash -c 'cd /x && ./deploy.sh'", "deploy"),
        (
            "[ -x /usr/lib/php/sessionclean ] && if [ ! -d /run/systemd/system ]; then /usr/lib/php/sessionclean; fi",
            "sessionclean",
        ),
        ("test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.daily )", "cron.daily"),
        ("echo hi > /tmp/out.log 2>&1", "echo"),
        ("'unbalanced", "unbalanced"),
        ("true", "job"),
        ("/path/with spaces/Ünïcode tool.sh", "with"),
        ("$HOME/bin/x", "x"),
    ],
)
def test_name_stems(command: str, stem: str) -> None:
    assert _stem(command) == stem


# -- fuzz -----------------------------------------------------------------------------------------

FAST = settings(
    max_examples=300,
    # A hang guard, run beside other test files on 2 cores (a 12-line example took 633 ms
    # under that load); per-call latency is asserted alone, in test_fuzz_parsers (serial).
    deadline=timedelta(seconds=2),
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
_PIECES = st.sampled_from(
    [
        "*", "*/5", "0", "61", "1-5", "MON", "jan", "@daily", "@reboot", "@weird", "%", "\\%", "=", "A=b", "CRON_TZ=",
        "CRON_TZ=Europe/Paris", "TZ=Nowhere", "SHELL=/bin/bash", "MAILTO=x", "root", "#", '"', "'", "(", "&&", "|",
        " ", "\t", "\r", "run-parts", "/bin/x", "sudo", "-u", "env", "L", "5#3", "15W", "\x00", "ü",
    ]
)  # fmt: skip
_CRON_LINE = st.lists(_PIECES, max_size=10).map(" ".join)


def check(text: str, **options: Any) -> None:
    try:
        result = parse_crontab(text, "fuzz", **options)
        jobs, errors = result.jobs()
    except InvalidInput:
        return
    accounted = {e.line for e in result.entries} | {n.line for n in result.skipped + result.errors}
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and "=" not in line:
            assert number in accounted, (number, line)  # never dropped silently
    for error in errors:
        assert str(error).startswith("fuzz")
    assert len(jobs) <= len(result.entries)


@FAST
@given(st.text(max_size=300))
def test_any_text(text: str) -> None:
    check(text)


@FAST
@given(st.lists(_CRON_LINE, max_size=12), st.sampled_from([None, True, False]))
def test_crontab_shaped_text(lines: list[str], system: bool | None) -> None:
    check("\n".join(lines), system=system, known_users={"root"})
