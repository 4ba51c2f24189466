-- clockd PostgreSQL store, schema 0014: no foreign keys from a schedule's own rows to
-- schedules (issue 18, "creation through the clockctl apply path"). The SQLite store
-- carries the same number.
--
-- schedule_versions, schedule_labels and overlap_slots each checked every row written with
-- a lookup of its schedule by primary key that also locks the schedule row (FOR KEY SHARE
-- writes the row's header and a WAL record), as occurrences did before 0012. A create
-- writes a version, a row per label (apply's clockd.managed-by on every one) and, with an
-- overlap policy, a slot: in a 20,000-create apply the versions insert took 23-25 us and
-- the labels insert 21-22 us of database time per create, against 8-9 and 7 us without
-- the checks (pg_stat_statements, three interleaved rounds); the whole apply went from
-- 8,200-9,800 to 12,400-13,000 creates/s.
-- What the keys promised holds without them, as for occurrences in 0012:
--   * a schedule row is never deleted (soft delete: state = 'deleted'), so a row that
--     named an existing schedule keeps naming one;
--   * these rows are written only by the store engine, in the transaction that writes
--     their schedule row (schedule_insert / schedule_insert_many write the slot in the
--     same statement; schedule_update is conditional on the row and writes its version
--     and labels only if it matched; the claim makes a missing slot only for a schedule
--     it has just joined).
-- tests/contract/store/test_lean_creates.py holds the schema, the promise and the upgrade.
-- Dropping a constraint moves no row.
ALTER TABLE schedule_versions DROP CONSTRAINT IF EXISTS schedule_versions_schedule_id_fkey;
ALTER TABLE schedule_labels DROP CONSTRAINT IF EXISTS schedule_labels_schedule_id_fkey;
ALTER TABLE overlap_slots DROP CONSTRAINT IF EXISTS overlap_slots_schedule_id_fkey;
