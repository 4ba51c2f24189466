"""Backends for the store contract suite.

Adding a backend: write an ``async def _make_<kind>(tmp_path, request) -> Backend``
and register it in ``STORE_FACTORIES``; every contract test then runs against it.

* ``sqlite``: a fresh file under ``tmp_path``.
* ``postgres``: a fresh database per test (``pg_dsn`` in tests/conftest.py, a
  ``CREATE DATABASE … TEMPLATE`` copy of the session's template, which
  ``pytest_clockd_pg_template`` below migrates once per session). A missing server
  binary skips these tests, except under ``CI=true`` where it fails them.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from clockd.store import Store
from clockd.store.codec import to_us
from clockd.store.postgres import PostgresStore
from clockd.store.postgres.store import Q as PG_Q
from clockd.store.sqlite import SqliteStore
from clockd.store.sqlite.store import Q as SQLITE_Q

from .support import Backend


class SqliteBackend(Backend):
    def __init__(self, path: Path) -> None:
        super().__init__("sqlite", lambda: SqliteStore(path))
        self.path = path

    async def fake_migration(self, version: int, name: str) -> None:
        conn = sqlite3.connect(self.path)
        try:
            with conn:
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, 0)",
                    (version, name),
                )
        finally:
            conn.close()

    async def execute(self, statement: str, *params: object) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.path)
        try:
            with conn:
                return conn.execute(statement, [_sqlite_value(p) for p in params]).fetchall()
        finally:
            conn.close()

    async def query_plan(self, name: str, params: dict[str, Any]) -> str:
        conn = sqlite3.connect(self.path)
        try:
            return "\n".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + SQLITE_Q[name], params))
        finally:
            conn.close()


def _sqlite_value(value: object) -> object:
    return to_us(value) if isinstance(value, datetime) else value


class PostgresBackend(Backend):
    def __init__(self, dsn: str) -> None:
        super().__init__("postgres", lambda: PostgresStore(dsn))
        self.dsn = dsn

    async def fake_migration(self, version: int, name: str) -> None:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, now())",
                (version, name),
            )

    async def execute(self, statement: str, *params: object) -> list[tuple[Any, ...]]:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            cur = await conn.execute(statement.replace("?", "%s"), params)
            return await cur.fetchall() if cur.description else []

    async def query_plan(self, name: str, params: dict[str, Any]) -> str:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            await conn.execute("SET enable_seqscan = off")
            cur = await conn.execute("EXPLAIN " + PG_Q[name], params)
            return "\n".join(str(row[0]) for row in await cur.fetchall())


async def _make_sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    return SqliteBackend(tmp_path / "store" / "clockd.db")


async def _make_postgres(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    return PostgresBackend(request.getfixturevalue("pg_dsn"))


STORE_FACTORIES: dict[str, Callable[[Path, pytest.FixtureRequest], Awaitable[Backend]]] = {
    "sqlite": _make_sqlite,
    "postgres": _make_postgres,
}
# Marks per backend, so `-m "not postgres"` deselects the server-backed half.
_MARKS = {"postgres": [pytest.mark.postgres]}


def _run_async(make: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """Run a coroutine to completion on its own thread and loop: the template is built
    while the test's event loop runs (``backend`` asks for ``pg_dsn`` lazily)."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(make())
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="clockd-pg-template")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def pytest_clockd_pg_template(dsn: str) -> None:
    """Migrate the session's template database once (tests/conftest.py's ``pg_template``
    then copies it for every ``pg_dsn``), with the store's own ``migrate()``."""
    _run_async(lambda: PostgresStore(dsn).migrate())


async def make_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    return await STORE_FACTORIES[kind](tmp_path, request)


@pytest.fixture(params=[pytest.param(kind, marks=_MARKS.get(kind, [])) for kind in STORE_FACTORIES])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    made = await make_backend(request.param, tmp_path, request)
    try:
        yield made
    finally:
        await made.aclose()


@pytest.fixture
async def store(backend: Backend) -> Store:
    """An opened store on a fresh, migrated database."""
    return await backend.open_store()


@pytest.fixture
async def pg_store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    """An opened PostgreSQL store on the migrated test database (the schema tests of one
    dialect: 0012, 0014)."""
    store = PostgresStore(pg_dsn, max_size=2)
    await store.open()
    try:
        yield store
    finally:
        await store.close()
