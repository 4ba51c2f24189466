"""Named SQL blocks and numbered migrations, shared by the SQL store adapters.

An adapter keeps its SQL as SQL, reviewed as SQL, in ``<adapter>/queries.sql``::

    -- name: claim_pick
    -- Visible, unleased rows of the asked queues, oldest first.
    SELECT id FROM dispatch WHERE ...;

    -- name: claim_lease
    UPDATE dispatch SET ...

Every block starts at a ``-- name: <snake_case>`` line and runs to the next one; a
trailing ``;`` is dropped so a block is always exactly one statement. A block that starts
at ``-- fragment: <snake_case>`` instead is no statement: it is a part that statements
share, and a line ``-- include: <fragment>`` in a later block stands for its code lines
(the claim's pick, which ``claim_shared`` and ``claim_lease`` both start with, is written
once). A fragment is not a query: it has no name in the map, and may end mid-statement.
The comment lines
and blank lines of a block are for its readers and are not sent: the statement sent
is ``/* name */`` and the block's other lines, so ``pg_stat_statements``,
``pg_stat_activity`` and the server's log name the block (they showed the first line of
its comment, when it had one). Shorter, the worker's plain claim is also below the
4,096 bytes up to which psycopg caches a statement's conversion
(``psycopg._queries.MAX_CACHED_STATEMENT_LENGTH``; 4,369 bytes with its comments):
~80 µs of parsing per claim saved, ~0.2 µs per execution at 500 a claim. Migrations live
in ``<adapter>/migrations/NNNN_name.sql`` and are numbered from 0001 without gaps.
The PostgreSQL and SQLite adapters carry the *same query names* and the *same
migration numbers*; ``tests/contract/store/test_sql_parity.py`` checks it.

Why these statements are typed ``LiteralString`` although they are read from files:
the files are package data shipped next to the code, never built from input, so
they deserve the same trust as a literal. ``trusted_sql`` is the one place that says
so; every value the loader hands out is typed ``LiteralString``, so a checker that
enforces PEP 675 flags any code that splices input into SQL.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final, LiteralString

from clockd.errors import SchemaMismatch
from clockd.store.driver import Body, Run, Script

log = logging.getLogger(__name__)

# The blocks of the schema bookkeeping below, in every dialect's queries.sql.
SCHEMA_QUERIES: Final = frozenset(
    {"schema_migrations_create", "schema_migrations_exists", "schema_migrations_list", "schema_migration_record"}
)

_NAME_LINE = re.compile(r"^--\s*(name|fragment):\s*(\S+)\s*$")
_INCLUDE_LINE = re.compile(r"^--\s*include:\s*(\S+)\s*$")
_VALID_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class Queries(Mapping[str, LiteralString]):
    """Read-only ``name -> statement`` map; a missing name is a ``KeyError`` naming the file."""

    __slots__ = ("_origin", "_queries")

    def __init__(self, queries: dict[str, LiteralString], origin: str) -> None:
        self._queries = queries
        self._origin = origin

    def __getitem__(self, name: str) -> LiteralString:
        try:
            return self._queries[name]
        except KeyError:
            raise KeyError(f"no query named {name!r} in {self._origin}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._queries)

    def __len__(self) -> int:
        return len(self._queries)


def trusted_sql(text: str) -> LiteralString:
    """Mark SQL read from this package's own files as trusted (see the module docstring).

    mypy treats ``LiteralString`` as ``str`` (PEP 675 is not enforced there), so this is
    a plain return; under a checker that enforces PEP 675 this line is where the one
    ``cast`` belongs. Never call it on text that comes from input."""
    return text


def _is_code(line: str) -> bool:
    """A line that is sent: neither blank nor a comment line."""
    return bool(line.strip()) and not line.lstrip().startswith("--")


def parse_queries(text: str, origin: str = "<string>") -> Queries:
    """Split ``text`` into named blocks, fragments included where a block says so. Raises
    ``ValueError`` on a duplicate or badly formed name, an empty block, a statement before
    the first name, or an include of a fragment not defined above it."""
    queries: dict[str, LiteralString] = {}
    fragments: dict[str, list[str]] = {}
    kind, name = "name", None
    body: list[str] = []

    def code_of(lines: list[str]) -> list[str]:
        code: list[str] = []
        for line in lines:
            include = _INCLUDE_LINE.match(line.strip())
            if include is not None:
                if include.group(1) not in fragments:
                    raise ValueError(f"{origin}: {name!r} includes {include.group(1)!r}, not a fragment above it")
                code += fragments[include.group(1)]
            elif _is_code(line):
                code.append(line)
        return code

    def flush() -> None:
        if name is None:
            if any(_is_code(line) for line in body):
                raise ValueError(f"{origin}: SQL before the first '-- name:' line")
            return
        code = code_of(body)
        if kind == "fragment":
            if not code:
                raise ValueError(f"{origin}: fragment {name!r} is empty")
            fragments[name] = code
            return
        statement = "\n".join(code).strip().removesuffix(";").rstrip()
        if not statement:
            raise ValueError(f"{origin}: query {name!r} is empty")
        queries[name] = trusted_sql(f"/* {name} */\n{statement}")

    for line in text.splitlines():
        match = _NAME_LINE.match(line.strip())
        if match is None:
            body.append(line)
            continue
        flush()
        kind, name = match.group(1), match.group(2)
        what = "query" if kind == "name" else "fragment"
        if not _VALID_NAME.match(name):
            raise ValueError(f"{origin}: bad {what} name {name!r} (use snake_case)")
        if name in queries or name in fragments:
            raise ValueError(f"{origin}: {what} {name!r} is defined twice")
        body = []
    flush()
    return Queries(queries, origin)


def load_queries(package: str, filename: str = "queries.sql") -> Queries:
    """The named blocks of ``filename`` in ``package`` (package data, read once)."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    return parse_queries(text, f"{package}/{filename}")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: LiteralString

    @property
    def label(self) -> str:
        """``0001_init``: how logs and ``schema_migrations`` name it."""
        return f"{self.version:04d}_{self.name}"


