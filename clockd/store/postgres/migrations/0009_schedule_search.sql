-- clockd PostgreSQL store, schema 0009: the schedule searches of the API and the
-- dashboard (issue #17) stop at their page's LIMIT instead of looking at every live
-- schedule. The SQLite store carries the same table and index under the same number.

-- A state filter walks (tenant, state, name) from the cursor: a state no schedule has
-- costs one index probe, not a scan of the tenant. state and name are not changed by the
-- materializer's cursor advance, so this index adds no work to the hot path.
CREATE INDEX schedules_state_name ON schedules (tenant, state, name) WHERE state <> 'deleted';

-- One row per label of each live schedule, written by the store engine in the same
-- transaction as every schedule write (create, update, pause, resume, delete:
-- clockd.store.engine.SqlStore._write_labels), so a label search is a keyset walk of
-- this key in name order (a GIN index on spec->'labels' would find the matches, but
-- then sort all of them by name for every page). A deleted schedule has no rows here.
CREATE TABLE schedule_labels (
    tenant      text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    value       text COLLATE "C" NOT NULL,
    name        text COLLATE "C" NOT NULL,
    schedule_id text COLLATE "C" NOT NULL REFERENCES schedules (id),
    PRIMARY KEY (tenant, key, value, name, schedule_id)
);
CREATE INDEX schedule_labels_schedule ON schedule_labels (schedule_id);

-- The labels of the schedules written before this schema (spec.labels: [[key, value], ...]).
INSERT INTO schedule_labels (tenant, key, value, name, schedule_id)
SELECT s.tenant, l.pair ->> 0, l.pair ->> 1, s.name, s.id
FROM schedules AS s, jsonb_array_elements(coalesce(s.spec -> 'labels', '[]'::jsonb)) AS l(pair)
WHERE s.state <> 'deleted'
ON CONFLICT DO NOTHING;
