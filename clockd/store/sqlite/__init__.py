"""The embedded SQLite store: one file, zero setup, the default for a single machine.

``SqliteStore`` is the SQL store engine (``clockd.store.engine``) over this package's
driver (``store.SqliteDriver``): the driver owns the file, its thread and its values;
every rule of the store is the engine's (docs/store.md).

Invariants:

* One dedicated thread per ``SqliteStore`` owns its one connection; every method is
  one transaction body run whole on that thread (``BEGIN IMMEDIATE`` for writes), so
  the event loop never blocks and a raised error leaves nothing half-written. Write
  bodies waiting together share one transaction, each in its own savepoint (group
  commit: ``store.py``'s docstring).
* WAL journal, ``synchronous=FULL``: a commit is durable when it returns (a process
  crash, a power loss or a disk turning read-only loses no acknowledged write).
  ``busy_timeout`` lets ``clockctl`` and ``clockd`` share the file; a lock held past it
  raises ``StoreLocked``.
* ``open()`` applies pending migrations (``migrations/NNNN_name.sql``, recorded in
  ``schema_migrations``) and refuses a schema newer than this release.
* SQL lives in ``queries.sql``: every block the engine runs, under the same names as
  the PostgreSQL store's, plus the steps this driver writes as several statements.
* Instants are stored as INTEGER microseconds since the epoch, UTC.
"""

from __future__ import annotations

from clockd.store.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