def load_migrations(package: str, directory: str = "migrations") -> list[Migration]:
    """The migrations of ``package``, in order. Raises ``ValueError`` on a stray file
    name, a duplicate number or a gap (numbers run 1, 2, 3, … so adapters stay
    comparable)."""
    folder = resources.files(package).joinpath(directory)
    found: dict[int, Migration] = {}
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _MIGRATION_FILE.match(entry.name)
        if match is None:
            raise ValueError(f"{package}/{directory}/{entry.name}: name it NNNN_snake_name.sql")
        version = int(match.group(1))
        if version in found:
            raise ValueError(f"{package}/{directory}: migration {version:04d} appears twice")
        sql = trusted_sql(entry.read_text(encoding="utf-8"))
        found[version] = Migration(version, match.group(2), sql)
    versions = sorted(found)
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError(
            f"{package}/{directory}: migrations must be numbered 0001.. without gaps, "
            f"found {[f'{v:04d}' for v in versions]}"
        )
    return [found[v] for v in versions]


def check_versions(
    applied: set[int],
    migrations: Sequence[Migration],
    where: str,
    *,
    apply: bool,
    behind: Callable[[int, int], str],
) -> set[int]:
    """``applied`` back, after the checks every store makes when it opens: ``SchemaMismatch``
    on a schema newer than ``migrations`` know, or (``apply`` false) on one missing some;
    ``behind(newest, known)`` says what to do then (each store says it its own way)."""
    known = migrations[-1].version if migrations else 0
    newest = max(applied, default=0)
    if newest > known:
        raise SchemaMismatch(
            f"database schema {newest:04d} of {where} is newer than this clockd (knows {known:04d}): upgrade clockd"
        )
    if not apply and any(m.version not in applied for m in migrations):
        raise SchemaMismatch(behind(newest, known))
    return applied


# -- the schema bookkeeping every driver runs, as transaction bodies (clockd.store.driver) --


def applied_versions() -> Body[set[int]]:
    """The migrations ``schema_migrations`` records (none before the first one)."""
    exists = yield Run("schema_migrations_exists", {}, "one")
    if exists is None:
        return set()
    rows = yield Run("schema_migrations_list")
    return {int(version) for version, _ in rows}


def check_schema(migrations: Sequence[Migration], where: str, behind: Callable[[int, int], str]) -> Body[set[int]]:
    """What opening a store without migrating checks (``check_versions``, ``apply`` false)."""
    applied = yield from applied_versions()
    return check_versions(applied, migrations, where, apply=False, behind=behind)


def apply_migration(
    migration: Migration, migrations: Sequence[Migration], where: str, applied_at: Any, lock: Script | None = None
) -> Body[bool]:
    """One migration's own transaction: ``lock`` first (PostgreSQL's advisory lock; SQLite's
    ``BEGIN IMMEDIATE`` is one), then what is applied is re-read under it, so two
    migrators at once apply each migration once; the script and its record commit
    together. True if it was applied here."""
    if lock is not None:
        yield lock
    yield Run("schema_migrations_create", {}, "none")
    applied = yield from applied_versions()
    if migration.version in check_versions(applied, migrations, where, apply=True, behind=_unused):
        return False
    yield Script(migration.sql)
    record = {"version": migration.version, "name": migration.name, "applied_at": applied_at}
    yield Run("schema_migration_record", record, "none")
    return True


def log_applied(done: Sequence[str], where: str) -> None:
    for label in done:
        log.info("applied migration %s to %s", label, where, extra={"action": "store_migrated", "migration": label})


def _unused(newest: int, known: int) -> str:
    return f"schema {newest:04d} of {known:04d}"  # check_versions asks only when not applying
