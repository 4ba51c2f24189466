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

-- name: schedule_get_deleted_by_name
-- The latest deleted schedule of that name (schedules_deleted_name, schema 0021).
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE tenant = :tenant AND name = :name AND state = 'deleted'
ORDER BY updated_at DESC LIMIT 1;

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
-- Runs after the schedule row is written: next_run_at copies its cursor (0003), where
-- this version's expectations begin (the reconciler's boundary between versions).
INSERT INTO schedule_versions (schedule_id, version, state, valid_from, valid_to, definition, reason,
                               next_run_at)
VALUES (:schedule_id, :version, :state, :now, NULL, :definition, :reason,
        (SELECT next_run_at FROM schedules WHERE id = :schedule_id));

-- name: schedule_insert_many
-- apply_schedules' creates, a batch in one statement: schedule_insert for each row of
-- :schedules = [[id, tenant, name, kind, expr, tz, queue, next_run_at_us|null, shard,
-- spec_json, definition_json], ...]. A taken name or id (also one taken twice within the
-- batch) fails the whole statement; the store then redoes the batch row by row, so the
-- Conflict names the schedule. schedule_version_insert_many and
-- schedule_labels_insert_many follow it with the same :schedules.
INSERT INTO schedules (id, tenant, name, kind, expr, tz, queue, state, version, next_run_at,
                       shard, created_at, updated_at, paused_at, spec)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       json_extract(value, '$[6]'), :state, 1, json_extract(value, '$[7]'),
       json_extract(value, '$[8]'), :now, :now, NULL, json_extract(value, '$[9]')
FROM json_each(:schedules);

-- name: schedule_version_insert_many
-- The first schedule_versions row of each schedule schedule_insert_many wrote, from the
-- same :schedules (the cursor given is the one written).
INSERT INTO schedule_versions (schedule_id, version, state, valid_from, valid_to, definition, reason,
                               next_run_at)
SELECT json_extract(value, '$[0]'), 1, :state, :now, NULL, json_extract(value, '$[10]'), :reason,
       json_extract(value, '$[7]')
FROM json_each(:schedules);

-- name: schedule_labels_insert_many
-- The labels of the schedules schedule_insert_many wrote, read from each one's spec in
-- the same :schedules (spec.labels: [[key, value], ...]; a pair given twice is kept once).
INSERT OR IGNORE INTO schedule_labels (tenant, key, value, name, schedule_id)
SELECT json_extract(s.value, '$[1]'), json_extract(l.value, '$[0]'), json_extract(l.value, '$[1]'),
       json_extract(s.value, '$[2]'), json_extract(s.value, '$[0]')
FROM json_each(:schedules) AS s, json_each(json_extract(s.value, '$[9]'), '$.labels') AS l;

-- name: schedule_version_close
UPDATE schedule_versions SET valid_to = :now WHERE schedule_id = :schedule_id AND valid_to IS NULL;

-- name: schedule_versions_list
SELECT version, valid_from, valid_to, definition, state
FROM schedule_versions WHERE schedule_id = :schedule_id ORDER BY version;

-- name: schedule_definitions
-- What a claim takes from the definitions named by (schedule_id, version), as PostgreSQL's
-- (json_extract gives an object as its minified text).
SELECT schedule_id, version, json_extract(definition, '$.name'), json_extract(definition, '$.target'),
       json_extract(definition, '$.retry'), json_extract(definition, '$.timeout_us')
FROM schedule_versions
WHERE (schedule_id, version) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:keys));

-- The three statements below share one predicate: unclaimed occurrences of older
-- versions (run-now ones only when the schedule is deleted). Queue rows go first.

-- name: cancel_outbox
DELETE FROM outbox WHERE occurrence_id IN (
    SELECT id FROM occurrences
    WHERE schedule_id = :schedule_id AND schedule_version < :version
      AND state IN (SELECT value FROM json_each(:expected)) AND (manual = 0 OR :include_manual));

-- name: cancel_dispatch
DELETE FROM dispatch WHERE lease_token IS NULL AND occurrence_id IN (
    SELECT id FROM occurrences
    WHERE schedule_id = :schedule_id AND schedule_version < :version
      AND state IN (SELECT value FROM json_each(:expected)) AND (manual = 0 OR :include_manual));

-- name: cancel_occurrences
UPDATE occurrences SET state = :next, reason = :reason, finished_at = :now
WHERE schedule_id = :schedule_id AND schedule_version < :version
  AND state IN (SELECT value FROM json_each(:expected)) AND (manual = 0 OR :include_manual)
RETURNING id, scheduled_for, attempts;

-- ------------------------------------------------------------------ occurrences (clockctl)

-- name: occurrence_insert_manual
-- Only if the schedule row exists (PostgreSQL has no foreign key to say so since schema
-- 0012): no row written is the engine's NotFound.
INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for,
                         available_at, state, max_attempts, manual, overlap)
SELECT :id, s.id, :version, :tenant, :queue, :now, :now, :scheduled, :max_attempts, 1, :overlap
FROM schedules AS s WHERE s.id = :schedule_id;

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
-- The ended attempts (attempt_history: the attempts rows and, schema 0013, a first
-- attempt kept on its occurrence row), and the running one from its lease (schema 0008:
-- its row is written when it ends; one written as 'running' before 0008 is shown as it is).
SELECT occurrence_id, attempt, lease_token, worker_id, started_at, outcome, finished_at,
       exit_code, signal, output, error
FROM attempt_history WHERE occurrence_id = :occurrence_id
UNION ALL
SELECT d.occurrence_id, o.attempts, d.lease_token, coalesce(d.worker_id, ''),
       coalesce(d.leased_at, o.started_at), 'running', NULL, NULL, NULL, '', NULL
FROM dispatch AS d JOIN occurrences AS o ON o.id = d.occurrence_id
WHERE d.occurrence_id = :occurrence_id AND d.lease_token IS NOT NULL AND o.state = 'RUNNING'
  AND NOT EXISTS (SELECT 1 FROM attempts AS a
                  WHERE a.occurrence_id = d.occurrence_id AND a.attempt = o.attempts)
ORDER BY 2;

-- ------------------------------------------------------------------ materializer

-- name: due_schedules
-- Only the planning inputs (clockd.core.planning.DueSchedule), the spec's fields read by
-- path: the whole document is not decoded.
SELECT id, tenant, name, kind, expr, tz, queue, version, next_run_at, created_at,
       json_extract(spec, '$.misfire'), json_extract(spec, '$.max_lateness_us'),
       json_extract(spec, '$.window_us'), json_extract(spec, '$.catch_up_limit'),
       json_extract(spec, '$.retry.retries'),
       json_extract(spec, '$.target.type') = 'command' AND json_extract(spec, '$.target.stdin') IS NOT NULL,
       coalesce(json_type(spec, '$.notify') = 'array' AND json_array_length(spec, '$.notify') > 0, 0),
       json_extract(spec, '$.overlap')
FROM schedules
WHERE state = 'active' AND shard IN (SELECT value FROM json_each(:shards))
  AND next_run_at <= :until
ORDER BY next_run_at, id LIMIT :limit;

