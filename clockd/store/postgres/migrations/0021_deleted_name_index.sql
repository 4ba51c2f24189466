-- clockd PostgreSQL store, schema 0021: a deleted schedule's runs, by its name.
--
-- `clockctl runs NAME` and GET /v1/occurrences?schedule=NAME read the runs of the
-- schedule of that name; once it is deleted no live schedule has the name (its history
-- stays until retention prunes it), and they look up the latest deleted one
-- (schedule_get_deleted_by_name). No index covered deleted schedules by name
-- (schedules_live_name leaves them out), so that lookup read the whole table. This one
-- holds deleted schedules only: a delete writes one entry, and no cursor move, pause or
-- edit of a live schedule writes any (the predicate is false for them).
CREATE INDEX schedules_deleted_name ON schedules (tenant, name, updated_at DESC) WHERE state = 'deleted';
