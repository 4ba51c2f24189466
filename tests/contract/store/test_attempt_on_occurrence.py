"""Schema 0013 (PostgreSQL; the behaviour in both stores is in ``test_attempt_rows.py``):
the upgrade keeps every attempt where ``attempt_history`` and ``clockctl runs``/``logs``
find it, and the roles of ``clockd migrate --create-roles`` made before it may read the
new view at once (``clockctl logs`` as ``clockd_readonly``)."""

from __future__ import annotations

import psycopg
import pytest

from clockd.core.model import AttemptOutcome, OccurrenceState
from clockd.store import Completion
from clockd.store.postgres import PostgresStore

from .support import SEC, T0, running

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

UNDO_0013 = (
    "DROP VIEW attempt_history; ALTER TABLE occurrences DROP COLUMN inline_attempt_worker; "
    "DELETE FROM schema_migrations WHERE version = 13"
)


async def _readable_by(dsn: str, role: str) -> bool:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT has_table_privilege(%s, 'attempt_history', 'SELECT')", (role,))
        row = await cur.fetchone()
        assert row is not None
        return bool(row[0])


async def test_the_upgrade_to_0013_keeps_every_attempt_and_lets_the_roles_read_it(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, max_size=2)
    await store.create_roles()  # cluster-wide roles, as an operator made them before 0013
    await store.open()
    try:
        _, claim = await running(store)
        done = Completion(claim.lease_token, AttemptOutcome.SUCCEEDED, OccurrenceState.SUCCEEDED, exit_code=0)
        assert await store.finish([done], T0 + SEC) == {claim.lease_token}
    finally:
        await store.close()
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        # What a 0012 clockd would have written for the same run: an attempts row.
        await conn.execute(
            "INSERT INTO attempts (occurrence_id, attempt, lease_token, worker_id, started_at, finished_at, "
            "outcome, exit_code, output) "
            "SELECT id, 1, 'tok', inline_attempt_worker, started_at, finished_at, 'succeeded', exit_code, '' "
            "FROM occurrences WHERE id = %s",
            (claim.occurrence_id,),
        )
        await conn.execute(UNDO_0013)

    new = PostgresStore(pg_dsn, max_size=2)
    try:
        assert await new.migrate() == ["0013_attempt_on_occurrence"]
        assert await _readable_by(pg_dsn, "clockd_readonly")
        assert await _readable_by(pg_dsn, "clockd_daemon")
        await new.open()
        (shown,) = await new.list_attempts(claim.occurrence_id)
        assert (shown.number, shown.outcome, shown.worker_id, shown.started_at, shown.finished_at) == (
            1, AttemptOutcome.SUCCEEDED, "w1", T0, T0 + SEC)  # fmt: skip
    finally:
        await new.close()
