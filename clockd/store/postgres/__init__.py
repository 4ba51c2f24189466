"""The PostgreSQL store: the shared database of a clockd cluster.

Invariants:

* Every method is one transaction (writes) or one autocommit statement (reads) on a
  pooled connection; a raised error leaves nothing half-written.
* Every connection runs with ``plan_cache_mode = force_custom_plan``, ``jit = off`` and
  ``TimeZone = UTC``; instants are ``timestamptz`` and come back as aware UTC.
* ``open()`` checks the schema and never migrates: behind → ``SchemaMismatch`` with the
  ``clockd migrate`` hint, ahead → ``SchemaMismatch`` (upgrade clockd). ``migrate()``
  is safe to run concurrently (advisory lock) and on a store that is not open.
* SQL lives in ``queries.sql`` under the same names as the SQLite store's, migrations
  in ``migrations/`` under the same numbers; the few statements SQLite has no use for
  (the migration lock, the server clock) are in ``postgres_only.sql``.
* Hot paths are set-based: arrays in, ``unnest`` / data-modifying CTEs inside, rows
  picked with ``FOR UPDATE SKIP LOCKED`` in ``id = ANY(ARRAY(SELECT …))``.
"""

from __future__ import annotations

from clockd.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
