-- clockd PostgreSQL store, schema 0006: the finish's update of occurrences is HOT too
-- (issue #7). The SQLite store carries the same number (a no-op there).
--
-- 0004 made the relay's and the claim's updates HOT; the finish (RUNNING -> SUCCEEDED,
-- RETRY_WAIT, DEAD) was not: it sets finished_at, which occurrences_finished (retention,
-- not-run counts) and occurrences_dead (the DLQ, newest first) had as key column, and
-- an update that changes any indexed column writes a new entry into every index of the
-- table (five here). Under the sustained 10k/s benchmark that update cost as much
-- database time as the relay. PostgreSQL decides HOT on the stored values of the
-- indexed columns, so, as 0004 did for state:
--   * dead_at (finished_at while DEAD) and not_run_at (finished_at while MISSED or
--     SKIPPED_OVERLAP) are stored generated columns: NULL for every run that ends any
--     other way, so a SUCCEEDED or RETRY_WAIT finish changes no indexed value;
--   * occurrences_dead is rebuilt on dead_at (the DLQ reads say `dead_at IS NOT NULL`;
--     the `dead` column goes), occurrences_not_run on not_run_at serves the leader's
--     not-run counts;
--   * occurrences_finished goes: retention (prune) walks occurrences_recent, oldest due
--     first, and deletes terminal rows that were both due and finished before the
--     cutoff (a run canceled ahead of its instant goes once its instant is that old).
-- No index on occurrences names state, enqueued_at, started_at, finished_at, attempts,
-- exit_code, reason or last_error after this. Keep it so (0004 says why).
--
-- Cost: like 0004, ADD COLUMN ... STORED rewrites occurrences under an ACCESS EXCLUSIVE
-- lock (about 4 s per million rows on a test machine): run `clockd migrate` in a quiet hour.
DROP INDEX occurrences_dead;
DROP INDEX occurrences_finished;
ALTER TABLE occurrences
    DROP COLUMN dead,
    ADD COLUMN dead_at timestamptz
        GENERATED ALWAYS AS (CASE WHEN state = 'DEAD' THEN finished_at END) STORED,
    ADD COLUMN not_run_at timestamptz
        GENERATED ALWAYS AS (CASE WHEN state IN ('MISSED', 'SKIPPED_OVERLAP') THEN finished_at END) STORED;
-- The dead-letter queue (`clockctl dlq list`), most recently dead first, without a scan.
CREATE INDEX occurrences_dead ON occurrences (dead_at, id) WHERE dead_at IS NOT NULL;
-- MISSED / SKIPPED_OVERLAP runs by when they ended (the leader's clockd_occurrences_not_run_total).
CREATE INDEX occurrences_not_run ON occurrences (not_run_at) WHERE not_run_at IS NOT NULL;
