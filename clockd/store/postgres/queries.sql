-- Named statements of the PostgreSQL store (clockd.store.sql loads them).
-- The SQLite store has the same names; a parity test checks it.
--
-- Conventions: instants are timestamptz; `now` is always a parameter (never now()).
-- Parameters are psycopg's %(name)s, and every one is cast where PostgreSQL could not
-- infer its type (NULLs, empty arrays). Sets travel as one array parameter per column
-- and are read with unnest(...) (SQLite: one JSON array read with json_each), so every
-- batch is one statement instead of a round trip per row. Array parameters are sent
-- in binary (%(name)b): psycopg's text format quotes element by element, 6-20 times
-- slower for a batch of 1000.
--
-- Where SQLite needs several statements because it has no data-modifying CTEs, the
-- PostgreSQL store runs one statement chain (claim_lease, relay_dispatch). The steps
-- of such a chain keep their SQLite names below as the same step on its own: the
-- store does not call them, test_postgres_only.py prepares them against the schema so
-- they stay true, and a reader can compare the two files step by step.
--
-- Row locks: every statement that picks rows other sessions may pick at the same time
-- says so (FOR UPDATE [SKIP LOCKED]) inside `id = ANY(ARRAY(SELECT ...))`, never in
-- `id IN (SELECT ...)` (that form sometimes planned a full scan; notes/postgres.md).

-- ------------------------------------------------------------------ schema bookkeeping

-- name: schema_migrations_create
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL
);

-- name: schema_migrations_exists
SELECT 1 WHERE to_regclass('schema_migrations') IS NOT NULL;

-- name: schema_migrations_list
SELECT version, name FROM schema_migrations ORDER BY version;

-- name: schema_migration_record
INSERT INTO schema_migrations (version, name, applied_at)
VALUES (%(version)s, %(name)s, %(applied_at)s);

-- ------------------------------------------------------------------ fences and counters

-- name: fence_advance
-- Moves the fence to our token unless a larger one is stored: no row back = fenced out.
-- The row lock it takes serializes the writers of one resource (one shard), on purpose.
INSERT INTO fences (resource, token) VALUES (%(resource)s, %(token)s)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE fences.token <= EXCLUDED.token
RETURNING token;

-- name: fence_get
SELECT token FROM fences WHERE resource = %(resource)s;

-- name: counter_next
INSERT INTO counters (name, value) VALUES (%(name)s, 1)
ON CONFLICT (name) DO UPDATE SET value = counters.value + 1
RETURNING value;

-- ------------------------------------------------------------------ schedules

-- name: schedule_insert
INSERT INTO schedules (id, tenant, name, kind, expr, tz, queue, state, version, next_run_at,
                       shard, created_at, updated_at, paused_at, spec)
VALUES (%(id)s, %(tenant)s, %(name)s, %(kind)s, %(expr)s, %(tz)s, %(queue)s, 'active', 1,
        %(next_run_at)s::timestamptz, %(shard)s, %(now)s, %(now)s, NULL, %(spec)s::jsonb);

-- name: schedule_get
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE id = %(id)s;

-- name: schedule_get_by_name
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE tenant = %(tenant)s AND name = %(name)s AND state <> 'deleted';

-- name: schedules_list
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE state <> 'deleted' AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY name, tenant;

-- name: schedule_update
-- Conditional on the version the caller read: no row back = someone else changed it.
UPDATE schedules
SET tenant = %(tenant)s, name = %(name)s, kind = %(kind)s, expr = %(expr)s, tz = %(tz)s,
    queue = %(queue)s, state = %(state)s, version = version + 1,
    next_run_at = %(next_run_at)s::timestamptz, updated_at = %(now)s,
    paused_at = CASE WHEN %(state)s <> 'paused' THEN NULL
                     WHEN state = 'paused' THEN paused_at
                     ELSE %(now)s END,
    spec = %(spec)s::jsonb
WHERE id = %(id)s AND version = %(expected_version)s AND state <> 'deleted'
RETURNING id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
          created_at, updated_at, paused_at, spec;

-- name: schedule_version_insert
INSERT INTO schedule_versions (schedule_id, version, state, valid_from, valid_to, definition, reason)
VALUES (%(schedule_id)s, %(version)s, %(state)s, %(now)s, NULL, %(definition)s::jsonb, %(reason)s);

-- name: schedule_version_close
UPDATE schedule_versions SET valid_to = %(now)s
WHERE schedule_id = %(schedule_id)s AND valid_to IS NULL;

