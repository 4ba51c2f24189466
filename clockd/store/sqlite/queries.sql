-- Named statements of the SQLite store (clockd.store.sql loads them).
-- The PostgreSQL store has the same names; a parity test checks it.
--
-- Conventions: instants are INTEGER microseconds (UTC); `now` is always a parameter.
-- Sets travel as one JSON array parameter read with json_each() (PostgreSQL:
-- unnest of array parameters / jsonb_to_recordset), so every batch is one statement
-- instead of a round trip per row. Tuple rows are read with json_extract(value, '$[i]')
-- (not ->>, which needs SQLite 3.38).

-- ------------------------------------------------------------------ schema bookkeeping

-- name: schema_migrations_create
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
);

-- name: schema_migrations_exists
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations';

-- name: schema_migrations_list
SELECT version, name FROM schema_migrations ORDER BY version;

-- name: schema_migration_record
INSERT INTO schema_migrations (version, name, applied_at) VALUES (:version, :name, :applied_at);

-- ------------------------------------------------------------------ fences and counters

-- name: fence_advance
-- Moves the fence to our token unless a larger one is stored: no row back = fenced out.
INSERT INTO fences (resource, token) VALUES (:resource, :token)
ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE fences.token <= excluded.token
RETURNING token;

-- name: fence_get
SELECT token FROM fences WHERE resource = :resource;

-- name: counter_next
INSERT INTO counters (name, value) VALUES (:name, 1)
ON CONFLICT (name) DO UPDATE SET value = counters.value + 1
RETURNING value;

-- ------------------------------------------------------------------ schedules

-- name: schedule_insert
INSERT INTO schedules (id, tenant, name, kind, expr, tz, queue, state, version, next_run_at,
                       shard, created_at, updated_at, paused_at, spec)
VALUES (:id, :tenant, :name, :kind, :expr, :tz, :queue, 'active', 1, :next_run_at,
        :shard, :now, :now, NULL, :spec);

-- name: schedule_get
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE id = :id;

-- name: schedule_get_by_name
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE tenant = :tenant AND name = :name AND state != 'deleted';

-- name: schedules_list
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE state != 'deleted' AND (:tenant IS NULL OR tenant = :tenant)
ORDER BY name, tenant;

-- name: schedule_update
-- Conditional on the version the caller read: no row back = someone else changed it.
UPDATE schedules
SET tenant = :tenant, name = :name, kind = :kind, expr = :expr, tz = :tz, queue = :queue,
    state = :state, version = version + 1, next_run_at = :next_run_at, updated_at = :now,
    paused_at = CASE WHEN :state != 'paused' THEN NULL
                     WHEN state = 'paused' THEN paused_at
                     ELSE :now END,
    spec = :spec
WHERE id = :id AND version = :expected_version AND state != 'deleted'
RETURNING id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
          created_at, updated_at, paused_at, spec;

-- name: schedule_version_insert
INSERT INTO schedule_versions (schedule_id, version, state, valid_from, valid_to, definition, reason)
VALUES (:schedule_id, :version, :state, :now, NULL, :definition, :reason);

-- name: schedule_version_close
UPDATE schedule_versions SET valid_to = :now WHERE schedule_id = :schedule_id AND valid_to IS NULL;

-- name: schedule_versions_list
SELECT version, valid_from, valid_to, definition, state
FROM schedule_versions WHERE schedule_id = :schedule_id ORDER BY version;

-- name: schedule_definitions
-- Definitions by (schedule_id, version), for claims (immutable: safe to cache).
SELECT schedule_id, version, definition FROM schedule_versions
WHERE (schedule_id, version) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:keys));

-- The three statements below share one predicate: unclaimed occurrences of older
-- versions (run-now ones only when the schedule is deleted). Queue rows go first.

-- name: cancel_outbox
DELETE FROM outbox WHERE occurrence_id IN (
    SELECT id FROM occurrences
    WHERE schedule_id = :schedule_id AND schedule_version < :version
      AND state IN ('SCHEDULED', 'ENQUEUED', 'RETRY_WAIT') AND (manual = 0 OR :include_manual));

-- name: cancel_dispatch
DELETE FROM dispatch WHERE lease_token IS NULL AND occurrence_id IN (
    SELECT id FROM occurrences
    WHERE schedule_id = :schedule_id AND schedule_version < :version
      AND state IN ('SCHEDULED', 'ENQUEUED', 'RETRY_WAIT') AND (manual = 0 OR :include_manual));

-- name: cancel_occurrences
UPDATE occurrences SET state = 'CANCELED', reason = :reason, finished_at = :now
WHERE schedule_id = :schedule_id AND schedule_version < :version
  AND state IN ('SCHEDULED', 'ENQUEUED', 'RETRY_WAIT') AND (manual = 0 OR :include_manual);

-- ------------------------------------------------------------------ occurrences (clockctl)

-- name: occurrence_insert_manual
INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for,
                         available_at, state, max_attempts, manual)
VALUES (:id, :schedule_id, :version, :tenant, :queue, :now, :now, 'SCHEDULED', :max_attempts, 1);

