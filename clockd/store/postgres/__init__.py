"""The PostgreSQL store: the shared database of a clockd cluster.

``PostgresStore`` is the SQL store engine (``clockd.store.engine``) over this package's
driver (``store.PostgresDriver``): the driver owns the pool, the values and the one-
statement chains; every rule of the store is the engine's (docs/store.md).

Invariants:

* Every method is one transaction (writes) or one autocommit statement (reads) on a
  pooled connection; a raised error leaves nothing half-written.
* Every connection runs with ``plan_cache_mode = force_custom_plan``, ``jit = off`` and
  ``TimeZone = UTC``; instants are ``timestamptz`` and come back as aware UTC.
* ``open()`` checks the schema and never migrates: behind → ``SchemaMismatch`` with the
  ``clockd migrate`` hint, ahead → ``SchemaMismatch`` (upgrade clockd). ``migrate()``
  is safe to run concurrently (advisory lock) and on a store that is not open.
* SQL lives in ``queries.sql``: every block the engine runs, under the same names as
  the SQLite store's, plus this driver's one-statement chains (``claim_lease``,
  ``relay_dispatch``, ``materialize_insert``, ``overlap_release``); migrations in
  ``migrations/`` under the same numbers; the few statements SQLite has no use for
  (the migration lock, the server clock, the snapshot) are in ``postgres_only.sql``.
* Hot paths are set-based: arrays in, ``unnest`` / data-modifying CTEs inside, rows
  picked with ``FOR UPDATE SKIP LOCKED`` in ``id = ANY(ARRAY(SELECT …))``.
"""

from __future__ import annotations

from clockd.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