-- name: due_shards
-- min() over the schedules_due range of each shard: one index probe per shard.
SELECT shard, first_due FROM (
    SELECT k.value AS shard,
           (SELECT min(next_run_at) FROM schedules
            WHERE state = 'active' AND shard = k.value AND next_run_at <= :until) AS first_due
    FROM json_each(:shards) AS k
)
WHERE first_due IS NOT NULL
ORDER BY first_due, shard;

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
--                  available_at_us, state, max_attempts, reason, finished_at_us|null,
--                  overlap|null], ...]
-- ("WHERE true" keeps the parser from reading ON CONFLICT as a join constraint.)
INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for,
                         available_at, state, max_attempts, reason, finished_at, overlap)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       json_extract(value, '$[6]'), json_extract(value, '$[7]'), json_extract(value, '$[8]'),
       json_extract(value, '$[9]'), json_extract(value, '$[10]'), json_extract(value, '$[11]')
FROM json_each(:occurrences) WHERE true
ON CONFLICT DO NOTHING
RETURNING id, state;

-- name: outbox_insert
INSERT INTO outbox (occurrence_id, queue, tenant, available_at)
SELECT id, queue, tenant, available_at FROM occurrences
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = :scheduled
ON CONFLICT (occurrence_id) DO NOTHING;

-- ------------------------------------------------------------------ relay

-- name: relay_take
DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox WHERE available_at <= :until ORDER BY available_at, id LIMIT :limit)
RETURNING occurrence_id;

-- name: relay_enqueue
UPDATE occurrences SET state = :next, enqueued_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = :expected
RETURNING id;

-- name: relay_dispatch
-- Returns :now - visible_at (µs) of each row queued: how late it was staged.
INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at, overlap)
SELECT id, queue, tenant, available_at, overlap FROM occurrences
WHERE id IN (SELECT value FROM json_each(:ids))
ON CONFLICT (occurrence_id) DO NOTHING
RETURNING :now - visible_at;

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
              WHERE o.id = d.occurrence_id AND o.state IN (SELECT value FROM json_each(:claimable)))
ORDER BY d.visible_at, d.id LIMIT :limit;

-- name: claim_lease
-- :leases = [[dispatch_id, lease_token], ...]. The lease is the running attempt's
-- record (leased_at its start; schema 0008): no attempt row until it ends.
UPDATE dispatch SET lease_token = json_extract(l.value, '$[1]'), lease_until = :lease_until,
                    worker_id = :worker_id, leased_at = :now
FROM json_each(:leases) AS l
WHERE dispatch.id = json_extract(l.value, '$[0]') AND dispatch.lease_token IS NULL;

-- name: claim_start
UPDATE occurrences SET state = :running_state, attempts = attempts + 1,
                       started_at = coalesce(started_at, :now)
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN (SELECT value FROM json_each(:claimable))
RETURNING id, attempts, schedule_id, schedule_version, scheduled_for, max_attempts;

-- name: leases_extend
UPDATE dispatch SET lease_until = :lease_until
WHERE lease_token IN (SELECT value FROM json_each(:tokens))
RETURNING lease_token;

-- name: leases_held
-- The claims behind these tokens, if still held (finish, release), with their
-- occurrence's state (the engine keeps the RUNNING ones), worker and the attempt's start
-- (leased_at; a lease taken by a clockd before schema 0008 has none: the first start),
-- and the queue row's overlap policy ('allow': the claim took no slot; NULL before 0019).
SELECT d.id, d.occurrence_id, d.lease_token, o.attempts, d.tenant, o.state, d.worker_id,
       coalesce(d.leased_at, o.started_at), d.overlap
FROM dispatch AS d JOIN occurrences AS o ON o.id = d.occurrence_id
WHERE d.lease_token IN (SELECT value FROM json_each(:tokens));

-- name: finish_attempts
-- :rows = [[occurrence_id, attempt, outcome, exit_code, signal, output, error,
--           next_state, reason, lease_token, worker_id, started_at_us, inline_worker], ...]
-- The attempt's one row, written as it ends (schema 0008), unless its occurrence row
-- keeps it (schema 0013: finish_occurrences; the engine's _kept_on_occurrence); a
-- 'running' row written before 0008 is completed in place.
-- ("WHERE true" keeps the parser from reading ON CONFLICT as a join constraint.)
INSERT INTO attempts AS a (occurrence_id, attempt, lease_token, worker_id, started_at, finished_at,
                           outcome, exit_code, signal, output, error)
SELECT json_extract(c.value, '$[0]'), json_extract(c.value, '$[1]'), json_extract(c.value, '$[9]'),
       json_extract(c.value, '$[10]'), json_extract(c.value, '$[11]'), :now,
       json_extract(c.value, '$[2]'), json_extract(c.value, '$[3]'), json_extract(c.value, '$[4]'),
       json_extract(c.value, '$[5]'), json_extract(c.value, '$[6]')
FROM json_each(:rows) AS c WHERE true
ON CONFLICT (occurrence_id, attempt) DO UPDATE
SET finished_at = excluded.finished_at, outcome = excluded.outcome, exit_code = excluded.exit_code,
    signal = excluded.signal, output = excluded.output, error = excluded.error
WHERE a.outcome = :attempt_running;

-- name: finish_by_index
-- PostgreSQL's finish plans key probes only for its transaction (no sequential scan,
-- hash or merge join; see there): SQLite looks the rows up by the keys its WHEREs name.
SELECT 1;

-- name: finish_occurrences
-- :rows as finish_attempts'; inline_attempt_worker is the worker of an attempt whose
-- record is this row (schema 0013), NULL for the others.
UPDATE occurrences
SET state = json_extract(c.value, '$[7]'),
    finished_at = CASE WHEN json_extract(c.value, '$[7]') = :retry_wait THEN NULL ELSE :now END,
    exit_code = json_extract(c.value, '$[3]'),
    last_error = json_extract(c.value, '$[6]'),
    reason = json_extract(c.value, '$[8]'),
    inline_attempt_worker = json_extract(c.value, '$[12]')
FROM json_each(:rows) AS c
WHERE occurrences.id = json_extract(c.value, '$[0]') AND occurrences.state = :running;

-- name: dispatch_delete
DELETE FROM dispatch WHERE id IN (SELECT value FROM json_each(:ids));

-- name: dispatch_retry
-- :rows = [[dispatch_id, visible_at_us], ...]
UPDATE dispatch SET lease_token = NULL, lease_until = NULL, worker_id = NULL, leased_at = NULL,
                    visible_at = json_extract(c.value, '$[1]')
FROM json_each(:rows) AS c
WHERE dispatch.id = json_extract(c.value, '$[0]');

-- name: dispatch_unlease
-- visible_at NULL keeps the row's visible_at.
UPDATE dispatch SET lease_token = NULL, lease_until = NULL, worker_id = NULL, leased_at = NULL,
                    visible_at = coalesce(:visible_at, visible_at)
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: release_attempts
-- :keys = [[occurrence_id, attempt], ...]. Only a 'running' row written before schema
-- 0008 can be there.
DELETE FROM attempts WHERE (occurrence_id, attempt) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:keys));

