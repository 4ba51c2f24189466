"""The dialects stay in lockstep (STYLE.md; River's driver parity): every query the
engine runs exists in every dialect's queries.sql, no dialect holds a block nobody runs,
and the migrations carry the same numbers. Also checks the named-block loader itself."""

from __future__ import annotations

import ast
import importlib
import re
from datetime import timedelta
from pathlib import Path

import pytest

import clockd.store
from clockd.core import states
from clockd.core.model import AttemptOutcome, NoopTarget, OccurrenceState, ScheduleDef, ScheduleKind
from clockd.core.planning import MAX_WINDOW
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
    assert driver.__file__ is not None  # a module loaded from a file
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
    # Sent without the comments, named (pg_stat_statements shows the name).
    assert queries["one"] == "/* one */\nSELECT 1"
    assert queries["two_b"] == "/* two_b */\nSELECT\n  2"
    with pytest.raises(KeyError, match="three"):
        queries["three"]


def test_a_fragment_is_written_once_and_sent_where_a_block_includes_it() -> None:
    queries = parse_queries(
        "-- fragment: pick\n-- shared\nWITH picked AS (\n    SELECT 1 AS id\n\n"
        "-- name: one\n-- include: pick\n)\nSELECT id FROM picked;\n\n"
        "-- name: two\n-- include: pick\n)\nSELECT id + 1 FROM picked\n"
    )
    assert list(queries) == ["one", "two"]  # a fragment is no query
    assert queries["one"] == "/* one */\nWITH picked AS (\n    SELECT 1 AS id\n)\nSELECT id FROM picked"
    assert queries["two"] == "/* two */\nWITH picked AS (\n    SELECT 1 AS id\n)\nSELECT id + 1 FROM picked"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT 0;\n-- name: one\nSELECT 1", "before the first"),
        ("-- name: one\n-- include: pick\nSELECT 1\n-- fragment: pick\nSELECT 2", "not a fragment above it"),
        ("-- fragment: pick\nSELECT 1\n-- name: pick\nSELECT 2", "twice"),
        ("-- fragment: pick\n-- only a comment\n-- name: one\nSELECT 1", "fragment 'pick' is empty"),
        ("-- name: one\nSELECT 1\n-- name: one\nSELECT 2", "twice"),
        ("-- name: one\n-- only a comment\n", "empty"),
        ("-- name: Bad-Name\nSELECT 1", "bad query name"),
    ],
)
def test_loader_rejects_malformed_files(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_queries(text)


# -- the rules come from core (issue #13): no SQL block repeats a default, a reason, a state --

# Blocks where a state name may stand as a literal: reads, and the filters that ask "has it
# ended?" / "is it still queued?" (the overlap slots, retention, the misfire scan). Kept as
# literals so the planner can match partial-index predicates; none of them writes a state.
STATE_LITERALS_ALLOWED = frozenset(
    {
        "attempts_list", "prune", "claim_judge", "claim_lease", "overlap_unpark", "overlap_release",
        "misfire_pick", "overlap_stale", "occurrences_running", "dlq_list", "dlq_list_by_schedule",
        "start_lag", "start_lag_histogram", "dead_count", "not_run_counts",
    }
)  # fmt: skip
_STATE_NAMES = "|".join([s.value for s in OccurrenceState] + [o.value for o in AttemptOutcome])


def _code(statement: str) -> str:
    """A block without its comments (they may name anything)."""
    return "\n".join(line.split("--")[0] for line in statement.splitlines())


def _core_literals() -> list[str]:
    """How core's policy defaults, the planning window and the reason texts would look
    if a block spelled them out instead of taking them as parameters."""
    default = ScheduleDef(name="", kind=ScheduleKind.ONCE, expr="", tz="UTC", target=NoopTarget())
    literals = [f"'{default.misfire.value}'", f", '{default.overlap.value}')"]  # a coalesce's fallback
    for span in (default.max_lateness, MAX_WINDOW):
        literals += [str(span // timedelta(microseconds=1)), f"'{int(span.total_seconds() // 60)} minutes'"]
    literals.append(f", {default.catch_up_limit})")
    reasons = (engine.LEASE_LOST, engine.LEASE_LOST_DEAD, engine.OVERLAP_PARKED, engine.OVERLAP_QUEUE_FULL,
               engine.OVERLAP_SKIPPED, "no worker reached it")  # fmt: skip
    return literals + [reason.split("{")[0][:18] for reason in reasons]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_no_block_repeats_a_core_default_or_a_reason_text(adapter: str) -> None:
    found = {
        (name, literal)
        for name, statement in load_queries(f"clockd.store.{adapter}").items()
        for literal in _core_literals()
        if literal in _code(statement)
    }
    assert sorted(found) == []


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_state_names_are_written_from_parameters(adapter: str) -> None:
    """Every state (and attempt outcome) a statement writes comes in as a parameter from
    clockd.core.states / the model; a literal name stands only in the reads and filters
    listed above."""
    queries = load_queries(f"clockd.store.{adapter}")
    literal = {name for name, sql in queries.items() if re.search(rf"'({_STATE_NAMES})'", _code(sql))}
    assert sorted(literal - STATE_LITERALS_ALLOWED) == []
    written = re.compile(rf"(SET\s+(state|outcome)\s*=|THEN|ELSE|VALUES\s*\([^)]*)\s*'({_STATE_NAMES})'", re.I)
    assert sorted(name for name, sql in queries.items() if written.search(_code(sql))) == []


def test_the_names_the_engine_passes_are_the_state_tables() -> None:
    released = {OccurrenceState(v) for v in engine._RELEASED.values()}
    assert released == states.targets("release")
    assert {AttemptOutcome(v) for v in engine._OUTCOMES.values()} == {AttemptOutcome.RUNNING, AttemptOutcome.LOST}
