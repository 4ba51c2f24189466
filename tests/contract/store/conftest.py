"""Backends for the store contract suite.

Adding a backend: write an ``async def _make_<kind>(tmp_path, request) -> Backend``
and register it in ``STORE_FACTORIES``; every contract test then runs against it.

* ``sqlite``: a fresh file under ``tmp_path``.
* ``postgres``: a fresh database per test (``pg_store_dsn``), ``CREATE DATABASE …
  TEMPLATE`` of a database migrated once per session (``pg_store_template``), on the
  session's server (``pg_server`` in tests/conftest.py). A missing server binary
  skips these tests, except under ``CI=true`` where it fails them.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from clockd.store import Store
from clockd.store.postgres import PostgresStore
from clockd.store.sqlite import SqliteStore
from tests.harness import PostgresServer

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


async def _make_sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    return SqliteBackend(tmp_path / "store" / "clockd.db")


async def _make_postgres(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    return PostgresBackend(request.getfixturevalue("pg_store_dsn"))


STORE_FACTORIES: dict[str, Callable[[Path, pytest.FixtureRequest], Awaitable[Backend]]] = {
    "sqlite": _make_sqlite,
    "postgres": _make_postgres,
}
# Marks per backend, so `-m "not postgres"` deselects the server-backed half.
_MARKS = {"postgres": [pytest.mark.postgres]}
PG_STORE_TEMPLATE = "clockd_store_template"


def _run_async(make: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """Run a coroutine to completion on its own thread and loop: session fixtures may
    be set up while the test's event loop runs (``getfixturevalue`` from an async one)."""
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


@pytest.fixture(scope="session")
def pg_store_template(pg_server: PostgresServer) -> str:
    """A database migrated once per session by ``PostgresStore.migrate()``, then marked a
    template. (tests/conftest.py's ``pg_template`` would be prepared by the
    ``clockd_pg_template`` hook, but pytest 9 registers no hook implementation whose
    name lacks the ``pytest_`` prefix, so the suite builds its own template.)"""
    pg_server.drop_database(PG_STORE_TEMPLATE)
    dsn = pg_server.create_database(PG_STORE_TEMPLATE)
    _run_async(lambda: PostgresStore(dsn).migrate())
    with pg_server.connect() as conn:
        conn.execute(f'ALTER DATABASE "{PG_STORE_TEMPLATE}" WITH IS_TEMPLATE true')
    return PG_STORE_TEMPLATE


@pytest.fixture
def pg_store_dsn(pg_server: PostgresServer, pg_store_template: str) -> Iterator[str]:
    """A fresh migrated database for one test (a template copy), dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    dsn = pg_server.create_database(name, template=pg_store_template)
    try:
        yield dsn
    finally:
        pg_server.drop_database(name)


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
