-- clockd PostgreSQL store, schema 0005: fewer writes per run (issue #7). The SQLite
-- store carries the same number (a no-op there).
--
-- Measured with pg_stat_statements under the sustained 10k/s benchmark (2 cores, the
-- database the bottleneck): per execution the claim cost ~245 µs of server time and
-- the finish's UPDATE of attempts ~150 µs, against ~5 µs for a bare claim/complete.
-- Three things here take work off every run:
--
-- 1. The attempt row is written once, when the attempt ends (finish, reap), instead of
--    inserted by the claim and updated by the finish. While an attempt runs, its
--    record is the dispatch row: the lease (lease_token, worker_id, lease_until) and,
--    new here, leased_at, the attempt's start. `attempts_list` shows that running
--    attempt from it. An attempt row that says 'running' can still exist (written
--    before this migration): finish and reap complete it in place (ON CONFLICT).
ALTER TABLE dispatch ADD COLUMN leased_at timestamptz;
UPDATE dispatch AS d SET leased_at = a.started_at
FROM attempts AS a
WHERE d.lease_token IS NOT NULL AND a.lease_token = d.lease_token AND a.outcome = 'running';

-- 2. No foreign keys from the per-run tables to occurrences. Each insert into outbox,
--    dispatch and attempts checked its occurrence with a key lookup that also locks
--    the occurrence row (FOR KEY SHARE writes the row's header): 1.5 M such checks,
--    ~17 s of server time, in a 60 s run. Those rows are only ever written from an
--    occurrence's id in the same transaction that reads or writes the occurrence, and
--    the one statement that deletes occurrences (prune) deletes their attempts,
--    outbox and dispatch rows itself (the cascade did it before).
ALTER TABLE outbox DROP CONSTRAINT IF EXISTS outbox_occurrence_id_fkey;
ALTER TABLE dispatch DROP CONSTRAINT IF EXISTS dispatch_occurrence_id_fkey;
ALTER TABLE attempts DROP CONSTRAINT IF EXISTS attempts_occurrence_id_fkey;

-- 3. One index fewer for every lease: dispatch_leased_tenant served only
--    tenant_running_recount (`clockctl tenant set`), which now reads the leased rows
--    through dispatch_leased (every leased row, a few thousand at most). A lease writes
--    a new version of the dispatch row (not HOT: lease_token is indexed); each index
--    on the leased side is one more entry per claim.
DROP INDEX IF EXISTS dispatch_leased_tenant;