-- name: release_occurrences
UPDATE occurrences
SET attempts = attempts - 1,
    state = CASE WHEN attempts - 1 = 0 THEN :fresh ELSE :again END,
    started_at = CASE WHEN attempts - 1 = 0 THEN NULL ELSE started_at END
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = :running;

-- ------------------------------------------------------------------ leader

-- name: reap_by_index
-- PostgreSQL's reaper turns sequential scans off for its transaction (see there): SQLite's
-- planner has no row estimate to mislead here (it takes the index its WHERE names).
SELECT 1;

-- name: reap_pick
-- The leased rows through dispatch_lease_token, all of them (schema 0010 dropped the
-- lease_until index, one entry fewer per claim).
SELECT d.id, d.occurrence_id, o.attempts, o.max_attempts, d.tenant, d.lease_token, d.worker_id,
       coalesce(d.leased_at, o.started_at)
FROM dispatch AS d JOIN occurrences AS o ON o.id = d.occurrence_id
WHERE d.lease_token IS NOT NULL AND d.lease_until < :now
ORDER BY d.lease_until, d.id LIMIT :limit;

-- name: reap_attempts
-- :keys = [[occurrence_id, attempt, lease_token, worker_id, started_at_us], ...]: the
-- lost attempt's one row (see finish_attempts).
INSERT INTO attempts AS a (occurrence_id, attempt, lease_token, worker_id, started_at, finished_at,
                           outcome, error)
SELECT json_extract(k.value, '$[0]'), json_extract(k.value, '$[1]'), json_extract(k.value, '$[2]'),
       coalesce(json_extract(k.value, '$[3]'), ''), coalesce(json_extract(k.value, '$[4]'), :now),
       :now, :attempt_lost, :error
FROM json_each(:keys) AS k WHERE true
ON CONFLICT (occurrence_id, attempt) DO UPDATE
SET outcome = :attempt_lost, finished_at = excluded.finished_at, error = excluded.error
WHERE a.outcome = :attempt_running;

-- name: reap_retry
UPDATE occurrences SET state = :next
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = :expected;

-- name: reap_dead
UPDATE occurrences
SET state = :next, finished_at = :now,
    reason = replace(replace(:reason, '{attempt}', attempts), '{max_attempts}', max_attempts)
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = :expected;

-- name: prune
-- Terminal occurrences both due and finished before :before (the port says why both).
-- Attempts, outbox and dispatch rows go with their occurrence (ON DELETE CASCADE).
DELETE FROM occurrences WHERE id IN (
    SELECT id FROM occurrences
    WHERE finished_at < :before AND scheduled_for < :before
      AND state IN ('SUCCEEDED', 'DEAD', 'MISSED', 'SKIPPED_OVERLAP', 'CANCELED')
    ORDER BY finished_at LIMIT :limit);

-- ------------------------------------------------------------------ health

-- name: write_probe
-- /healthz's write (Store.probe_write): the header's user_version (clockd keeps it 0 and
-- reads it nowhere) set again. SQLite writes the header page for it every time — a WAL
-- frame and a commit on the store's disk — which fails on a disk turned read-only as any
-- write would. (A row set to its own value would not do: SQLite skips writing a cell
-- that does not change, so such a probe succeeded on a read-only disk.)
PRAGMA user_version = 0;

-- ------------------------------------------------------------------ the queue's upkeep

-- name: queue_vacuum_allowed
-- SQLite has no roles: whoever can write the file may.
SELECT 1;

-- name: queue_vacuum
-- Nothing to reclaim: SQLite removes a deleted row and its index entries in place (no
-- row versions), and the file's free pages are reused by the next inserts.
SELECT 1;

-- name: stale_statistics_analyze
-- Nothing: the embedded store's statistics are PRAGMA optimize's, run as it closes
-- (SqliteStore._close), not kept up at the leader's tick.
SELECT 1;

-- ------------------------------------------------------------------ observation

-- name: backlog
-- As PostgreSQL's: due schedules, the outbox, the rows leased.
SELECT (SELECT count(*) FROM schedules WHERE state = 'active' AND next_run_at <= :now),
       (SELECT count(*) FROM outbox),
       (SELECT count(*) FROM dispatch WHERE lease_token IS NOT NULL);

-- name: queue_ready
-- As PostgreSQL's: per queue with an unleased row, the rows claimable now and the oldest
-- (the embedded queue is small: one pass over its unleased rows).
SELECT queue,
       sum(CASE WHEN visible_at <= :now THEN 1 ELSE 0 END),
       min(CASE WHEN visible_at <= :now THEN visible_at END)
FROM dispatch WHERE lease_token IS NULL
GROUP BY queue ORDER BY queue;

-- ================================================================== policies (schema 0002)
-- Misfire, overlap, tenant limits, idempotent create, dead letters. DESIGN.md §4.

-- ------------------------------------------------------------------ idempotent create, quotas

-- name: schedule_set_idempotency_key
-- Unique per tenant among live schedules (schedules_idempotency): a duplicate raises.
UPDATE schedules SET idempotency_key = :key WHERE id = :id;

-- name: schedule_get_by_idempotency_key
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE tenant = :tenant AND idempotency_key = :key AND state != 'deleted';

-- name: tenant_limits_lock
-- A create's quota check, step 1: the tenant's schedule cap. PostgreSQL locks the row
-- until the create commits, so concurrent creates of one tenant count one at a time
-- (SQLite: the write lock already serializes them).
SELECT max_schedules FROM tenant_limits WHERE tenant = :tenant AND max_schedules IS NOT NULL;

-- name: tenant_schedules_count
-- Step 2: the tenant's live schedules (an index range of schedules_live_name).
SELECT count(*) FROM schedules WHERE tenant = :tenant AND state != 'deleted';

-- name: tenant_limits_lock_many
-- apply_schedules' quota check, step 1, for every tenant of a batch at once
-- (:tenants = JSON array); no lock needed, as tenant_limits_lock.
SELECT tenant, max_schedules FROM tenant_limits
WHERE tenant IN (SELECT value FROM json_each(:tenants)) AND max_schedules IS NOT NULL
ORDER BY tenant;

-- name: tenant_schedules_count_many
-- Step 2: the live schedules of each of those tenants.
SELECT tenant, count(*) FROM schedules
WHERE tenant IN (SELECT value FROM json_each(:tenants)) AND state != 'deleted'
GROUP BY tenant;

-- ------------------------------------------------------------------ tenant limits

-- name: tenant_limits_upsert
INSERT INTO tenant_limits (tenant, max_schedules, max_running, max_triggers_per_minute,
                           catch_up_rate, updated_at)
VALUES (:tenant, :max_schedules, :max_running, :max_triggers_per_minute, :catch_up_rate, :now)
ON CONFLICT (tenant) DO UPDATE
SET max_schedules = excluded.max_schedules, max_running = excluded.max_running,
    max_triggers_per_minute = excluded.max_triggers_per_minute,
    catch_up_rate = excluded.catch_up_rate, updated_at = excluded.updated_at;