-- name: schedule_versions_list
SELECT version, valid_from, valid_to, definition, state
FROM schedule_versions WHERE schedule_id = %(schedule_id)s ORDER BY version;

-- name: schedule_definitions
-- Definitions by (schedule_id, version), for claims (immutable: safe to cache).
SELECT v.schedule_id, v.version, v.definition
FROM unnest(%(schedule_ids)b::text[], %(versions)b::integer[]) AS k(schedule_id, version)
JOIN schedule_versions AS v ON v.schedule_id = k.schedule_id AND v.version = k.version;

-- The three statements below share one predicate: unclaimed occurrences of older
-- versions (run-now ones only when the schedule is deleted). Queue rows go first. A
-- dispatch row a worker is claiming right now is locked by that claim: the DELETE
-- waits, re-reads `lease_token IS NULL`, and leaves it (the claim wins, as in SQLite
-- where the whole transactions are serialized).

-- name: cancel_outbox
DELETE FROM outbox WHERE occurrence_id IN (
    SELECT id FROM occurrences
    WHERE schedule_id = %(schedule_id)s AND schedule_version < %(version)s
      AND state IN ('SCHEDULED', 'ENQUEUED', 'RETRY_WAIT') AND (NOT manual OR %(include_manual)s));

-- name: cancel_dispatch
DELETE FROM dispatch WHERE lease_token IS NULL AND occurrence_id IN (
    SELECT id FROM occurrences
    WHERE schedule_id = %(schedule_id)s AND schedule_version < %(version)s
      AND state IN ('SCHEDULED', 'ENQUEUED', 'RETRY_WAIT') AND (NOT manual OR %(include_manual)s));

-- name: cancel_occurrences
UPDATE occurrences SET state = 'CANCELED', reason = %(reason)s, finished_at = %(now)s
WHERE schedule_id = %(schedule_id)s AND schedule_version < %(version)s
  AND state IN ('SCHEDULED', 'ENQUEUED', 'RETRY_WAIT') AND (NOT manual OR %(include_manual)s);

-- ------------------------------------------------------------------ occurrences (clockctl)

-- name: occurrence_insert_manual
INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for,
                         available_at, state, max_attempts, manual)
VALUES (%(id)s, %(schedule_id)s, %(version)s, %(tenant)s, %(queue)s, %(now)s, %(now)s,
        'SCHEDULED', %(max_attempts)s, true);

-- name: occurrence_get
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.id = %(id)s;

-- name: occurrence_by_prefix
-- A primary-key range, not LIKE: a prefix may hold LIKE's wildcards. Bytewise because
-- the id column is COLLATE "C".
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.id >= %(prefix)s AND o.id < %(prefix_end)s
ORDER BY o.id LIMIT 2;

-- name: occurrences_list
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.scheduled_for <= %(before)s
ORDER BY o.scheduled_for DESC, o.id DESC LIMIT %(limit)s;

-- name: occurrences_list_by_schedule
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.schedule_id = %(schedule_id)s AND o.scheduled_for <= %(before)s
ORDER BY o.scheduled_for DESC, o.id DESC LIMIT %(limit)s;

-- name: attempts_list
SELECT occurrence_id, attempt, lease_token, worker_id, started_at, outcome, finished_at,
       exit_code, signal, output, error
FROM attempts WHERE occurrence_id = %(occurrence_id)s ORDER BY attempt;

-- ------------------------------------------------------------------ materializer

-- name: due_schedules
-- One ordered index scan per shard (schedules_due), merged: `shard = ANY(...)` with
-- ORDER BY next_run_at would read every due row of every shard and sort them.
SELECT s.id, s.tenant, s.name, s.kind, s.expr, s.tz, s.queue, s.state, s.version,
       s.next_run_at, s.shard, s.created_at, s.updated_at, s.paused_at, s.spec
FROM unnest(%(shards)b::integer[]) AS k(shard)
CROSS JOIN LATERAL (
    SELECT * FROM schedules
    WHERE schedules.state = 'active' AND schedules.shard = k.shard
      AND schedules.next_run_at <= %(until)s
    ORDER BY schedules.next_run_at, schedules.id LIMIT %(limit)s
) AS s
ORDER BY s.next_run_at, s.id LIMIT %(limit)s;

-- name: materialize_advance
-- Moves a cursor only if the schedule is still active at that version with that cursor.
UPDATE schedules AS s SET next_run_at = c.next_run_at
FROM unnest(%(ids)b::text[], %(versions)b::integer[], %(expected)b::timestamptz[],
            %(next_run_at)b::timestamptz[]) AS c(id, version, expected, next_run_at)
