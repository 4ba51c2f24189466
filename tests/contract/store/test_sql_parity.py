"""The dialects stay in lockstep (STYLE.md; River's driver parity): every query the
engine runs exists in every dialect's queries.sql, no dialect holds a block nobody runs,
and the migrations carry the same numbers. Also checks the named-block loader itself."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import clockd.store
from clockd.store import engine, sql
from clockd.store.sql import load_migrations, load_queries, parse_queries

STORE_DIR = Path(clockd.store.__file__).parent
REFERENCE = "sqlite"
ADAPTERS = sorted(p.parent.name for p in STORE_DIR.glob("*/queries.sql"))


def _literals(path: Path) -> set[str]:
    """Every string literal of a module (a query is run by its literal name)."""
    return {node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)
            and isinstance(node.value, str)}  # fmt: skip


def test_the_reference_adapter_is_found() -> None:
    assert REFERENCE in ADAPTERS
    assert len(ADAPTERS) >= 2


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_every_query_the_engine_runs_is_in_every_dialect(adapter: str) -> None:
    names = set(load_queries(f"clockd.store.{adapter}"))
    assert sorted(engine.ENGINE_QUERIES - names) == [], f"{adapter} lacks these queries"
    assert sorted(sql.SCHEMA_QUERIES - names) == [], f"{adapter} lacks these schema queries"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_no_dialect_holds_a_query_nobody_runs(adapter: str) -> None:
    driver = importlib.import_module(f"clockd.store.{adapter}.store")
    names = set(load_queries(f"clockd.store.{adapter}"))
    run = engine.ENGINE_QUERIES | sql.SCHEMA_QUERIES | driver.DRIVER_QUERIES
    assert sorted(names - run) == [], f"{adapter} holds queries nobody runs"
    assert sorted(driver.DRIVER_QUERIES - names) == [], f"{adapter}'s driver runs queries it lacks"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_declared_names_are_the_ones_the_code_names(adapter: str) -> None:
    """ENGINE_QUERIES, SCHEMA_QUERIES and each DRIVER_QUERIES list exactly the query names
    their module spells out (no name is built at run time), so the two checks above mean
    something."""
    names = set(load_queries(f"clockd.store.{adapter}"))
    driver = importlib.import_module(f"clockd.store.{adapter}.store")
    assert _literals(Path(sql.__file__)) & names == set(sql.SCHEMA_QUERIES)
    engine_named = _literals(Path(engine.__file__)) & names
    driver_named = _literals(Path(driver.__file__)) & names
    assert engine_named == set(engine.ENGINE_QUERIES)
    assert driver_named - engine.ENGINE_QUERIES == set(driver.DRIVER_QUERIES) - engine.ENGINE_QUERIES


def test_postgres_only_blocks_are_all_run() -> None:
    pg_only = set(load_queries("clockd.store.postgres", "postgres_only.sql"))
    source = (STORE_DIR / "postgres" / "store.py").read_text()
    assert sorted(name for name in pg_only if f'PG["{name}"]' not in source) == []


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