-- name: tenant_running_recount
-- After tenant_limits_upsert (whose row lock keeps claims of the tenant out meanwhile):
-- the running count from the queue itself.
UPDATE tenant_limits
SET running = (SELECT count(*) FROM dispatch WHERE tenant = :tenant AND lease_token IS NOT NULL)
WHERE tenant = :tenant;

-- name: tenant_limits_all
SELECT tenant, max_schedules, max_running, max_triggers_per_minute, catch_up_rate
FROM tenant_limits ORDER BY tenant;

-- name: tenant_usage
-- Every tenant that has live schedules (a skip scan of schedules_live_name) or limits,
-- with its limits and what it uses.
WITH RECURSIVE named(tenant) AS (
    SELECT (SELECT tenant FROM schedules WHERE state != 'deleted' ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT s.tenant FROM schedules AS s
            WHERE s.state != 'deleted' AND s.tenant > named.tenant ORDER BY s.tenant LIMIT 1)
    FROM named WHERE named.tenant IS NOT NULL
), tenants(tenant) AS (
    SELECT tenant FROM named WHERE tenant IS NOT NULL
    UNION
    SELECT tenant FROM tenant_limits
)
SELECT t.tenant, l.max_schedules, l.max_running, l.max_triggers_per_minute, l.catch_up_rate,
       (SELECT count(*) FROM schedules AS s WHERE s.tenant = t.tenant AND s.state != 'deleted'),
       (SELECT count(*) FROM dispatch AS d WHERE d.tenant = t.tenant AND d.lease_token IS NOT NULL)
FROM tenants AS t LEFT JOIN tenant_limits AS l ON l.tenant = t.tenant
ORDER BY t.tenant;

-- name: tenant_claims_count
-- :counts = [[tenant, n], ...]: claims just leased. A capped tenant's running count and
-- this minute's claim count go up (the window restarts when :minute moved on).
UPDATE tenant_limits
SET running = running + json_extract(c.value, '$[1]'),
    window_claims = CASE WHEN window_start = :minute THEN window_claims ELSE 0 END
                    + json_extract(c.value, '$[1]'),
    window_start = :minute
FROM json_each(:counts) AS c
WHERE tenant_limits.tenant = json_extract(c.value, '$[0]')
  AND (tenant_limits.max_running IS NOT NULL OR tenant_limits.max_triggers_per_minute IS NOT NULL);

-- name: tenant_running_release
-- :tenants = one entry per claim that ends or is given back (finish, release, reap): a
-- capped tenant's running count goes down.
UPDATE tenant_limits SET running = max(0, running - c.n)
FROM (SELECT value AS tenant, count(*) AS n FROM json_each(:tenants) GROUP BY value) AS c
WHERE tenant_limits.tenant = c.tenant
  AND (tenant_limits.max_running IS NOT NULL OR tenant_limits.max_triggers_per_minute IS NOT NULL);

-- ------------------------------------------------------------------ claim: fairness and overlap
-- The claim (SqliteStore.claim; PostgreSQL: the claim_lease chain) picks rows two ways
-- per queue: claim_tenants + claim_pick_fair (a share of each tenant's oldest rows, so a
-- tenant's burst cannot hide another tenant's row behind it) and claim_pick (the oldest
-- rows, so one busy tenant still gets a full batch). claim_judge then decides each
-- picked row; the statements after it write the decisions.

-- name: claim_tenants
-- The tenants with unleased rows in :queue: a skip scan of dispatch_ready_tenant (one
-- index probe per tenant), however long any tenant's backlog is.
WITH RECURSIVE t(tenant) AS (
    SELECT (SELECT tenant FROM dispatch
            WHERE lease_token IS NULL AND queue = :queue ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT d.tenant FROM dispatch AS d
            WHERE d.lease_token IS NULL AND d.queue = :queue AND d.tenant > t.tenant
            ORDER BY d.tenant LIMIT 1)
    FROM t WHERE t.tenant IS NOT NULL
)
SELECT tenant FROM t WHERE tenant IS NOT NULL;

-- name: claim_pick_fair
-- Up to :share of the oldest visible rows of each tenant of :tenants in :queue, one
-- ordered probe of dispatch_ready_tenant per tenant.
SELECT d.visible_at, d.id, d.occurrence_id
FROM json_each(:tenants) AS t
JOIN dispatch AS d ON d.id IN (
    SELECT x.id FROM dispatch AS x
    WHERE x.lease_token IS NULL AND x.queue = :queue AND x.tenant = t.value
      AND x.visible_at <= :now
      AND EXISTS (SELECT 1 FROM occurrences AS o
                  WHERE o.id = x.occurrence_id AND o.state IN (SELECT value FROM json_each(:claimable)))
    ORDER BY x.visible_at, x.id LIMIT :share);

-- name: overlap_slots_ensure
-- The overlap slot of every schedule among these dispatch rows whose policy is not
-- `allow` (PostgreSQL writes it with the schedule: schedule_insert, schedule_update).
-- The policy as claim_judge reads it: the occurrence's (schema 0018), else the schedule's.
INSERT INTO overlap_slots (schedule_id)
SELECT DISTINCT o.schedule_id
FROM dispatch AS d
JOIN occurrences AS o ON o.id = d.occurrence_id
JOIN schedules AS s ON s.id = o.schedule_id
WHERE d.id IN (SELECT value FROM json_each(:ids))
  AND coalesce(o.overlap, json_extract(s.spec, '$.overlap')) IN ('skip', 'queue_one')
ON CONFLICT (schedule_id) DO NOTHING;