WHERE s.id = c.id AND s.version = c.version AND s.state = 'active'
  AND s.next_run_at IS NOT DISTINCT FROM c.expected
RETURNING s.id, s.version;

-- name: materialize_insert
-- Inserts the occurrences (an existing id or planned instant is skipped) and, in the
-- same statement, an outbox row for each inserted SCHEDULED one (outbox_insert's job in
-- SQLite, which cannot chain an INSERT on another's RETURNING).
WITH inserted AS (
    INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for,
                             available_at, state, max_attempts, reason, finished_at)
    SELECT * FROM unnest(%(ids)b::text[], %(schedule_ids)b::text[], %(versions)b::integer[],
                         %(tenants)b::text[], %(queues)b::text[], %(scheduled_for)b::timestamptz[],
                         %(available_at)b::timestamptz[], %(states)b::text[],
                         %(max_attempts)b::integer[], %(reasons)b::text[],
                         %(finished_at)b::timestamptz[])
    ON CONFLICT DO NOTHING
    RETURNING id, state, queue, tenant, available_at
), queued AS (
    INSERT INTO outbox (occurrence_id, queue, tenant, available_at)
    SELECT id, queue, tenant, available_at FROM inserted WHERE state = 'SCHEDULED'
    ORDER BY available_at
    ON CONFLICT (occurrence_id) DO NOTHING
)
SELECT id, state FROM inserted;

-- name: outbox_insert
INSERT INTO outbox (occurrence_id, queue, tenant, available_at)
SELECT id, queue, tenant, available_at FROM occurrences
WHERE id = ANY(%(ids)b::text[]) AND state = 'SCHEDULED'
ON CONFLICT (occurrence_id) DO NOTHING;

-- ------------------------------------------------------------------ relay

