"""A ``CLOCKD_HOME`` where clockd has run once: read-only clockctl verbs refuse a store
that does not exist ("no clockd store at …"), so CLI tests that read before they write
start from an empty, migrated store — in-process, without a ``clockd migrate`` per test."""

from __future__ import annotations

import asyncio
from pathlib import Path

from clockd.store.sqlite.store import SqliteStore


def existing_store(home: Path) -> Path:
    """Create (migrate) ``home/clockd.db`` as ``clockd migrate`` would; return its path."""
    db = home / "clockd.db"

    async def go() -> None:
        store = SqliteStore(db, owner_only=True)
        await store.open()
        await store.close()

    asyncio.run(go())
    return db