-- name: claim_judge
-- The decision for each picked row (:picked = dispatch ids), one row each:
--   start - lease it: within its tenant's room (tenant_limits) and :limit, taken in
--           round-robin order across tenants (the n-th row of every tenant before the
--           n+1-th of any);
--   skip  - its schedule (overlap skip, or queue_one with one already waiting) has an
--           occurrence running: SKIPPED_OVERLAP, the reason names the running one;
--   park  - queue_one: the one occurrence that waits for the running one (it leaves the
--           queue, still ENQUEUED, as the slot's waiter; overlap_release puts it back).
-- Rows not returned stay queued as they are: over a cap or :limit, or their schedule's
-- slot is held by another claimer (PostgreSQL) or has a waiter whose holder ended (the
-- leader's overlap repair lets that waiter go first).
-- A slot's holder counts while it has not ended (a RETRY_WAIT holder keeps the slot and
-- may start again); a waiter while it is still queued.
WITH cand AS (
    -- The overlap policy from the occurrence row (schema 0018), else (a row written
    -- before) from the schedule's spec, as PostgreSQL's claim_lease reads it.
    SELECT d.id, d.occurrence_id, d.tenant, d.visible_at, o.schedule_id, o.scheduled_for,
           coalesce(o.overlap,
                    (SELECT json_extract(s.spec, '$.overlap') FROM schedules AS s WHERE s.id = o.schedule_id),
                    :default_overlap) AS overlap
    FROM dispatch AS d
    JOIN occurrences AS o ON o.id = d.occurrence_id
    WHERE d.id IN (SELECT value FROM json_each(:picked)) AND d.lease_token IS NULL
      AND o.state IN (SELECT value FROM json_each(:claimable))
), slot AS (
    SELECT g.schedule_id,
           CASE WHEN r.state IN ('RUNNING', 'ENQUEUED', 'RETRY_WAIT') THEN g.running_id END AS holder,
           CASE WHEN w.state IN ('ENQUEUED', 'RETRY_WAIT') THEN g.waiting_id END AS waiter
    FROM overlap_slots AS g
    LEFT JOIN occurrences AS r ON r.id = g.running_id
    LEFT JOIN occurrences AS w ON w.id = g.waiting_id
    WHERE g.schedule_id IN (SELECT schedule_id FROM cand WHERE overlap != 'allow')
), heads AS (
    SELECT c.*, sl.holder, sl.waiter, sl.schedule_id IS NOT NULL AS slotted,
           row_number() OVER (PARTITION BY c.schedule_id
                              ORDER BY CASE WHEN c.occurrence_id = sl.holder THEN 0 ELSE 1 END,
                                       c.scheduled_for, c.id) AS srank
    FROM cand AS c LEFT JOIN slot AS sl ON sl.schedule_id = c.schedule_id AND c.overlap != 'allow'
), eligible AS (
    SELECT h.*, row_number() OVER (PARTITION BY h.tenant ORDER BY h.visible_at, h.id) AS trank
    FROM heads AS h
    WHERE h.overlap = 'allow'
       OR (h.slotted AND h.srank = 1
           AND (h.occurrence_id = h.holder OR (h.holder IS NULL AND h.waiter IS NULL)))
), room AS (
    SELECT l.tenant,
           min(coalesce(l.max_running - l.running, 1000000000),
               coalesce(l.max_triggers_per_minute
                        - CASE WHEN l.window_start = :minute THEN l.window_claims ELSE 0 END,
                        1000000000)) AS n
    FROM tenant_limits AS l
    WHERE l.tenant IN (SELECT tenant FROM cand)
      AND (l.max_running IS NOT NULL OR l.max_triggers_per_minute IS NOT NULL)
), starters AS (
    SELECT e.* FROM eligible AS e LEFT JOIN room AS r ON r.tenant = e.tenant
    WHERE r.tenant IS NULL OR e.trank <= r.n
    ORDER BY e.trank, e.visible_at, e.id LIMIT :limit
), busy AS (
    SELECT schedule_id, holder AS running_id FROM heads WHERE slotted AND holder IS NOT NULL
    UNION
    SELECT schedule_id, occurrence_id FROM starters WHERE overlap != 'allow'
), losers AS (
    SELECT h.id, h.occurrence_id, h.tenant, h.schedule_id, h.overlap, h.waiter, b.running_id,
           row_number() OVER w AS lrank, first_value(h.occurrence_id) OVER w AS first_loser
    FROM heads AS h JOIN busy AS b ON b.schedule_id = h.schedule_id
    WHERE h.slotted AND h.occurrence_id != b.running_id AND h.id NOT IN (SELECT id FROM starters)
    WINDOW w AS (PARTITION BY h.schedule_id ORDER BY h.scheduled_for, h.id)
)
SELECT 'start' AS action, id, occurrence_id, tenant, schedule_id, overlap, NULL AS reason,
       trank, visible_at
FROM starters
UNION ALL
SELECT CASE WHEN overlap = 'queue_one' AND lrank = 1 AND waiter IS NULL THEN 'park' ELSE 'skip' END,
       id, occurrence_id, tenant, schedule_id, overlap,
       CASE WHEN overlap = 'queue_one' AND lrank = 1 AND waiter IS NULL
            THEN replace(:overlap_parked, '{running}', running_id)
            WHEN overlap = 'queue_one'
            THEN replace(replace(:overlap_queue_full, '{running}', running_id),
                         '{waiting}', coalesce(waiter, first_loser))
            ELSE replace(:overlap_skipped, '{running}', running_id) END,
       NULL, NULL
FROM losers
ORDER BY 8, 9, 2;

-- name: claim_losers
-- :rows = [[occurrence_id, action, reason], ...] from claim_judge: `skip` ends the
-- occurrence SKIPPED_OVERLAP, `park` only notes why it waits.
UPDATE occurrences
SET state = CASE WHEN json_extract(c.value, '$[1]') = 'skip' THEN :skipped_state ELSE state END,
    finished_at = CASE WHEN json_extract(c.value, '$[1]') = 'skip' THEN :now ELSE finished_at END,
    reason = json_extract(c.value, '$[2]')
FROM json_each(:rows) AS c
WHERE occurrences.id = json_extract(c.value, '$[0]')
  AND occurrences.state IN (SELECT value FROM json_each(:claimable));

-- name: overlap_slots_take
-- :rows = [[schedule_id, running_id|null, waiting_id|null], ...]: the claim's starts and
-- parks (one row per schedule); null keeps what is there.
UPDATE overlap_slots
SET running_id = coalesce(json_extract(c.value, '$[1]'), running_id),
    waiting_id = coalesce(json_extract(c.value, '$[2]'), waiting_id)
FROM json_each(:rows) AS c
WHERE overlap_slots.schedule_id = json_extract(c.value, '$[0]');

-- name: overlap_unpark
-- Step 1 of overlap_release: the waiters of the slots held by these ended occurrences
-- go back into the queue, claimable now (a waiter has no queue row while it waits).
INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at, overlap)
SELECT o.id, o.queue, o.tenant, :now, o.overlap
FROM overlap_slots AS g JOIN occurrences AS o ON o.id = g.waiting_id
WHERE g.running_id IN (SELECT value FROM json_each(:ids))
  AND o.state IN ('ENQUEUED', 'RETRY_WAIT')
ON CONFLICT (occurrence_id) DO NOTHING;

-- name: overlap_release
-- The slots held by these ended occurrences (SUCCEEDED, DEAD, MISSED, …) pass to their
-- waiter, or become free.
UPDATE overlap_slots
SET running_id = (SELECT o.id FROM occurrences AS o
                  WHERE o.id = overlap_slots.waiting_id AND o.state IN ('ENQUEUED', 'RETRY_WAIT')),
    waiting_id = NULL
WHERE running_id IN (SELECT value FROM json_each(:ids));

-- ------------------------------------------------------------------ leader: misfire sweep

