-- clockd embedded store, schema 0008: the claim writes no attempt row (issue #13), as
-- the PostgreSQL store has done since its 0005. While an attempt runs, its record is
-- its dispatch row: the lease (lease_token, worker_id, lease_until) and, new here,
-- leased_at, the attempt's start; `attempts_list` shows the running attempt from it,
-- and the attempt's one row is written when it ends (finish, reap). An attempt row that
-- says 'running' can still exist (written before this migration, or by an older
-- clockd still running on the file): finish and reap complete it in place, release
-- deletes it.
ALTER TABLE dispatch ADD COLUMN leased_at INTEGER;
UPDATE dispatch SET leased_at = (
    SELECT a.started_at FROM attempts AS a
    WHERE a.lease_token = dispatch.lease_token AND a.outcome = 'running')
WHERE lease_token IS NOT NULL;