-- name: occurrence_get
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.id = :id;

-- name: occurrence_by_prefix
-- A primary-key range, not LIKE: a prefix may hold '%' or '_'.
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.id >= :prefix AND o.id < :prefix_end
ORDER BY o.id LIMIT 2;

-- name: occurrences_list
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.scheduled_for <= :before
ORDER BY o.scheduled_for DESC, o.id DESC LIMIT :limit;

-- name: occurrences_list_by_schedule
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.schedule_id = :schedule_id AND o.scheduled_for <= :before
ORDER BY o.scheduled_for DESC, o.id DESC LIMIT :limit;

-- name: attempts_list
SELECT occurrence_id, attempt, lease_token, worker_id, started_at, outcome, finished_at,
       exit_code, signal, output, error
FROM attempts WHERE occurrence_id = :occurrence_id ORDER BY attempt;

-- ------------------------------------------------------------------ materializer

-- name: due_schedules
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules
WHERE state = 'active' AND shard IN (SELECT value FROM json_each(:shards))
  AND next_run_at <= :until
ORDER BY next_run_at, id LIMIT :limit;

-- name: materialize_advance
-- :cursors = [[schedule_id, version, expected_us|null, next_run_at_us|null], ...]
-- Moves a cursor only if the schedule is still active at that version with that cursor.
UPDATE schedules SET next_run_at = json_extract(c.value, '$[3]')
FROM json_each(:cursors) AS c
WHERE schedules.id = json_extract(c.value, '$[0]')
  AND schedules.version = json_extract(c.value, '$[1]')
  AND schedules.state = 'active'
  AND schedules.next_run_at IS json_extract(c.value, '$[2]')
RETURNING id, version;

-- name: materialize_insert
-- :occurrences = [[id, schedule_id, version, tenant, queue, scheduled_for_us,
--                  available_at_us, state, max_attempts, reason, finished_at_us|null], ...]
-- ("WHERE true" keeps the parser from reading ON CONFLICT as a join constraint.)
INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for,
                         available_at, state, max_attempts, reason, finished_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       json_extract(value, '$[6]'), json_extract(value, '$[7]'), json_extract(value, '$[8]'),
       json_extract(value, '$[9]'), json_extract(value, '$[10]')
FROM json_each(:occurrences) WHERE true
ON CONFLICT DO NOTHING
RETURNING id, state;

-- name: outbox_insert
INSERT INTO outbox (occurrence_id, queue, tenant, available_at)
SELECT id, queue, tenant, available_at FROM occurrences
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'SCHEDULED'
ON CONFLICT (occurrence_id) DO NOTHING;

-- ------------------------------------------------------------------ relay

-- name: relay_take
DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox WHERE available_at <= :until ORDER BY available_at, id LIMIT :limit)
RETURNING occurrence_id;

-- name: relay_enqueue
UPDATE occurrences SET state = 'ENQUEUED', enqueued_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'SCHEDULED'
RETURNING id;

-- name: relay_dispatch
INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at)
SELECT id, queue, tenant, available_at FROM occurrences
WHERE id IN (SELECT value FROM json_each(:ids))
ON CONFLICT (occurrence_id) DO NOTHING;

-- ------------------------------------------------------------------ worker

-- name: claim_pick
-- One queue at a time (the store merges queues by visible_at): with `queue = ?` the
-- dispatch_ready index yields rows already in order and the scan stops at :limit;
-- `queue IN (...)` would sort every visible row first. SQLite has one writer at a
-- time (BEGIN IMMEDIATE), so rows picked here cannot be taken by anyone else before
-- claim_lease (PostgreSQL: FOR UPDATE SKIP LOCKED inside id = ANY(ARRAY(...))).
SELECT d.visible_at, d.id, d.occurrence_id FROM dispatch AS d
WHERE d.lease_token IS NULL AND d.queue = :queue AND d.visible_at <= :now
  AND EXISTS (SELECT 1 FROM occurrences AS o
              WHERE o.id = d.occurrence_id AND o.state IN ('ENQUEUED', 'RETRY_WAIT'))
ORDER BY d.visible_at, d.id LIMIT :limit;

-- name: claim_lease
-- :leases = [[dispatch_id, lease_token], ...]
UPDATE dispatch SET lease_token = json_extract(l.value, '$[1]'), lease_until = :lease_until,
                    worker_id = :worker_id
FROM json_each(:leases) AS l
WHERE dispatch.id = json_extract(l.value, '$[0]') AND dispatch.lease_token IS NULL;

-- name: claim_start
UPDATE occurrences SET state = 'RUNNING', attempts = attempts + 1,
                       started_at = coalesce(started_at, :now)
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('ENQUEUED', 'RETRY_WAIT')
RETURNING id, attempts, schedule_id, schedule_version, scheduled_for, max_attempts;