-- name: misfire_pick
-- Queued rows (ENQUEUED / RETRY_WAIT, not run-now) claimable for longer than their
-- schedule's max_lateness. The oldest :limit waiting rows of each queue (older than
-- :floor) name the schedules to look at; then every late row of those schedules comes
-- back with what the misfire policy needs (clockd.core.planning.sweep_verdict): its rank
-- from the latest late row of its schedule (1 = latest) and whether a newer instant of
-- the schedule is already due and not missed.
WITH RECURSIVE queues(queue) AS (
    SELECT (SELECT queue FROM dispatch WHERE lease_token IS NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT d.queue FROM dispatch AS d
            WHERE d.lease_token IS NULL AND d.queue > queues.queue ORDER BY d.queue LIMIT 1)
    FROM queues WHERE queues.queue IS NOT NULL
), scanned AS (
    SELECT d.id FROM queues AS q
    JOIN dispatch AS d ON d.id IN (
        SELECT x.id FROM dispatch AS x
        WHERE x.lease_token IS NULL AND x.queue = q.queue AND x.visible_at < :now - :floor
        ORDER BY x.visible_at, x.id LIMIT :limit)
), late_schedules AS (
    SELECT DISTINCT o.schedule_id
    FROM dispatch AS d
    JOIN occurrences AS o ON o.id = d.occurrence_id
    JOIN schedules AS s ON s.id = o.schedule_id
    WHERE d.id IN (SELECT id FROM scanned) AND o.state IN ('ENQUEUED', 'RETRY_WAIT') AND o.manual = 0
      AND d.visible_at < :now - coalesce(json_extract(s.spec, '$.max_lateness_us'), :default_max_lateness_us)
), late AS (
    SELECT d.id AS dispatch_id, o.id, o.schedule_id, o.scheduled_for, d.visible_at,
           coalesce(json_extract(s.spec, '$.misfire'), :default_misfire) AS misfire,
           coalesce(json_extract(s.spec, '$.max_lateness_us'), :default_max_lateness_us) AS max_lateness_us,
           coalesce(json_extract(s.spec, '$.catch_up_limit'), :default_catch_up_limit) AS catch_up_limit
    FROM occurrences AS o
    JOIN dispatch AS d ON d.occurrence_id = o.id
    JOIN schedules AS s ON s.id = o.schedule_id
    WHERE o.schedule_id IN (SELECT schedule_id FROM late_schedules)
      AND o.state IN ('ENQUEUED', 'RETRY_WAIT') AND o.manual = 0 AND d.lease_token IS NULL
      AND d.visible_at < :now - coalesce(json_extract(s.spec, '$.max_lateness_us'), :default_max_lateness_us)
)
SELECT late.dispatch_id, late.id, late.visible_at, late.misfire, late.max_lateness_us,
       late.catch_up_limit,
       row_number() OVER (PARTITION BY late.schedule_id
                          ORDER BY late.scheduled_for DESC, late.id DESC) AS newest,
       EXISTS (SELECT 1 FROM occurrences AS n
               WHERE n.schedule_id = late.schedule_id AND n.manual = 0
                 AND n.scheduled_for > late.scheduled_for AND n.scheduled_for <= :now
                 AND n.state NOT IN ('MISSED', 'CANCELED', 'SKIPPED_OVERLAP')) AS newer_due
FROM late;

-- name: misfire_mark
-- :rows = [[occurrence_id, reason], ...]: MISSED, if still queued.
UPDATE occurrences SET state = :next, finished_at = :now, reason = json_extract(c.value, '$[1]')
FROM json_each(:rows) AS c
WHERE occurrences.id = json_extract(c.value, '$[0]')
  AND occurrences.state IN (SELECT value FROM json_each(:expected));

-- name: overlap_stale
-- Slots whose holder ended without releasing them (canceled or missed while it waited
-- to retry), for overlap_release.
SELECT g.running_id
FROM overlap_slots AS g LEFT JOIN occurrences AS o ON o.id = g.running_id
WHERE g.running_id IS NOT NULL
  AND (o.id IS NULL OR o.state IN ('SUCCEEDED', 'DEAD', 'MISSED', 'SKIPPED_OVERLAP', 'CANCELED'))
LIMIT :limit;

-- ------------------------------------------------------------------ occurrences: running, dead letters

-- name: occurrences_running
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.schedule_id = :schedule_id AND o.state = 'RUNNING'
ORDER BY o.scheduled_for, o.id;

-- name: dlq_list
-- DEAD occurrences, the most recently dead first (occurrences_dead), with their last error;
-- a page after another: keyset on (finished_at, id), the last row of the page before.
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason, o.last_error
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.state = 'DEAD' AND (:tenant IS NULL OR o.tenant = :tenant)
  AND (:before_at IS NULL OR o.finished_at < :before_at OR (o.finished_at = :before_at AND o.id < :before_id))
ORDER BY o.finished_at DESC, o.id DESC LIMIT :limit;

-- name: dlq_list_by_schedule
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason, o.last_error
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.schedule_id = :schedule_id AND o.state = 'DEAD'
  AND (:before_at IS NULL OR o.finished_at < :before_at OR (o.finished_at = :before_at AND o.id < :before_id))
ORDER BY o.finished_at DESC, o.id DESC LIMIT :limit;

-- name: dlq_replay
-- A DEAD occurrence back to the queue, same id, allowed one attempt more than it has
-- had (the claim numbers it attempts + 1). last_error stays until that attempt ends.
UPDATE occurrences
SET state = :next, max_attempts = attempts + 1, finished_at = NULL, enqueued_at = :now,
    reason = :reason
WHERE id = :id AND state = :expected
RETURNING id;

-- name: dlq_dispatch
INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at, overlap)
SELECT id, queue, tenant, :now, overlap FROM occurrences WHERE id = :id AND state = :next
ON CONFLICT (occurrence_id) DO NOTHING;

-- name: dlq_drop
-- Dropped from the dead-letter queue: CANCELED with the reason, history (attempts,
-- last_error) kept until retention prunes it.
UPDATE occurrences SET state = :next, finished_at = :now, reason = :reason
WHERE id = :id AND state = :expected
RETURNING id;

-- ================================================================== operator read paths
-- clockctl reconcile / explain / status and the leader's samples. Reads only; the
-- PostgreSQL store has the same names.

-- name: reconcile_versions
-- Every version of the schedules that matter for [:start, :end]: one with a version in
-- force during the range (a deletion before :start does not count), or with a planned
-- occurrence in it. Each line carries the schedule's current row (cursor, anchor).
SELECT s.id, s.tenant, s.name, s.state, s.version, s.next_run_at, s.created_at,
       v.version, v.state, v.valid_from, v.valid_to, v.definition, v.next_run_at
FROM schedule_versions AS v JOIN schedules AS s ON s.id = v.schedule_id
WHERE v.schedule_id IN (
    SELECT schedule_id FROM schedule_versions
    WHERE valid_from <= :end AND (valid_to IS NULL OR valid_to >= :start)
      AND NOT (state = 'deleted' AND valid_from < :start)
    UNION
    SELECT schedule_id FROM occurrences
    WHERE scheduled_for >= :start AND scheduled_for <= :end AND manual = 0)
ORDER BY v.schedule_id, v.version;

-- name: reconcile_versions_of
SELECT s.id, s.tenant, s.name, s.state, s.version, s.next_run_at, s.created_at,
       v.version, v.state, v.valid_from, v.valid_to, v.definition, v.next_run_at
FROM schedule_versions AS v JOIN schedules AS s ON s.id = v.schedule_id
WHERE v.schedule_id = :schedule_id
ORDER BY v.version;

-- name: reconcile_occurrences
-- Planned occurrences due in [:start, :end], any state (occurrences_recent).
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason, o.last_error
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.scheduled_for >= :start AND o.scheduled_for <= :end AND o.manual = 0;

