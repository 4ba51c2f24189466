"""Zones come from the pinned tzdata package; unknown names get close suggestions."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime

import pytest
import tzdata

from clockd.core.zones import available_zones, get_zone, suggest_zones, tzdata_version
from clockd.errors import InvalidInput, UnknownZone


def test_zone_data_comes_only_from_the_tzdata_package() -> None:
    assert zoneinfo.TZPATH == ()
    paris = get_zone("Europe/Paris")
    assert paris.key == "Europe/Paris"
    assert datetime(2026, 7, 1, 12, tzinfo=UTC).astimezone(paris).isoformat() == ("2026-07-01T14:00:00+02:00")


def test_get_zone_returns_one_object_per_name() -> None:
    assert get_zone("America/New_York") is get_zone("America/New_York")
    assert get_zone("UTC").key == "UTC"


def test_tzdata_version_is_the_pinned_release() -> None:
    version = tzdata_version()
    assert version == tzdata.IANA_VERSION
    assert version[:4].isdigit() and version[4:].isalpha()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Europe/Pari", "unknown time zone 'Europe/Pari'; did you mean Europe/Paris?"),
        ("europe/paris", "unknown time zone 'europe/paris'; did you mean Europe/Paris?"),
        ("America/New_Yrok", "unknown time zone 'America/New_Yrok'; did you mean America/New_York?"),
        ("Paris", "unknown time zone 'Paris'; did you mean Europe/Paris?"),
        ("Mars/Olympus", "unknown time zone 'Mars/Olympus' (use an IANA name such as Europe/Paris, or UTC)"),
        ("", "time zone is empty (use an IANA name such as Europe/Paris, or UTC)"),
    ],
)
def test_unknown_zone_names_the_closest_valid_names(name: str, message: str) -> None:
    with pytest.raises(UnknownZone) as info:
        get_zone(name)
    assert info.value.message == message
    assert isinstance(info.value, InvalidInput) and info.value.exit_code == 2


@pytest.mark.parametrize(
    "name", ["Europe", "zone.tab", "tzdata.zi", "/etc/passwd", "../etc/passwd", "__init__.py", "a\x00b"]
)
def test_files_that_are_not_zones_are_unknown_zones(name: str) -> None:
    with pytest.raises(UnknownZone):
        get_zone(name)


def test_suggestions_are_valid_zone_names() -> None:
    for guess in ["Europe/Berln", "asia/tokyo", "Sydney", "America/Sao_Paul"]:
        close = suggest_zones(guess)
        assert close, guess
        assert all(name in available_zones() for name in close)
