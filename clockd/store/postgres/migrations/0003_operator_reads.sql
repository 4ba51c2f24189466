-- clockd PostgreSQL store, schema 0003: what the operator read paths need (reconcile,
-- explain). The SQLite store carries the same column under the same number.

-- The schedule's cursor (schedules.next_run_at) when each version was written, copied
-- by schedule_version_insert: where that version's expectations begin. An update never
-- re-materializes an instant the old version already materialized, so the new version
-- starts at the old cursor (clockd.ops.cursor_after_update), not at valid_from; a pause
-- keeps the cursor, a resume starts after the resume. NULL on versions written before
-- 0003 (the reconciler then starts an active version strictly after valid_from) and
-- when there is no next run (deleted, exhausted).
ALTER TABLE schedule_versions ADD COLUMN next_run_at timestamptz;