-- name: reconcile_occurrences_of
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason, o.last_error
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.schedule_id = :schedule_id AND o.scheduled_for >= :start AND o.scheduled_for <= :end
  AND o.manual = 0;

-- name: next_visible
-- When the asked queues' next unleased row becomes visible (the earliest visible_at after
-- :now; NULL: none staged): an idle worker sleeps until then rather than a whole poll.
-- dispatch_ready's first entry past :now in each queue (:queues = JSON array).
SELECT min((SELECT d.visible_at FROM dispatch AS d
            WHERE d.queue = q.value AND d.lease_token IS NULL AND d.visible_at > :now
            ORDER BY d.visible_at LIMIT 1))
FROM json_each(:queues) AS q;

-- name: queue_upcoming_definitions
-- The definitions (schedule_id, version) of the asked queues' unleased rows after the
-- position (:after_at, :after_id) in queue order (visible_at, id), the first :limit of
-- them with their positions (:queues = JSON array): what an idle worker reads into its
-- claim cache ahead of a burst (Store.read_ahead_definitions). dispatch_ready (its rowid
-- is the id) from the position, one probe of each row's occurrence.
SELECT d.visible_at, d.id, o.schedule_id, o.schedule_version
FROM json_each(:queues) AS q
JOIN dispatch AS d ON d.queue = q.value AND d.lease_token IS NULL
                  AND (d.visible_at, d.id) > (:after_at, :after_id)
JOIN occurrences AS o ON o.id = d.occurrence_id
ORDER BY d.visible_at, d.id
LIMIT :limit;

-- name: queue_stats
-- The queue per queue name. `staged` includes rows waiting out a retry backoff and
-- queue_one's parked waiter.
SELECT queue,
       sum(CASE WHEN lease_token IS NULL AND visible_at <= :now THEN 1 ELSE 0 END),
       sum(CASE WHEN lease_token IS NOT NULL THEN 1 ELSE 0 END),
       sum(CASE WHEN lease_token IS NULL AND visible_at > :now THEN 1 ELSE 0 END),
       min(CASE WHEN lease_token IS NULL AND visible_at <= :now THEN visible_at END)
FROM dispatch GROUP BY queue ORDER BY queue;

-- name: start_lag
-- Lag (µs) from due to the first attempt's start of the occurrences due in
-- [:since, :now] (found through occurrences_recent: available_at is at most the 5-minute
-- window after scheduled_for); one still waiting counts with its lag so far. SQLite has
-- no percentile function: for each rank p the two neighbouring values (offsets
-- floor((n-1)p) and the next one) come back, and the store interpolates between them
-- as PostgreSQL's percentile_cont does.
WITH w AS MATERIALIZED (
    SELECT coalesce(started_at, :now) - available_at AS lag FROM occurrences
    WHERE scheduled_for >= :since - :window AND scheduled_for <= :now
      AND available_at >= :since AND available_at <= :now
      AND (started_at IS NOT NULL OR state IN ('SCHEDULED', 'ENQUEUED'))
), n AS (SELECT count(*) AS c FROM w)
SELECT (SELECT c FROM n),
       (SELECT lag FROM w ORDER BY lag LIMIT 1 OFFSET (SELECT (c - 1) * 50 / 100 FROM n)),
       (SELECT lag FROM w ORDER BY lag LIMIT 1 OFFSET (SELECT min(c - 1, (c - 1) * 50 / 100 + 1) FROM n)),
       (SELECT lag FROM w ORDER BY lag LIMIT 1 OFFSET (SELECT (c - 1) * 95 / 100 FROM n)),
       (SELECT lag FROM w ORDER BY lag LIMIT 1 OFFSET (SELECT min(c - 1, (c - 1) * 95 / 100 + 1) FROM n)),
       (SELECT lag FROM w ORDER BY lag LIMIT 1 OFFSET (SELECT (c - 1) * 99 / 100 FROM n)),
       (SELECT lag FROM w ORDER BY lag LIMIT 1 OFFSET (SELECT min(c - 1, (c - 1) * 99 / 100 + 1) FROM n));

-- name: live_schedules_count
-- Schedules not deleted: the leader's reconciler checks the fleet size before loading it.
SELECT count(*) FROM schedules WHERE state <> 'deleted';

-- name: dead_count
-- The dead-letter queue's size, from the occurrences_dead partial index.
SELECT count(*) FROM occurrences WHERE state = 'DEAD';

-- name: not_run_counts
-- MISSED / SKIPPED_OVERLAP occurrences that ended in [:since, :until) (occurrences_finished),
-- by kind: never queued = misfire at materialization, queued = the leader's lateness sweep.
SELECT state,
       CASE WHEN state = 'SKIPPED_OVERLAP' THEN 'overlap'
            WHEN enqueued_at IS NULL THEN 'misfire'
            ELSE 'lateness' END AS kind,
       count(*)
FROM occurrences
WHERE finished_at >= :since AND finished_at < :until AND state IN ('MISSED', 'SKIPPED_OVERLAP')
GROUP BY state, kind;

-- ------------------------------------------------------------------ API: tokens, audit, pages (schema 0007)

-- name: api_token_insert
INSERT INTO api_tokens (id, tenant, name, role, hash, created_at, expires_at)
VALUES (:id, :tenant, :name, :role, :hash, :created_at, :expires_at);

-- name: api_token_get
SELECT id, tenant, name, role, hash, created_at, expires_at, revoked_at FROM api_tokens WHERE id = :id;

-- name: api_tokens_list
SELECT id, tenant, name, role, hash, created_at, expires_at, revoked_at FROM api_tokens
WHERE (:tenant IS NULL OR tenant = :tenant) ORDER BY tenant, name, created_at;

-- name: api_token_revoke
-- The tenant's unrevoked token with that id or name (never another tenant's).
UPDATE api_tokens SET revoked_at = :now
WHERE revoked_at IS NULL AND tenant = :tenant AND (id = :ref OR name = :ref)
RETURNING id, tenant, name, role, hash, created_at, expires_at, revoked_at;

-- name: audit_insert
INSERT INTO audit_log (at, tenant, actor, action, target, before_version, after_version, detail)
VALUES (:at, :tenant, :actor, :action, :target, :before_version, :after_version, :detail)
RETURNING id;

-- name: audit_page
-- Newest first, keyset on id (audit_log_tenant; all tenants: the primary key).
SELECT id, at, tenant, actor, action, target, before_version, after_version, detail FROM audit_log
WHERE (:tenant IS NULL OR tenant = :tenant) AND (:before IS NULL OR id < :before)
ORDER BY id DESC LIMIT :limit;

-- name: schedules_page
-- A keyset page of a tenant's live schedules by name (schedules_live_name): the scan
-- starts after the cursor and stops at LIMIT or at :upto, whatever the table holds. A name
-- prefix narrows the range itself (clockd.store.api_rows.schedule_page_params: :after is
-- at least just below the prefix, :upto just above it); the prefix test keeps it exact.
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules
WHERE tenant = :tenant AND state != 'deleted' AND name > :after AND name < :upto
  AND (:prefix IS NULL OR substr(name, 1, length(:prefix)) = :prefix)
ORDER BY name LIMIT :limit;

