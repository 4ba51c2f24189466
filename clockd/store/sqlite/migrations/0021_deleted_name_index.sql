-- clockd embedded store, schema 0021: a deleted schedule's runs, by its name (the
-- PostgreSQL store's 0021 says why). schedule_get_deleted_by_name repeats the constant
-- 'deleted', so SQLite's planner takes this partial index.
CREATE INDEX schedules_deleted_name ON schedules (tenant, name, updated_at DESC) WHERE state = 'deleted';
