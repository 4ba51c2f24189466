-- clockd embedded store, schema 0009: the schedule searches of the API and the dashboard
-- (issue #17) stop at their page's LIMIT instead of looking at every live schedule.
-- The PostgreSQL store carries the same table and index under the same number.

-- A state filter walks (tenant, state, name) from the cursor: a state no schedule has
-- costs one index probe, not a scan of the tenant.
CREATE INDEX schedules_state_name ON schedules (tenant, state, name) WHERE state != 'deleted';

-- One row per label of each live schedule, written by the store engine in the same
-- transaction as every schedule write (create, update, pause, resume, delete:
-- clockd.store.engine.SqlStore._write_labels), so a label search is a keyset walk of
-- this key in name order. A deleted schedule has no rows here.
CREATE TABLE schedule_labels (
    tenant      TEXT NOT NULL,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,
    name        TEXT NOT NULL,
    schedule_id TEXT NOT NULL REFERENCES schedules (id),
    PRIMARY KEY (tenant, key, value, name, schedule_id)
) WITHOUT ROWID;
CREATE INDEX schedule_labels_schedule ON schedule_labels (schedule_id);

-- The labels of the schedules written before this schema (spec.labels: [[key, value], ...]).
INSERT OR IGNORE INTO schedule_labels (tenant, key, value, name, schedule_id)
SELECT s.tenant, json_extract(l.value, '$[0]'), json_extract(l.value, '$[1]'), s.name, s.id
FROM schedules AS s, json_each(s.spec, '$.labels') AS l
WHERE s.state != 'deleted';