-- name: occurrences_page
-- A tenant's occurrences newest first, keyset on (scheduled_for, id) (occurrences_recent,
-- or occurrences_by_schedule for one schedule).
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.tenant = :tenant
  AND (:schedule_id IS NULL OR o.schedule_id = :schedule_id)
  AND (:state IS NULL OR o.state = :state)
  AND (:since IS NULL OR o.scheduled_for >= :since)
  AND (:until IS NULL OR o.scheduled_for < :until)
  AND (:before_at IS NULL OR o.scheduled_for < :before_at
       OR (o.scheduled_for = :before_at AND o.id < :before_id))
ORDER BY o.scheduled_for DESC, o.id DESC LIMIT :limit;

-- name: run_summaries
-- Per schedule of a page (clockctl list, the dashboard): the earliest start of its
-- occurrences still waiting (:waiting) among its :depth newest, and its latest occurrence
-- that started. Both walk occurrences_by_schedule (schedule_id, scheduled_for DESC).
SELECT j.value,
       (SELECT min(w.available_at) FROM (
            SELECT o.available_at, o.state FROM occurrences AS o
            WHERE o.schedule_id = j.value ORDER BY o.scheduled_for DESC LIMIT :depth) AS w
        WHERE w.state IN (SELECT value FROM json_each(:waiting))),
       l.scheduled_for, l.started_at, l.state, l.exit_code
FROM json_each(:ids) AS j
LEFT JOIN occurrences AS l ON l.id = (
    SELECT o.id FROM occurrences AS o
    WHERE o.schedule_id = j.value AND o.started_at IS NOT NULL
    ORDER BY o.scheduled_for DESC LIMIT 1);

-- ------------------------------------------------------------------ dashboard reads (issue 17)

-- name: start_lag_histogram
-- The start lags (µs) of every occurrence due at :at (occurrences_recent), as
-- start_lag counts them, in :bins equal bins from min(0, lowest) to the highest: one row
-- per non-empty bin (bin, count), each with the totals; one row of totals when none.
WITH w AS MATERIALIZED (
    SELECT coalesce(started_at, :now) - available_at AS lag FROM occurrences
    WHERE scheduled_for = :at AND (started_at IS NOT NULL OR state IN ('SCHEDULED', 'ENQUEUED'))
), r AS (SELECT count(*) AS n, min(0, coalesce(min(lag), 0)) AS low, coalesce(max(lag), 0) AS high FROM w)
SELECT r.n, r.low, r.high, b.bin, b.c
FROM r LEFT JOIN (
    SELECT min(:bins - 1, (w.lag - r.low) * :bins / max(r.high - r.low, 1)) AS bin, count(*) AS c
    FROM w, r GROUP BY bin) AS b ON 1
ORDER BY b.bin;

-- name: occurrences_set_reason
-- The reason of occurrences a change just canceled: re-planned, or dropped by the new version.
UPDATE occurrences SET reason = :reason WHERE id IN (SELECT value FROM json_each(:ids));

-- ------------------------------------------------------------------ direct dispatch (issue 18)

-- name: materialize_insert_enqueued
-- materialize_insert with direct_dispatch: SCHEDULED occurrences are written already
-- ENQUEUED (enqueued_at = :now) and get no outbox row; dispatch_insert_enqueued then
-- queues those inserted.
INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for,
                         available_at, state, max_attempts, reason, finished_at, enqueued_at, overlap)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       json_extract(value, '$[6]'),
       CASE WHEN json_extract(value, '$[7]') = :scheduled THEN :enqueued ELSE json_extract(value, '$[7]') END,
       json_extract(value, '$[8]'), json_extract(value, '$[9]'), json_extract(value, '$[10]'),
       CASE WHEN json_extract(value, '$[7]') = :scheduled THEN :now END, json_extract(value, '$[11]')
FROM json_each(:occurrences) WHERE true
ON CONFLICT DO NOTHING
RETURNING id, state;

-- name: dispatch_insert_enqueued
-- The dispatch rows relay_dispatch would write for these ENQUEUED occurrences.
INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at, overlap)
SELECT id, queue, tenant, available_at, overlap FROM occurrences
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = :enqueued
ORDER BY available_at
ON CONFLICT (occurrence_id) DO NOTHING;

-- name: occurrences_started_after
-- The latest instant at or after :after that an older version of the schedule started
-- (an attempt was made): a change's new cursor must pass it.
SELECT max(scheduled_for) FROM occurrences
WHERE schedule_id = :schedule_id AND schedule_version < :version
  AND scheduled_for >= :after AND attempts > 0 AND manual = 0;

-- name: schedule_cursor_move
UPDATE schedules SET next_run_at = :next_run_at WHERE id = :id AND version = :version;

-- ------------------------------------------------------------------ schedule search (schema 0009)

-- name: schedules_page_state
-- schedules_page for one state: the keyset walk of schedules_state_name (tenant, state,
-- name), so a state few schedules have stops at LIMIT (or at once) too. (PostgreSQL's
-- walks other indexes since schema 0020.)
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules
WHERE tenant = :tenant AND state = :state AND state != 'deleted' AND name > :after AND name < :upto
  AND (:prefix IS NULL OR substr(name, 1, length(:prefix)) = :prefix)
ORDER BY name LIMIT :limit;

-- name: schedules_page_label
-- schedules_page for one label: the keyset walk of schedule_labels' key (tenant, key,
-- value, name) joined to each schedule; a state and a prefix filter what it finds.
SELECT s.id, s.tenant, s.name, s.kind, s.expr, s.tz, s.queue, s.state, s.version, s.next_run_at,
       s.shard, s.created_at, s.updated_at, s.paused_at, s.spec
FROM schedule_labels AS l JOIN schedules AS s ON s.id = l.schedule_id
WHERE l.tenant = :tenant AND l.key = :label_key AND l.value = :label_value
  AND l.name > :after AND l.name < :upto AND s.state != 'deleted'
  AND (:state IS NULL OR s.state = :state)
  AND (:prefix IS NULL OR substr(l.name, 1, length(:prefix)) = :prefix)
ORDER BY l.name LIMIT :limit;

-- name: schedule_labels_insert
-- The labels of schedules just written: :labels = [[tenant, key, value, name,
-- schedule_id], ...] (a pair given twice is kept once).
INSERT OR IGNORE INTO schedule_labels (tenant, key, value, name, schedule_id)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]')
FROM json_each(:labels);

-- name: schedule_labels_delete
-- A changed schedule's label rows, before its new ones are written (or it is deleted):
-- those of the version it replaces (:version, the new one, - 1), by schedule_labels' key
-- from that version's definition (schema 0015: no index by schedule id).
DELETE FROM schedule_labels
WHERE (tenant, key, value, name, schedule_id) IN (
    SELECT json_extract(v.definition, '$.tenant'), json_extract(p.value, '$[0]'),
           json_extract(p.value, '$[1]'), json_extract(v.definition, '$.name'), v.schedule_id
    FROM schedule_versions AS v, json_each(v.definition, '$.labels') AS p
    WHERE v.schedule_id = :schedule_id AND v.version = :version - 1
);
