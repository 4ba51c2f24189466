"""Backends for the store contract suite.

Adding a backend: write an ``async def _make_<kind>(tmp_path, request) -> Backend``
and register it in ``STORE_FACTORIES``; every contract test then runs against it.
A PostgreSQL factory would take a fresh database from ``pg_dsn`` (tests/conftest.py),
open a ``PostgresStore`` on it, and implement ``fake_migration`` with its own SQL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from clockd.store import Store
from clockd.store.sqlite import SqliteStore

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


async def _make_sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    return SqliteBackend(tmp_path / "store" / "clockd.db")


STORE_FACTORIES: dict[str, Callable[[Path, pytest.FixtureRequest], Awaitable[Backend]]] = {
    "sqlite": _make_sqlite,
}


async def make_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    return await STORE_FACTORIES[kind](tmp_path, request)


@pytest.fixture(params=list(STORE_FACTORIES))
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
