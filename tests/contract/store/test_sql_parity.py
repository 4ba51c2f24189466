"""Adapters stay in lockstep: every adapter directory under clockd/store/ that has a
queries.sql carries the same query names and the same migration numbers as sqlite
(STYLE.md; River's driver parity). Also checks the named-block loader itself."""

from __future__ import annotations

from pathlib import Path

import pytest

import clockd.store
from clockd.store.sql import load_migrations, load_queries, parse_queries

STORE_DIR = Path(clockd.store.__file__).parent
REFERENCE = "sqlite"
ADAPTERS = sorted(p.parent.name for p in STORE_DIR.glob("*/queries.sql"))


def test_the_reference_adapter_is_found() -> None:
    assert REFERENCE in ADAPTERS


@pytest.mark.parametrize("adapter", [a for a in ADAPTERS if a != REFERENCE] or [REFERENCE])
def test_same_query_names_as_sqlite(adapter: str) -> None:
    reference = set(load_queries(f"clockd.store.{REFERENCE}"))
    names = set(load_queries(f"clockd.store.{adapter}"))
    assert sorted(reference - names) == [], f"{adapter} lacks these queries"
    assert sorted(names - reference) == [], f"{adapter} has queries sqlite lacks"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_same_migration_numbers_as_sqlite(adapter: str) -> None:
    reference = [m.version for m in load_migrations(f"clockd.store.{REFERENCE}")]
    versions = [m.version for m in load_migrations(f"clockd.store.{adapter}")]
    assert reference, "sqlite ships at least migration 0001"
    assert versions == reference


def test_loader_splits_named_blocks() -> None:
    queries = parse_queries(
        "-- header comment\n\n-- name: one\n-- what it does\nSELECT 1;\n\n-- name: two_b\nSELECT\n  2\n"
    )
    assert list(queries) == ["one", "two_b"]
    assert queries["one"] == "-- what it does\nSELECT 1"
    assert queries["two_b"] == "SELECT\n  2"
    with pytest.raises(KeyError, match="three"):
        queries["three"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT 0;\n-- name: one\nSELECT 1", "before the first"),
        ("-- name: one\nSELECT 1\n-- name: one\nSELECT 2", "twice"),
        ("-- name: one\n-- only a comment\n", "empty"),
        ("-- name: Bad-Name\nSELECT 1", "bad query name"),
    ],
)
def test_loader_rejects_malformed_files(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_queries(text)