-- name: relay_take
-- Step 1 of relay_dispatch on its own (not called by the store).
DELETE FROM outbox WHERE id = ANY(ARRAY(
    SELECT id FROM outbox WHERE available_at <= %(until)s
    ORDER BY available_at, id LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
RETURNING occurrence_id;

-- name: relay_enqueue
-- Step 2 of relay_dispatch on its own (not called by the store).
UPDATE occurrences SET state = 'ENQUEUED', enqueued_at = %(now)s
WHERE id = ANY(%(ids)b::text[]) AND state = 'SCHEDULED'
RETURNING id;

-- name: relay_dispatch
-- The relay, one statement: take up to :limit outbox rows due by :until (rows another
-- relay holds are skipped), mark their still-SCHEDULED occurrences ENQUEUED, and queue
-- those (visible_at = available_at). Idempotent by occurrence id. The row count is the
-- number of dispatch rows written.
WITH taken AS (
    DELETE FROM outbox WHERE id = ANY(ARRAY(
        SELECT id FROM outbox WHERE available_at <= %(until)s
        ORDER BY available_at, id LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED))
    RETURNING occurrence_id
), enqueued AS (
    UPDATE occurrences AS o SET state = 'ENQUEUED', enqueued_at = %(now)s
    FROM taken WHERE o.id = taken.occurrence_id AND o.state = 'SCHEDULED'
    RETURNING o.id, o.queue, o.tenant, o.available_at
)
INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at)
SELECT id, queue, tenant, available_at FROM enqueued ORDER BY available_at
ON CONFLICT (occurrence_id) DO NOTHING;

-- ------------------------------------------------------------------ worker

-- name: claim_pick
-- Step 1 of claim_lease on its own (not called by the store): per queue, an ordered
-- scan of dispatch_ready that stops at :limit, skipping rows other claimers hold; then
-- the oldest :limit of those across the queues.
SELECT d.visible_at, d.id, d.occurrence_id
FROM unnest(%(queues)b::text[]) AS q(queue)
CROSS JOIN LATERAL (
    SELECT dispatch.visible_at, dispatch.id, dispatch.occurrence_id FROM dispatch
    WHERE dispatch.lease_token IS NULL AND dispatch.queue = q.queue
      AND dispatch.visible_at <= %(now)s
      AND EXISTS (SELECT 1 FROM occurrences AS o
                  WHERE o.id = dispatch.occurrence_id AND o.state IN ('ENQUEUED', 'RETRY_WAIT'))
    ORDER BY dispatch.visible_at, dispatch.id LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS d
ORDER BY d.visible_at, d.id LIMIT %(limit)s;

-- name: claim_lease
-- The claim, one statement: pick (claim_pick), lease each row with a fresh token
-- (gen_random_uuid(), built in since PostgreSQL 13), start the occurrences
-- (claim_start) and write their attempt rows (claim_attempts). One row per claim,
-- oldest visible_at first.
WITH leased AS (
    UPDATE dispatch
    SET lease_token = gen_random_uuid()::text, lease_until = %(lease_until)s,
        worker_id = %(worker_id)s
    WHERE dispatch.id = ANY(ARRAY(
        SELECT d.id
        FROM unnest(%(queues)b::text[]) AS q(queue)
        CROSS JOIN LATERAL (
            SELECT dispatch.visible_at, dispatch.id FROM dispatch
            WHERE dispatch.lease_token IS NULL AND dispatch.queue = q.queue
              AND dispatch.visible_at <= %(now)s
              AND EXISTS (SELECT 1 FROM occurrences AS o
                          WHERE o.id = dispatch.occurrence_id
                            AND o.state IN ('ENQUEUED', 'RETRY_WAIT'))
            ORDER BY dispatch.visible_at, dispatch.id LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS d
        ORDER BY d.visible_at, d.id LIMIT %(limit)s))
    RETURNING dispatch.id, dispatch.occurrence_id, dispatch.lease_token, dispatch.visible_at
), started AS (
    UPDATE occurrences AS o
    SET state = 'RUNNING', attempts = o.attempts + 1, started_at = coalesce(o.started_at, %(now)s)
    FROM leased WHERE o.id = leased.occurrence_id AND o.state IN ('ENQUEUED', 'RETRY_WAIT')
    RETURNING o.id, o.attempts, o.schedule_id, o.schedule_version, o.scheduled_for, o.max_attempts
), recorded AS (
    INSERT INTO attempts (occurrence_id, attempt, lease_token, worker_id, started_at, outcome)
    SELECT started.id, started.attempts, leased.lease_token, %(worker_id)s, %(now)s, 'running'
    FROM started JOIN leased ON leased.occurrence_id = started.id
)
SELECT started.id, leased.lease_token, started.attempts, started.schedule_id,
       started.schedule_version, started.scheduled_for, started.max_attempts
FROM started JOIN leased ON leased.occurrence_id = started.id
ORDER BY leased.visible_at, leased.id;

-- name: claim_start
-- Step 2 of claim_lease on its own (not called by the store).
UPDATE occurrences SET state = 'RUNNING', attempts = attempts + 1,
                       started_at = coalesce(started_at, %(now)s)
WHERE id = ANY(%(ids)b::text[]) AND state IN ('ENQUEUED', 'RETRY_WAIT')
RETURNING id, attempts, schedule_id, schedule_version, scheduled_for, max_attempts;

-- name: claim_attempts
-- Step 3 of claim_lease on its own (not called by the store).
INSERT INTO attempts (occurrence_id, attempt, lease_token, worker_id, started_at, outcome)
SELECT d.occurrence_id, o.attempts, d.lease_token, d.worker_id, %(now)s, 'running'
FROM dispatch AS d JOIN occurrences AS o ON o.id = d.occurrence_id
WHERE d.id = ANY(%(dispatch_ids)b::bigint[]);

-- name: leases_extend
UPDATE dispatch SET lease_until = %(lease_until)s
WHERE lease_token = ANY(%(tokens)b::text[])
RETURNING lease_token;

-- name: leases_held
-- The claims behind these tokens, if still held (finish, release). Locks the dispatch
-- rows: a reaper that got there first has unleased them (re-read: not held any more),
-- one that comes later skips them.
SELECT d.id, d.occurrence_id, d.lease_token, o.attempts
FROM dispatch AS d JOIN occurrences AS o ON o.id = d.occurrence_id
WHERE d.lease_token = ANY(%(tokens)b::text[]) AND o.state = 'RUNNING'
FOR UPDATE OF d;

-- name: finish_attempts
UPDATE attempts AS a
SET finished_at = %(now)s, outcome = c.outcome, exit_code = c.exit_code, signal = c.signal,
    output = c.output, error = c.error
FROM unnest(%(occurrence_ids)b::text[], %(attempts)b::integer[], %(outcomes)b::text[],
            %(exit_codes)b::integer[], %(signals)b::integer[], %(outputs)b::text[],
            %(errors)b::text[]) AS c(occurrence_id, attempt, outcome, exit_code, signal, output, error)
WHERE a.occurrence_id = c.occurrence_id AND a.attempt = c.attempt;

-- name: finish_occurrences
UPDATE occurrences AS o
SET state = c.next_state,
    finished_at = CASE WHEN c.next_state = 'RETRY_WAIT' THEN NULL ELSE %(now)s::timestamptz END,
    exit_code = c.exit_code, last_error = c.error, reason = c.reason
FROM unnest(%(occurrence_ids)b::text[], %(exit_codes)b::integer[], %(errors)b::text[],
            %(next_states)b::text[], %(reasons)b::text[])
     AS c(occurrence_id, exit_code, error, next_state, reason)
WHERE o.id = c.occurrence_id AND o.state = 'RUNNING';

-- name: dispatch_delete
DELETE FROM dispatch WHERE id = ANY(%(ids)b::bigint[]);

-- name: dispatch_retry
UPDATE dispatch AS d SET lease_token = NULL, lease_until = NULL, worker_id = NULL,
                         visible_at = c.visible_at
FROM unnest(%(ids)b::bigint[], %(visible_at)b::timestamptz[]) AS c(id, visible_at)
WHERE d.id = c.id;

-- name: dispatch_unlease
-- visible_at NULL keeps the row's visible_at.
UPDATE dispatch SET lease_token = NULL, lease_until = NULL, worker_id = NULL,
                    visible_at = coalesce(%(visible_at)s::timestamptz, visible_at)
WHERE id = ANY(%(ids)b::bigint[]);

-- name: release_attempts
DELETE FROM attempts AS a
USING unnest(%(occurrence_ids)b::text[], %(attempts)b::integer[]) AS k(occurrence_id, attempt)
WHERE a.occurrence_id = k.occurrence_id AND a.attempt = k.attempt;

-- name: release_occurrences
UPDATE occurrences
SET attempts = attempts - 1,
    state = CASE WHEN attempts - 1 = 0 THEN 'ENQUEUED' ELSE 'RETRY_WAIT' END,
    started_at = CASE WHEN attempts - 1 = 0 THEN NULL ELSE started_at END
WHERE id = ANY(%(ids)b::text[]) AND state = 'RUNNING';

-- ------------------------------------------------------------------ leader

-- name: reap_pick
-- Rows a finishing worker holds (leases_held) are skipped: that worker wins.
SELECT d.id, d.occurrence_id, o.attempts, o.max_attempts
FROM dispatch AS d JOIN occurrences AS o ON o.id = d.occurrence_id
WHERE d.lease_token IS NOT NULL AND d.lease_until < %(now)s
ORDER BY d.lease_until, d.id LIMIT %(limit)s
FOR UPDATE OF d SKIP LOCKED;

-- name: reap_attempts
UPDATE attempts AS a SET outcome = 'lost', finished_at = %(now)s, error = %(error)s
FROM unnest(%(occurrence_ids)b::text[], %(attempts)b::integer[]) AS k(occurrence_id, attempt)
WHERE a.occurrence_id = k.occurrence_id AND a.attempt = k.attempt AND a.outcome = 'running';

-- name: reap_retry
UPDATE occurrences SET state = 'RETRY_WAIT'
WHERE id = ANY(%(ids)b::text[]) AND state = 'RUNNING';

-- name: reap_dead
UPDATE occurrences
SET state = 'DEAD', finished_at = %(now)s,
    reason = 'lease expired on attempt ' || attempts || ' of ' || max_attempts
             || ' (worker crashed, paused or partitioned)'
WHERE id = ANY(%(ids)b::text[]) AND state = 'RUNNING';

-- name: prune
-- Attempts, outbox and dispatch rows go with their occurrence (ON DELETE CASCADE).
DELETE FROM occurrences WHERE id = ANY(ARRAY(
    SELECT id FROM occurrences
    WHERE finished_at < %(before)s
      AND state IN ('SUCCEEDED', 'DEAD', 'MISSED', 'SKIPPED_OVERLAP', 'CANCELED')
    ORDER BY finished_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED));

-- ------------------------------------------------------------------ observation

-- name: backlog
SELECT (SELECT count(*) FROM schedules WHERE state = 'active' AND next_run_at <= %(now)s),
       (SELECT count(*) FROM outbox),
       (SELECT count(*) FROM dispatch WHERE lease_token IS NULL),
       (SELECT count(*) FROM dispatch WHERE lease_token IS NOT NULL),
       (SELECT min(visible_at) FROM dispatch WHERE lease_token IS NULL);
