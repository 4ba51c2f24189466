"""``check_name``: names (schedules, tenants, queues) with no control or invisible
character; its ASCII shortcut refuses exactly what the full check refuses."""

from __future__ import annotations

import re

import pytest

from clockd.core.limits import _invisible, check_name
from clockd.errors import InvalidInput


def test_the_ascii_shortcut_agrees_with_the_unicode_categories() -> None:
    for code in range(128):
        char = chr(code)
        assert _invisible(char) is (not char.isprintable()), hex(code)


@pytest.mark.parametrize("name", ["nightly-backup", "a b", "x" * 200, "équipe/report", "~!@#$%^&*()"])
def test_names_without_invisible_characters_pass(name: str) -> None:
    check_name(name, "name")


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("tab\there", "U+0009"),
        ("bell\x07", "U+0007"),
        ("del\x7f", "U+007F"),
        ("zw\u200bsp", "U+200B"),
        ("nul\x00", "U+0000"),
    ],
)
def test_a_control_or_invisible_character_is_named(name: str, shown: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(shown)):
        check_name(name, "name")