-- name: claim_attempts
INSERT INTO attempts (occurrence_id, attempt, lease_token, worker_id, started_at, outcome)
SELECT d.occurrence_id, o.attempts, d.lease_token, d.worker_id, :now, 'running'
FROM dispatch AS d JOIN occurrences AS o ON o.id = d.occurrence_id
WHERE d.id IN (SELECT value FROM json_each(:dispatch_ids));

-- name: leases_extend
UPDATE dispatch SET lease_until = :lease_until
WHERE lease_token IN (SELECT value FROM json_each(:tokens))
RETURNING lease_token;

-- name: leases_held
-- The claims behind these tokens, if still held (finish, release).
SELECT d.id, d.occurrence_id, d.lease_token, o.attempts
FROM dispatch AS d JOIN occurrences AS o ON o.id = d.occurrence_id
WHERE d.lease_token IN (SELECT value FROM json_each(:tokens)) AND o.state = 'RUNNING';

-- name: finish_attempts
-- :rows = [[occurrence_id, attempt, outcome, exit_code, signal, output, error,
--           next_state, reason], ...]
UPDATE attempts
SET finished_at = :now, outcome = json_extract(c.value, '$[2]'),
    exit_code = json_extract(c.value, '$[3]'), signal = json_extract(c.value, '$[4]'),
    output = json_extract(c.value, '$[5]'), error = json_extract(c.value, '$[6]')
FROM json_each(:rows) AS c
WHERE attempts.occurrence_id = json_extract(c.value, '$[0]')
  AND attempts.attempt = json_extract(c.value, '$[1]');

-- name: finish_occurrences
UPDATE occurrences
SET state = json_extract(c.value, '$[7]'),
    finished_at = CASE WHEN json_extract(c.value, '$[7]') = 'RETRY_WAIT' THEN NULL ELSE :now END,
    exit_code = json_extract(c.value, '$[3]'),
    last_error = json_extract(c.value, '$[6]'),
    reason = json_extract(c.value, '$[8]')
FROM json_each(:rows) AS c
WHERE occurrences.id = json_extract(c.value, '$[0]') AND occurrences.state = 'RUNNING';

-- name: dispatch_delete
DELETE FROM dispatch WHERE id IN (SELECT value FROM json_each(:ids));

-- name: dispatch_retry
-- :rows = [[dispatch_id, visible_at_us], ...]
UPDATE dispatch SET lease_token = NULL, lease_until = NULL, worker_id = NULL,
                    visible_at = json_extract(c.value, '$[1]')
FROM json_each(:rows) AS c
WHERE dispatch.id = json_extract(c.value, '$[0]');

-- name: dispatch_unlease
-- visible_at NULL keeps the row's visible_at.
UPDATE dispatch SET lease_token = NULL, lease_until = NULL, worker_id = NULL,
                    visible_at = coalesce(:visible_at, visible_at)
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: release_attempts
-- :keys = [[occurrence_id, attempt], ...]
DELETE FROM attempts WHERE (occurrence_id, attempt) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:keys));

-- name: release_occurrences
UPDATE occurrences
SET attempts = attempts - 1,
    state = CASE WHEN attempts - 1 = 0 THEN 'ENQUEUED' ELSE 'RETRY_WAIT' END,
    started_at = CASE WHEN attempts - 1 = 0 THEN NULL ELSE started_at END
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'RUNNING';

-- ------------------------------------------------------------------ leader

-- name: reap_pick
SELECT d.id, d.occurrence_id, o.attempts, o.max_attempts
FROM dispatch AS d JOIN occurrences AS o ON o.id = d.occurrence_id
WHERE d.lease_token IS NOT NULL AND d.lease_until < :now
ORDER BY d.lease_until, d.id LIMIT :limit;

-- name: reap_attempts
UPDATE attempts SET outcome = 'lost', finished_at = :now, error = :error
WHERE (occurrence_id, attempt) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:keys))
  AND outcome = 'running';

-- name: reap_retry
UPDATE occurrences SET state = 'RETRY_WAIT'
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'RUNNING';

-- name: reap_dead
UPDATE occurrences
SET state = 'DEAD', finished_at = :now,
    reason = 'lease expired on attempt ' || attempts || ' of ' || max_attempts
             || ' (worker crashed, paused or partitioned)'
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'RUNNING';

-- name: prune
-- Attempts, outbox and dispatch rows go with their occurrence (ON DELETE CASCADE).
DELETE FROM occurrences WHERE id IN (
    SELECT id FROM occurrences
    WHERE finished_at < :before
      AND state IN ('SUCCEEDED', 'DEAD', 'MISSED', 'SKIPPED_OVERLAP', 'CANCELED')
    ORDER BY finished_at LIMIT :limit);

-- ------------------------------------------------------------------ observation

-- name: backlog
SELECT (SELECT count(*) FROM schedules WHERE state = 'active' AND next_run_at <= :now),
       (SELECT count(*) FROM outbox),
       (SELECT count(*) FROM dispatch WHERE lease_token IS NULL),
       (SELECT count(*) FROM dispatch WHERE lease_token IS NOT NULL),
       (SELECT min(visible_at) FROM dispatch WHERE lease_token IS NULL);
