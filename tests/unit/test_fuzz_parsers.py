"""Hostile input: every parser that reads user text either accepts it or raises a
``ClockdError`` (``InvalidInput`` …) — quickly, and never hangs.

For each parser, hypothesis feeds both free-form text (any unicode, control
characters, huge numbers) and near-miss text built from the parser's own
vocabulary. Every call runs under a SIGALRM watchdog (a hang fails the example
instead of the whole run), and every *rejection* must take under 100 ms.
Examples are bounded so the file runs well under a minute.
"""

from __future__ import annotations

import atexit
import math
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clockd.config import Settings, coerce, load_settings
from clockd.core.cron import parse_cron
from clockd.core.durations import parse_duration
from clockd.core.instants import parse_instant
from clockd.core.model import CommandTarget, HttpTarget, ScheduleDef, ScheduleKind
from clockd.core.sizes import parse_size
from clockd.core.spec import validate_definition
from clockd.core.zones import get_zone
from clockd.errors import ClockdError
from clockd.formats.validate import normalize
from clockd.runner import secrets

T = TypeVar("T")
REJECT_WITHIN = 0.100  # seconds
HANG = 5.0  # seconds: far beyond any legitimate call
NOW = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
# Every rejection must come back within 100 ms: wall time, so `make test` runs these alone.
pytestmark = pytest.mark.serial

FUZZ = settings(
    max_examples=300,
    deadline=None,  # timing is asserted per call below, without hypothesis' first-call noise
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=False,
)


class Hang(Exception):
    pass


@contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    def fire(signum: int, frame: object) -> None:
        raise Hang(f"call did not return within {seconds}s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _timed(fn: Callable[[], T]) -> tuple[T | ClockdError, float]:
    started = time.perf_counter()
    try:
        with watchdog(HANG):
            return fn(), time.perf_counter() - started
    except ClockdError as exc:
        return exc, time.perf_counter() - started


def accepts_or_rejects_cleanly(fn: Callable[[], T]) -> T | ClockdError:
    """Run ``fn``: its value, or the ClockdError it raised within REJECT_WITHIN.

    Anything else it raises fails the example. A slow rejection is timed twice more
    and the fastest run counts: a garbage-collection pause or a busy CI machine is
    noise, a parser that is slow on this input is slow every time."""
    result, elapsed = _timed(fn)
    if isinstance(result, ClockdError):
        assert result.message, "a rejection must say what is wrong"
        for _ in range(2):
            if elapsed < REJECT_WITHIN:
                break
            elapsed = min(elapsed, _timed(fn)[1])
        assert elapsed < REJECT_WITHIN, f"rejection took {elapsed * 1000:.0f} ms: {result.message!r}"
    return result


# -- vocabularies ---------------------------------------------------------------------------

NASTY = st.text(
    alphabet=st.one_of(
        st.characters(),  # any code point, surrogates excluded
        st.sampled_from(list("\x00\t\n\r\x1b\x7f\u2028\u202e\ufeff ;'\"$(){}`\\*/-,?#LW@:+")),
    ),
    max_size=60,
)
HUGE_NUMBERS = st.integers(min_value=0, max_value=10**30).map(str) | st.just("9" * 5000)


def joined(parts: st.SearchStrategy[str], sep: str = "", max_size: int = 8) -> st.SearchStrategy[str]:
    return st.lists(parts, max_size=max_size).map(sep.join)


CRON_TOKEN = st.sampled_from(
    ["*", "?", "/", "-", ",", "L", "W", "#", "LW", "0", "1", "5", "7", "12", "15", "23", "31", "59", "60", "99",
     "JAN", "feb", "DEC", "MON", "sun", "SAT", "@daily", "@hourly", "@reboot", "@yearly", "L-3", "15W", "5#3"]
)  # fmt: skip
CRON_FIELD = joined(CRON_TOKEN | HUGE_NUMBERS, max_size=5)
CRON_TEXT = st.one_of(
    NASTY, joined(CRON_FIELD, " ", max_size=7), st.lists(CRON_FIELD, min_size=5, max_size=5).map(" ".join)
)

DURATION_TEXT = st.one_of(
    NASTY,
    joined(st.one_of(HUGE_NUMBERS, st.sampled_from(["d", "h", "m", "s", "ms", "us", " ", "-", ".", "1.5", "µs"]))),
)
INSTANT_TEXT = st.one_of(
    NASTY,
    st.datetimes(timezones=st.none() | st.timezones()).map(lambda d: d.isoformat()),
    joined(
        st.sampled_from(["now", "+", "-", "90m", "1h30m", "9" * 30 + "d", "T", "Z", "2026-03-29", "02:30", "+01:00"])
    ),
)
ZONE_TEXT = st.one_of(
    NASTY,
    st.sampled_from(["Europe/Paris", "UTC", "../../etc/passwd", "Europe/../Paris", "/etc/localtime", "posix/UTC"]),
    joined(st.sampled_from(["Europe", "America", "/", "Paris", "..", "New_York", "\x00", "GMT+3", "Etc"])),
)


# -- the parsers --------------------------------------------------------------------------


@FUZZ
@given(CRON_TEXT)
def test_parse_cron(text: str) -> None:
    accepts_or_rejects_cleanly(lambda: parse_cron(text))


@FUZZ
@given(DURATION_TEXT)
def test_parse_duration(text: str) -> None:
    result = accepts_or_rejects_cleanly(lambda: parse_duration(text))
    if not isinstance(result, ClockdError):
        assert result.total_seconds() >= 0


@FUZZ
@given(INSTANT_TEXT, st.none() | ZONE_TEXT)
def test_parse_instant(text: str, tz: str | None) -> None:
    result = accepts_or_rejects_cleanly(lambda: parse_instant(text, tz, NOW))
    if not isinstance(result, ClockdError):
        assert result.tzinfo is UTC


@FUZZ
@given(ZONE_TEXT)
def test_get_zone(name: str) -> None:
    accepts_or_rejects_cleanly(lambda: get_zone(name))


@FUZZ
@given(st.text(min_size=1, max_size=64).map(lambda t: t * (20000 // len(t))) | st.just("Europe/" * 2300))
def test_get_zone_refuses_a_long_name_before_suggesting_one(name: str) -> None:
    # A 16 KB name took 10.7 s: difflib over every zone name is quadratic in the input.
    result = accepts_or_rejects_cleanly(lambda: get_zone(name))
    assert isinstance(result, ClockdError) and "longer than 64 characters" in result.message


@FUZZ
@given(
    st.sampled_from(["cron", "once", "every", "never", ""]) | NASTY,
    st.one_of(CRON_TEXT, INSTANT_TEXT, DURATION_TEXT),
    ZONE_TEXT,
)
def test_validate_definition(kind: str, expr: str, tz: str) -> None:
    accepts_or_rejects_cleanly(lambda: validate_definition(kind, expr, tz))


@FUZZ
@given(NASTY | joined(st.sampled_from(["${", "$${", "file:", "env:", "/etc/x", "}", "A_1", "-", "$"])))
def test_secret_reference_syntax(text: str) -> None:
    accepts_or_rejects_cleanly(lambda: secrets.parse(text))


@FUZZ
@given(NASTY | joined(st.one_of(HUGE_NUMBERS, st.sampled_from(["K", "M", "G", "T", "i", "B", " ", "-", "."]))))
def test_parse_size(text: str) -> None:
    accepts_or_rejects_cleanly(lambda: parse_size(text))


# -- config files --------------------------------------------------------------------------

SETTING_KEYS = st.sampled_from([*Settings.__dataclass_fields__, "colour", "store-url", ""])
YAML_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    NASTY,
    HUGE_NUMBERS,
    st.sampled_from(["30s", "all", "leader,worker", "*", "root", "default=*,root", "{}", "[]"]),
)
YAML_VALUES = st.recursive(
    YAML_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(NASTY | SETTING_KEYS, inner, max_size=4),
    max_leaves=12,
)
YAML_TEXT = st.one_of(
    st.dictionaries(SETTING_KEYS, YAML_VALUES, max_size=6).map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
    NASTY,
    joined(st.sampled_from(["key: ", "[", "]", "{", "}", "- ", "\n", "  ", "!!python/object:os.system", "&a ", "*a",
                            "<<: ", "'", '"', "%YAML 1.1\n", "---\n", "? ", "concurrency: ", "modes: "])),
)  # fmt: skip
_CONFIG_DIR = Path(tempfile.mkdtemp(prefix="clockd-fuzz-"))
atexit.register(shutil.rmtree, _CONFIG_DIR, True)


@FUZZ
@given(YAML_TEXT)
def test_load_settings_from_a_random_yaml_file(text: str) -> None:
    path = _CONFIG_DIR / "clockd.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    accepts_or_rejects_cleanly(lambda: load_settings(config_path=str(path), env={}))


def test_deeply_nested_yaml_is_rejected_cleanly() -> None:
    path = _CONFIG_DIR / "deep.yaml"
    path.write_text("modes: " + "[" * 5000 + "]" * 5000 + "\n")
    accepts_or_rejects_cleanly(lambda: load_settings(config_path=str(path), env={}))


@FUZZ
@given(st.sampled_from(sorted(Settings.__dataclass_fields__)), YAML_VALUES)
def test_every_setting_coerces_or_rejects(key: str, value: Any) -> None:
    accepts_or_rejects_cleanly(lambda: coerce(key, value, "fuzz"))


# -- whole definitions -----------------------------------------------------------------------


@FUZZ
@given(
    name=NASTY,
    argv=st.lists(NASTY, max_size=4),
    env=st.lists(st.tuples(NASTY, NASTY), max_size=3),
    user=st.none() | NASTY | st.sampled_from(["root", "nobody"]),
    limit=st.none() | st.integers(min_value=-(2**70), max_value=2**70),
    url=NASTY | st.sampled_from(["http://x", "https://h:0/", "http://[::1]:99999/", "http://[bad/"]),
    headers=st.lists(st.tuples(NASTY, NASTY), max_size=3),
    statuses=st.lists(st.integers(min_value=-(10**6), max_value=10**6), max_size=3),
)
def test_normalize_any_definition(
    name: str,
    argv: list[str],
    env: list[tuple[str, str]],
    user: str | None,
    limit: int | None,
    url: str,
    headers: list[tuple[str, str]],
    statuses: list[int],
) -> None:
    command = CommandTarget(argv=tuple(argv), env=tuple(env), user=user, memory_limit=limit, nproc_limit=limit)
    http = HttpTarget(method=name[:8] or "GET", url=url, headers=tuple(headers), expect_status=tuple(statuses))
    for target in (command, http):
        definition = ScheduleDef(name=name, kind=ScheduleKind.EVERY, expr="1h", tz="UTC", target=target)

        def attempt(definition: ScheduleDef = definition) -> ScheduleDef:
            return normalize(definition)

        accepts_or_rejects_cleanly(attempt)


def test_the_watchdog_catches_a_hang() -> None:
    started = time.perf_counter()
    try:
        with watchdog(0.05):
            while True:
                math.sqrt(2)
    except Hang:
        pass
    assert time.perf_counter() - started < 1
