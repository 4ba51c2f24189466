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
-- PostgreSQL driver runs one statement chain (claim_lease, relay_dispatch,
-- materialize_insert, overlap_release). Every block here is run by the engine
-- (clockd/store/engine.py) or by the PostgreSQL driver's own steps; test_sql_parity.py
-- checks that none is left that nobody runs. State names, policy defaults and reason
-- texts of the conditional writes come in as parameters from core.
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
-- With its overlap slot when its policy is not `allow` (the claim locks that row; SQLite
-- writes it lazily, overlap_slots_ensure, as its writers are serialized anyway).
WITH inserted AS (
    INSERT INTO schedules (id, tenant, name, kind, expr, tz, queue, state, version, next_run_at,
                           shard, created_at, updated_at, paused_at, spec)
    VALUES (%(id)s, %(tenant)s, %(name)s, %(kind)s, %(expr)s, %(tz)s, %(queue)s, 'active', 1,
            %(next_run_at)s::timestamptz, %(shard)s, %(now)s, %(now)s, NULL, %(spec)s::jsonb)
    RETURNING id, spec
)
INSERT INTO overlap_slots (schedule_id)
SELECT id FROM inserted WHERE spec->>'overlap' IN ('skip', 'queue_one');

-- name: schedule_get
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE id = %(id)s;

-- name: schedule_get_by_name
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE tenant = %(tenant)s AND name = %(name)s AND state <> 'deleted';

-- name: schedule_get_deleted_by_name
-- The latest deleted schedule of that name (schedules_deleted_name, schema 0021).
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE tenant = %(tenant)s AND name = %(name)s AND state = 'deleted'
ORDER BY updated_at DESC LIMIT 1;

-- name: schedules_list
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE state <> 'deleted' AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY name, tenant;

-- name: schedule_update
-- Conditional on the version the caller read: no row back = someone else changed it.
-- Writes the overlap slot if the new policy needs one (as schedule_insert).
WITH updated AS (
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
              created_at, updated_at, paused_at, spec
), slot AS (
    INSERT INTO overlap_slots (schedule_id)
    SELECT id FROM updated WHERE spec->>'overlap' IN ('skip', 'queue_one')
    ON CONFLICT (schedule_id) DO NOTHING
)
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM updated;

-- name: schedule_version_insert
-- Runs after the schedule row is written: next_run_at copies its cursor (0003), where
-- this version's expectations begin (the reconciler's boundary between versions).
INSERT INTO schedule_versions (schedule_id, version, state, valid_from, valid_to, definition, reason,
                               next_run_at)
VALUES (%(schedule_id)s, %(version)s, %(state)s, %(now)s, NULL, %(definition)s::jsonb, %(reason)s,
        (SELECT next_run_at FROM schedules WHERE id = %(schedule_id)s));

-- name: schedule_insert_many
-- apply_schedules' creates, a batch in one statement: for each row of the arrays what
-- schedule_insert, schedule_version_insert and schedule_labels_insert write one by one —
-- the schedule row (its overlap slot included), its first schedule_versions row (the
-- cursor given is the one written) and its labels, read from the spec just written
-- (spec.labels: [[key, value], ...]). One statement and one round trip instead of three,
-- and the ids and cursors sent once. A taken name or id (also one taken twice within the
-- batch) fails the whole statement; the store then redoes the batch row by row, so the
-- Conflict names the schedule. So does a label pair given twice in one definition (the
-- key refuses its second row): row by row, schedule_labels_insert keeps it once. An
-- ON CONFLICT here cost every create 4-5 us of its ~38 (speculative insertion).
WITH n AS (
    SELECT *
    FROM unnest(%(ids)b::text[], %(tenants)b::text[], %(names)b::text[], %(kinds)b::text[],
                %(exprs)b::text[], %(tzs)b::text[], %(queues)b::text[],
                %(next_run_at)b::timestamptz[], %(shards)b::integer[], %(specs)b::text[],
                %(definitions)b::text[])
         AS n(id, tenant, name, kind, expr, tz, queue, next_run_at, shard, spec, definition)
), inserted AS (
    INSERT INTO schedules (id, tenant, name, kind, expr, tz, queue, state, version, next_run_at,
                           shard, created_at, updated_at, paused_at, spec)
    SELECT n.id, n.tenant, n.name, n.kind, n.expr, n.tz, n.queue, %(state)s::text, 1, n.next_run_at,
           n.shard, %(now)s, %(now)s, NULL, n.spec::jsonb
    FROM n
    RETURNING id, tenant, name, spec
), slots AS (
    INSERT INTO overlap_slots (schedule_id)
    SELECT id FROM inserted WHERE spec->>'overlap' IN ('skip', 'queue_one')
), versions AS (
    INSERT INTO schedule_versions (schedule_id, version, state, valid_from, valid_to, definition,
                                   reason, next_run_at)
    SELECT n.id, 1, %(state)s::text, %(now)s, NULL, n.definition::jsonb, %(reason)s::text,
           n.next_run_at
    FROM n
)
INSERT INTO schedule_labels (tenant, key, value, name, schedule_id)
SELECT i.tenant, pair->>0, pair->>1, i.name, i.id
FROM inserted AS i CROSS JOIN LATERAL jsonb_array_elements(i.spec->'labels') AS l(pair);

-- name: schedule_version_close
UPDATE schedule_versions SET valid_to = %(now)s
WHERE schedule_id = %(schedule_id)s AND valid_to IS NULL;

-- name: schedule_versions_list
SELECT version, valid_from, valid_to, definition, state
FROM schedule_versions WHERE schedule_id = %(schedule_id)s ORDER BY version;

-- name: schedule_definitions
-- What a claim takes from the definitions named by (schedule_id, version) (immutable:
-- safe to cache): the name, the target's and retry policy's JSON texts (jsonb's text is
-- canonical, so alike policies give one text, which the claim decodes once:
-- clockd.store.codec.claim_parts) and the timeout. Not the whole document: decoding it
-- was most of a worker's CPU per distinct schedule in a burst.
SELECT v.schedule_id, v.version, v.definition->>'name', (v.definition->'target')::text,
       (v.definition->'retry')::text, v.definition->>'timeout_us'
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
      AND state = ANY(%(expected)b::text[]) AND (NOT manual OR %(include_manual)s));

-- name: cancel_dispatch
DELETE FROM dispatch WHERE lease_token IS NULL AND occurrence_id IN (
    SELECT id FROM occurrences
    WHERE schedule_id = %(schedule_id)s AND schedule_version < %(version)s
      AND state = ANY(%(expected)b::text[]) AND (NOT manual OR %(include_manual)s));

-- name: cancel_occurrences
UPDATE occurrences SET state = %(next)s::text, reason = %(reason)s, finished_at = %(now)s
WHERE schedule_id = %(schedule_id)s AND schedule_version < %(version)s
  AND state = ANY(%(expected)b::text[]) AND (NOT manual OR %(include_manual)s)
RETURNING id, scheduled_for, attempts;

-- ------------------------------------------------------------------ occurrences (clockctl)

-- name: occurrence_insert_manual
-- Only if the schedule row exists (no foreign key says so since schema 0012): no row
-- written is the engine's NotFound.
INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for,
                         available_at, state, max_attempts, manual, overlap)
SELECT %(id)s::text, s.id, %(version)s::integer, %(tenant)s::text, %(queue)s::text,
       %(now)s::timestamptz, %(now)s::timestamptz, %(scheduled)s::text, %(max_attempts)s::integer, true,
       %(overlap)s::text
FROM schedules AS s WHERE s.id = %(schedule_id)s;

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
-- The ended attempts (attempt_history: the attempts rows and, schema 0013, a first
-- attempt kept on its occurrence row), and the running one from its lease (schema 0005:
-- its row is written when it ends; one written as 'running' before 0005 is shown as it
-- is): since schema 0022 the batch row its occurrence names (its token: the batch's and
-- the run's position in it — `<token>.1` for a run leased before the upgrade, whose
-- worker holds `<token>`).
SELECT occurrence_id, attempt, lease_token, worker_id, started_at, outcome, finished_at,
       exit_code, signal, output, error
FROM attempt_history WHERE occurrence_id = %(occurrence_id)s
UNION ALL
SELECT o.id, o.attempts,
       b.token || '.' || o.id,
       b.worker_id, coalesce(b.leased_at, o.started_at), 'running', NULL, NULL, NULL, '', NULL
FROM occurrences AS o JOIN claim_batches AS b ON b.token = o.lease_batch
WHERE o.id = %(occurrence_id)s AND o.state = 'RUNNING'
  AND NOT EXISTS (SELECT 1 FROM attempts AS a
                  WHERE a.occurrence_id = o.id AND a.attempt = o.attempts)
ORDER BY 2;

-- ------------------------------------------------------------------ materializer

-- name: due_schedules
-- One ordered index scan per shard (schedules_due), merged: `shard = ANY(...)` with
-- ORDER BY next_run_at would read every due row of every shard and sort them.
-- Only the planning inputs (clockd.core.planning.DueSchedule): the spec's fields are
-- read by path here, so the whole document is neither sent nor decoded.
SELECT s.id, s.tenant, s.name, s.kind, s.expr, s.tz, s.queue, s.version, s.next_run_at,
       s.created_at, s.spec->>'misfire', s.spec->>'max_lateness_us', s.spec->>'window_us',
       s.spec->>'catch_up_limit', s.spec#>>'{retry,retries}',
       s.spec#>>'{target,type}' = 'command' AND s.spec#>>'{target,stdin}' IS NOT NULL,
       coalesce(jsonb_typeof(s.spec->'notify') = 'array' AND s.spec->'notify' <> '[]', false),
       s.spec->>'overlap'
FROM unnest(%(shards)b::integer[]) AS k(shard)
CROSS JOIN LATERAL (
    SELECT * FROM schedules
    WHERE schedules.state = 'active' AND schedules.shard = k.shard
      AND schedules.next_run_at <= %(until)s
    ORDER BY schedules.next_run_at, schedules.id LIMIT %(limit)s
) AS s
ORDER BY s.next_run_at, s.id LIMIT %(limit)s;

-- name: due_shards
-- min() over the schedules_due range of each shard: one index probe per shard.
SELECT k.shard, k.first_due FROM (
    SELECT u.shard, (SELECT min(s.next_run_at) FROM schedules AS s
                     WHERE s.state = 'active' AND s.shard = u.shard
                       AND s.next_run_at <= %(until)s) AS first_due
    FROM unnest(%(shards)b::integer[]) AS u(shard)
) AS k
WHERE k.first_due IS NOT NULL
ORDER BY k.first_due, k.shard;

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
                             available_at, state, max_attempts, reason, finished_at, overlap)
    SELECT * FROM unnest(%(ids)b::text[], %(schedule_ids)b::text[], %(versions)b::integer[],
                         %(tenants)b::text[], %(queues)b::text[], %(scheduled_for)b::timestamptz[],
                         %(available_at)b::timestamptz[], %(states)b::text[],
                         %(max_attempts)b::integer[], %(reasons)b::text[],
                         %(finished_at)b::timestamptz[], %(overlaps)b::text[])
    ON CONFLICT DO NOTHING
    RETURNING id, state, queue, tenant, available_at
), queued AS (
    INSERT INTO outbox (occurrence_id, queue, tenant, available_at)
    SELECT id, queue, tenant, available_at FROM inserted WHERE state = %(scheduled)s::text
    ORDER BY available_at
    ON CONFLICT (occurrence_id) DO NOTHING
)
SELECT id, state FROM inserted;

-- name: outbox_insert
INSERT INTO outbox (occurrence_id, queue, tenant, available_at)
SELECT id, queue, tenant, available_at FROM occurrences
WHERE id = ANY(%(ids)b::text[]) AND state = %(scheduled)s::text
ON CONFLICT (occurrence_id) DO NOTHING;

-- ------------------------------------------------------------------ relay

-- name: relay_dispatch
-- The relay, one statement: take up to :limit outbox rows due by :until (rows another
-- relay holds are skipped), mark their still-SCHEDULED occurrences ENQUEUED, and queue
-- those (visible_at = available_at). Idempotent by occurrence id. One row: the number of
-- dispatch rows written and how late (seconds after visible_at) those queued late were —
-- staged ahead, as the relay stages, nearly none: a row per queued row took a timestamp
-- decode each (~3 µs a row in bench.store_ab's relay phase).
WITH taken AS (
    DELETE FROM outbox WHERE id = ANY(ARRAY(
        SELECT id FROM outbox WHERE available_at <= %(until)s
        ORDER BY available_at, id LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED))
    RETURNING occurrence_id
), enqueued AS (
    UPDATE occurrences AS o SET state = %(next)s::text, enqueued_at = %(now)s
    FROM taken WHERE o.id = taken.occurrence_id AND o.state = %(expected)s::text
    RETURNING o.id, o.queue, o.tenant, o.available_at, o.overlap
), queued AS (
    INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at, overlap)
    SELECT id, queue, tenant, available_at, overlap FROM enqueued ORDER BY available_at
    ON CONFLICT (occurrence_id) DO NOTHING
    RETURNING visible_at
)
SELECT count(*),
       coalesce(array_agg(extract(epoch FROM %(now)s::timestamptz - visible_at)::float8)
                FILTER (WHERE visible_at < %(now)s::timestamptz), '{}')
FROM queued;

-- ------------------------------------------------------------------ worker

-- fragment: claim_oldest
-- The queues' oldest :limit visible unleased rows, locked SKIP LOCKED (their ids): the last
-- branch of claim_ready's pick and the whole of claim_plain's (one text, included by both).
    SELECT g.id FROM unnest(%(queues)b::text[]) AS q(queue)
    CROSS JOIN LATERAL (
        SELECT dispatch.id FROM dispatch
        WHERE dispatch.lease_token IS NULL AND dispatch.queue = q.queue
          AND dispatch.visible_at <= %(now)s
        ORDER BY dispatch.visible_at, dispatch.id LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS g

-- fragment: claim_ready
-- The claim's pick, the start of claim_shared and of claim_lease (one text, included by
-- both; see claim_lease for what each step does):
--   tenants   the tenants with unleased rows per queue (a skip scan of dispatch_ready_tenant);
--   picked    per queue, a share of each tenant's oldest visible rows (when it has more
--             than one tenant) and the queue's oldest :limit, locked SKIP LOCKED: an ordered
--             scan of dispatch alone. The two may list a row twice; cand's `d.id = ANY(…)`
--             reads it once. A UNION deduplicated them in a hash table sized for the
--             planner's guess at the shares (100 tenants' worth: 3 MB), ~0.5 ms a claim.
WITH RECURSIVE tenants (queue, tenant) AS (
    SELECT q.queue, (SELECT d.tenant FROM dispatch AS d
                     WHERE d.lease_token IS NULL AND d.queue = q.queue
                     ORDER BY d.tenant LIMIT 1)
    FROM unnest(%(queues)b::text[]) AS q(queue)
    UNION ALL
    SELECT t.queue, (SELECT d.tenant FROM dispatch AS d
                     WHERE d.lease_token IS NULL AND d.queue = t.queue AND d.tenant > t.tenant
                     ORDER BY d.tenant LIMIT 1)
    FROM tenants AS t WHERE t.tenant IS NOT NULL
), ready AS (
    SELECT queue, tenant, count(*) OVER (PARTITION BY queue) AS n
    FROM tenants WHERE tenant IS NOT NULL
), picked AS (
    SELECT f.id FROM ready AS r
    CROSS JOIN LATERAL (
        SELECT dispatch.id FROM dispatch
        WHERE dispatch.lease_token IS NULL AND dispatch.queue = r.queue
          AND dispatch.tenant = r.tenant AND dispatch.visible_at <= %(now)s
        ORDER BY dispatch.visible_at, dispatch.id LIMIT (%(limit)s + r.n - 1) / r.n
        FOR UPDATE SKIP LOCKED
    ) AS f
    WHERE r.n > 1
    UNION ALL
-- include: claim_oldest

-- fragment: claim_batch_row
-- The claimed batch's lease row (schema 0022), the step after `leased` and `started` in
-- claim_lease and claim_start (one text, included by both): the batch's token is the
-- engine's first fresh token, `open` the runs started, `occurrence_ids` every row taken,
-- in start order (what the reaper and claim_unlease_unstarted read).
), batch AS (
    INSERT INTO claim_batches (token, worker_id, lease_until, leased_at, open, occurrence_ids)
    SELECT (%(tokens)b::text[])[1], %(worker_id)s, %(lease_until)s, %(now)s, (SELECT count(*) FROM started),
           array_agg(l.occurrence_id ORDER BY l.start_no)
    FROM leased AS l HAVING count(*) > 0

-- name: claim_lease
-- The claim, one statement chain. SQLite runs its steps as statements of their own
-- (SqliteDriver.claim: claim_tenants, claim_pick_fair and claim_pick pick, claim_judge
-- decides, then claim_losers, dispatch_delete, claim_lease, claim_start,
-- tenant_claims_count, overlap_slots_take write). The rules come in as parameters from
-- core (clockd.store.engine): the claimable states, the default overlap policy, the
-- reason templates. Here:
--   tenants   the tenants with unleased rows per queue (a skip scan of dispatch_ready_tenant);
--   picked    per queue, a share of each tenant's oldest visible rows (when it has more
--             than one tenant) and the queue's oldest :limit, locked SKIP LOCKED: an ordered
--             scan of dispatch alone (an unleased row's occurrence is ENQUEUED or RETRY_WAIT,
--             written so in the same transactions; cand checks it). A semi-join to
--             occurrences here let the planner pick hash joins over both whole tables and a
--             sort, 0.4 s per claim with 50 k rows queued. These two (and `ready` between
--             them) are the fragment claim_ready, which claim_shared starts with too;
--   limits    the capped tenants among them, locked SKIP LOCKED and read fresh (a row
--             another claimer holds gives that tenant no room this time);
--   slot      the overlap slots of their schedules, locked SKIP LOCKED and read fresh (a
--             schedule whose slot another claimer holds is left alone this time);
--   judged    claim_judge's decisions: start / skip / park (the waiter leaves the queue,
--             still ENQUEUED, as its slot's waiting_id);
-- then the writes, one data-modifying CTE each, on disjoint rows. One row per start,
-- in round-robin order across tenants. No attempt row is written: until the attempt
-- ends, the lease is its record (leased_at its start; schema 0005).
-- include: claim_ready
), cand AS MATERIALIZED (
    -- The overlap policy from the occurrence row (schema 0018); the schedule's spec is
    -- read only for a row written without one (coalesce evaluates it only then).
    SELECT d.id, d.occurrence_id, d.tenant, d.visible_at, o.schedule_id, o.scheduled_for,
           coalesce(o.overlap, (SELECT s.spec->>'overlap' FROM schedules AS s WHERE s.id = o.schedule_id),
                    %(default_overlap)s::text) AS overlap
    FROM dispatch AS d
    JOIN occurrences AS o ON o.id = d.occurrence_id
    WHERE d.id = ANY(ARRAY(SELECT id FROM picked)) AND o.state = ANY(%(claimable)b::text[])
), limits AS MATERIALIZED (
    SELECT l.tenant,
           least(coalesce(l.max_running - l.running, 1000000000),
                 coalesce(l.max_triggers_per_minute
                          - CASE WHEN l.window_start = %(minute)s THEN l.window_claims ELSE 0 END,
                          1000000000)) AS n
    FROM tenant_limits AS l
    WHERE l.tenant = ANY(ARRAY(SELECT DISTINCT tenant FROM cand))
      AND (l.max_running IS NOT NULL OR l.max_triggers_per_minute IS NOT NULL)
    FOR UPDATE SKIP LOCKED
), room AS MATERIALIZED (
    -- Materialized: read once, not once per eligible row (it is a join of two CTEs).
    SELECT l.tenant, coalesce(k.n, 0) AS n
    FROM tenant_limits AS l LEFT JOIN limits AS k ON k.tenant = l.tenant
    WHERE l.tenant = ANY(ARRAY(SELECT DISTINCT tenant FROM cand))
      AND (l.max_running IS NOT NULL OR l.max_triggers_per_minute IS NOT NULL)
), locked_slots AS MATERIALIZED (
    SELECT g.schedule_id, g.running_id, g.waiting_id FROM overlap_slots AS g
    WHERE g.schedule_id = ANY(ARRAY(SELECT DISTINCT schedule_id FROM cand WHERE overlap <> 'allow'))
    FOR UPDATE SKIP LOCKED
), slot AS (
    SELECT g.schedule_id,
           CASE WHEN r.state IN ('RUNNING', 'ENQUEUED', 'RETRY_WAIT') THEN g.running_id END AS holder,
           CASE WHEN w.state IN ('ENQUEUED', 'RETRY_WAIT') THEN g.waiting_id END AS waiter
    FROM locked_slots AS g
    LEFT JOIN occurrences AS r ON r.id = g.running_id
    LEFT JOIN occurrences AS w ON w.id = g.waiting_id
), heads AS MATERIALIZED (
    -- Only the candidates of schedules with an overlap policy: an `allow` one starts
    -- whatever else is running, so it needs no slot and no rank among its schedule's
    -- (the common case: this CTE, and what reads it, then has no rows to sort).
    SELECT c.*, sl.holder, sl.waiter, sl.schedule_id IS NOT NULL AS slotted,
           row_number() OVER (PARTITION BY c.schedule_id
                              ORDER BY CASE WHEN c.occurrence_id = sl.holder THEN 0 ELSE 1 END,
                                       c.scheduled_for, c.id) AS srank
    FROM cand AS c LEFT JOIN slot AS sl ON sl.schedule_id = c.schedule_id
    WHERE c.overlap <> 'allow'
), eligible AS (
    SELECT e.*, row_number() OVER (PARTITION BY e.tenant ORDER BY e.visible_at, e.id) AS trank
    FROM (SELECT id, occurrence_id, tenant, visible_at, schedule_id, overlap FROM cand WHERE overlap = 'allow'
          UNION ALL
          SELECT id, occurrence_id, tenant, visible_at, schedule_id, overlap FROM heads AS h
          WHERE h.slotted AND h.srank = 1
            AND (h.occurrence_id = h.holder OR (h.holder IS NULL AND h.waiter IS NULL))) AS e
), starters AS MATERIALIZED (
    SELECT e.*, row_number() OVER (ORDER BY e.trank, e.visible_at, e.id) AS start_no
    FROM eligible AS e LEFT JOIN room AS r ON r.tenant = e.tenant
    WHERE r.tenant IS NULL OR e.trank <= r.n
    ORDER BY e.trank, e.visible_at, e.id LIMIT %(limit)s
), busy AS (
    SELECT schedule_id, holder AS running_id FROM heads WHERE slotted AND holder IS NOT NULL
    UNION
    SELECT schedule_id, occurrence_id FROM starters WHERE overlap <> 'allow'
), losers AS (
    SELECT h.id, h.occurrence_id, h.tenant, h.schedule_id, h.overlap, h.waiter, b.running_id,
           row_number() OVER w AS lrank, first_value(h.occurrence_id) OVER w AS first_loser
    FROM heads AS h JOIN busy AS b ON b.schedule_id = h.schedule_id
    WHERE h.slotted AND h.occurrence_id <> b.running_id
      AND h.id <> ALL(ARRAY(SELECT id FROM starters))
    WINDOW w AS (PARTITION BY h.schedule_id ORDER BY h.scheduled_for, h.id)
), judged AS MATERIALIZED (
    SELECT CASE WHEN overlap = 'queue_one' AND lrank = 1 AND waiter IS NULL THEN 'park' ELSE 'skip' END
               AS action,
           id, occurrence_id, tenant, schedule_id, overlap,
           CASE WHEN overlap = 'queue_one' AND lrank = 1 AND waiter IS NULL
                THEN replace(%(overlap_parked)s::text, '{running}', running_id)
                WHEN overlap = 'queue_one'
                THEN replace(replace(%(overlap_queue_full)s::text, '{running}', running_id),
                             '{waiting}', coalesce(waiter, first_loser))
                ELSE replace(%(overlap_skipped)s::text, '{running}', running_id) END
               AS reason
    FROM losers
), leased AS (
    -- The starters leave the queue, leased as one batch (schema 0022, see claim_start):
    -- a run's token is `<batch>.<occurrence id>`, the batch's the engine's first fresh token.
    -- A join, not a subquery per row: a correlated lookup in `starters` (a CTE, no index)
    -- made the claim quadratic in its batch — 500 rows were 250,000 CTE row visits, most
    -- of the claim's time at 10,000/s. For the same reason the token and the starter's
    -- order travel on through RETURNING (`started` carries them to the final SELECT)
    -- instead of a join of two CTEs, which the planner, estimating one row each, nests.
    DELETE FROM dispatch USING starters AS s
    WHERE dispatch.id = s.id
    RETURNING dispatch.id, dispatch.occurrence_id,
              (%(tokens)b::text[])[1] || '.' || dispatch.occurrence_id AS lease_token,
              s.trank, s.visible_at, s.start_no
), started AS (
    UPDATE occurrences AS o
    SET state = %(running_state)s::text, attempts = o.attempts + 1,
        started_at = coalesce(o.started_at, %(now)s), lease_batch = (%(tokens)b::text[])[1]
    FROM leased WHERE o.id = leased.occurrence_id AND o.state = ANY(%(claimable)b::text[])
    RETURNING o.id, o.attempts, o.schedule_id, o.schedule_version, o.scheduled_for, o.max_attempts,
              leased.lease_token, leased.trank, leased.visible_at, leased.id AS dispatch_id
-- include: claim_batch_row
), counted AS (
    UPDATE tenant_limits AS l
    SET running = l.running + c.n,
        window_claims = CASE WHEN l.window_start = %(minute)s THEN l.window_claims ELSE 0 END + c.n,
        window_start = %(minute)s
    FROM (SELECT tenant, count(*) AS n FROM starters GROUP BY tenant) AS c
    WHERE l.tenant = c.tenant AND l.tenant = ANY(ARRAY(SELECT tenant FROM limits))
), taken AS (
    UPDATE overlap_slots AS g
    SET running_id = coalesce(t.running_id, g.running_id),
        waiting_id = coalesce(t.waiting_id, g.waiting_id)
    FROM (SELECT schedule_id, max(running_id) AS running_id, max(waiting_id) AS waiting_id
          FROM (SELECT schedule_id, occurrence_id AS running_id, NULL::text AS waiting_id
                FROM starters WHERE overlap <> 'allow'
                UNION ALL
                SELECT schedule_id, NULL, occurrence_id FROM judged WHERE action = 'park') AS u
          GROUP BY schedule_id) AS t
    WHERE g.schedule_id = t.schedule_id
), ended AS (
    UPDATE occurrences AS o
    SET state = CASE WHEN j.action = 'skip' THEN %(skipped_state)s::text ELSE o.state END,
        finished_at = CASE WHEN j.action = 'skip' THEN %(now)s ELSE o.finished_at END,
        reason = j.reason
    FROM judged AS j
    WHERE o.id = j.occurrence_id AND o.state = ANY(%(claimable)b::text[])
), dequeued AS (
    -- Skipped rows leave the queue; so does the waiter (the slot keeps it, overlap_release
    -- puts it back).
    DELETE FROM dispatch WHERE id = ANY(ARRAY(SELECT id FROM judged))
), made AS (
    -- A slot missing (a schedule whose policy changed under a queued run-now): made now,
    -- used from the next claim on.
    INSERT INTO overlap_slots (schedule_id)
    SELECT DISTINCT c.schedule_id FROM cand AS c
    WHERE c.overlap <> 'allow'
      AND NOT EXISTS (SELECT 1 FROM overlap_slots AS g WHERE g.schedule_id = c.schedule_id)
    ON CONFLICT (schedule_id) DO NOTHING
)
SELECT id, lease_token, attempts, schedule_id, schedule_version, scheduled_for, max_attempts
FROM started
ORDER BY trank, visible_at, dispatch_id;

-- fragment: claim_start
-- The end of claim_plain and of claim_shared (one text, included by both): take the
-- `starters` out of the queue, lease them as one batch (schema 0022: the batch's token
-- is the engine's first fresh token, a run's `<batch>.<occurrence id>`, see lease_tokens)
-- and start their runs, each checked claimable as it starts (a row whose occurrence is
-- not is taken and not started: see claim_plain); then the batch's row (claim_batch_row).
), leased AS (
    DELETE FROM dispatch USING starters AS s
    WHERE dispatch.id = s.id
    RETURNING dispatch.occurrence_id, (%(tokens)b::text[])[1] || '.' || dispatch.occurrence_id AS lease_token,
              s.start_no
), started AS (
    UPDATE occurrences AS o
    SET state = %(running_state)s::text, attempts = o.attempts + 1,
        started_at = coalesce(o.started_at, %(now)s), lease_batch = (%(tokens)b::text[])[1]
    FROM leased WHERE o.id = leased.occurrence_id AND o.state = ANY(%(claimable)b::text[])
    RETURNING o.id, leased.lease_token, o.attempts, o.schedule_id, o.schedule_version, o.scheduled_for,
              o.max_attempts, leased.start_no
-- include: claim_batch_row
)

-- name: claim_plain
-- The claim of one tenant's queue when there is nothing to judge (schema 0019), tried
-- first: the queues' oldest :limit visible rows leased and started in queue order,
-- without reading their occurrences first or running claim_lease's judging steps. It
-- leases only when its answer is claim_lease's: one tenant has unleased rows in the
-- claimed queues (no round-robin to make), it has no running or per-minute cap (no room
-- to count), and every row picked carries the overlap policy `allow` (no slot involved;
-- a row without a policy of its own, NULL, is not known to allow). Otherwise it leases
-- nothing and answers with a last row whose occurrence id is NULL and whose token column
-- says what to run instead, in the same transaction (the rows this statement locked are
-- the transaction's own; a later pick does not skip them): 'shared' when tenants share
-- the queues (claim_shared makes the round-robin), 'judge' for a cap or a policy
-- (claim_lease). Kept beside claim_shared, which would serve one tenant too: its
-- round-robin costs one tenant's claims ~5 µs of database time per claimed row (the
-- sustained run's A/B, 2026-12-06).
-- claim_lease reads each candidate's occurrence to check it is claimable before leasing;
-- here `started` checks it as it starts the run. A queue row whose occurrence is not
-- claimable (no writer leaves one so) is leased and not started: the statement then adds
-- a row with 'unstarted' in the token column, and the driver gives those leases back
-- (claim_unlease_unstarted), so the row is left in the queue unleased, as claim_lease
-- leaves it. The tenant probe stops at a queue's second tenant (enough to say "shared").
-- `tenants` repeats claim_ready's first step (its tenant probe, stopped at the second
-- tenant): a change to it is made here too; `picked` is claim_ready's oldest-rows branch,
-- the fragment claim_oldest (without the shares).
WITH RECURSIVE tenants (queue, tenant, depth) AS (
    SELECT q.queue, (SELECT d.tenant FROM dispatch AS d
                     WHERE d.lease_token IS NULL AND d.queue = q.queue
                     ORDER BY d.tenant LIMIT 1), 1
    FROM unnest(%(queues)b::text[]) AS q(queue)
    UNION ALL
    SELECT t.queue, (SELECT d.tenant FROM dispatch AS d
                     WHERE d.lease_token IS NULL AND d.queue = t.queue AND d.tenant > t.tenant
                     ORDER BY d.tenant LIMIT 1), 2
    FROM tenants AS t WHERE t.tenant IS NOT NULL AND t.depth = 1
), picked AS (
-- include: claim_oldest
), cand AS MATERIALIZED (
    SELECT d.id, d.tenant, d.visible_at, d.overlap FROM dispatch AS d
    WHERE d.id = ANY(ARRAY(SELECT id FROM picked))
), plain AS MATERIALIZED (
    SELECT single, single AND simple AS ok
    FROM (SELECT (SELECT count(DISTINCT tenant) FROM tenants) <= 1 AS single,
                 NOT EXISTS (SELECT 1 FROM cand WHERE overlap IS DISTINCT FROM 'allow')
                 AND NOT EXISTS (SELECT 1 FROM tenant_limits AS l
                                 WHERE l.tenant = ANY(ARRAY(SELECT DISTINCT tenant FROM cand))
                                   AND (l.max_running IS NOT NULL
                                        OR l.max_triggers_per_minute IS NOT NULL)) AS simple) AS p
), starters AS MATERIALIZED (
    SELECT c.id, row_number() OVER (ORDER BY c.visible_at, c.id) AS start_no
    FROM cand AS c WHERE (SELECT ok FROM plain)
    ORDER BY c.visible_at, c.id LIMIT %(limit)s
-- include: claim_start
SELECT id, lease_token, attempts, schedule_id, schedule_version, scheduled_for, max_attempts
FROM (SELECT * FROM started
      UNION ALL
      SELECT NULL, 'shared', NULL, NULL, NULL, NULL, NULL, NULL WHERE NOT (SELECT single FROM plain)
      UNION ALL
      SELECT NULL, 'judge', NULL, NULL, NULL, NULL, NULL, NULL WHERE (SELECT single AND NOT ok FROM plain)
      UNION ALL
      SELECT NULL, 'unstarted', NULL, NULL, NULL, NULL, NULL, NULL
      WHERE (SELECT count(*) FROM leased) > (SELECT count(*) FROM started)) AS r
ORDER BY start_no NULLS LAST;

-- name: claim_shared
-- The claim when there is nothing to judge but the round-robin (tenants share the queues;
-- claim_plain hands it over, see there), tried before claim_lease: the
-- queues' visible rows leased and started in claim_lease's order — the round-robin
-- across tenants included — without reading their occurrences first or running
-- claim_lease's judging steps. It leases only when its answer is claim_lease's: no
-- tenant among the rows picked has a running or per-minute cap (no room to count), and
-- every row picked carries the overlap policy `allow` (no slot involved; a row without a
-- policy of its own, NULL, is not known to allow). Otherwise it leases nothing and
-- answers with a last row (occurrence id NULL, 'judge' in the token column): the driver
-- then runs claim_lease in the same transaction (the rows this statement locked are the
-- transaction's own; its pick does not skip them).
-- claim_lease reads each candidate's occurrence to check it is claimable before leasing;
-- here `started` checks it as it starts the run. A queue row whose occurrence is not
-- claimable (no writer leaves one so) is leased and not started: the statement then adds
-- a row with 'unstarted' in the token column, and the driver gives those leases back
-- (claim_unlease_unstarted), so the row is left in the queue unleased, as claim_lease
-- leaves it.
-- `tenants`, `ready` and `picked` are claim_lease's (the fragment claim_ready), and
-- `starters` ranks as claim_lease's `eligible` and `starters` do when every row is allowed
-- and no tenant is capped: a change to that ranking is made in both. With one tenant,
-- `picked` is the queues' oldest :limit rows and the ranks are queue order.
-- include: claim_ready
), cand AS MATERIALIZED (
    SELECT d.id, d.tenant, d.visible_at, d.overlap FROM dispatch AS d
    WHERE d.id = ANY(ARRAY(SELECT id FROM picked))
), plain AS MATERIALIZED (
    SELECT NOT EXISTS (SELECT 1 FROM cand WHERE overlap IS DISTINCT FROM 'allow')
       AND NOT EXISTS (SELECT 1 FROM tenant_limits AS l
                       WHERE l.tenant = ANY(ARRAY(SELECT DISTINCT tenant FROM cand))
                         AND (l.max_running IS NOT NULL OR l.max_triggers_per_minute IS NOT NULL))
       AS ok
), starters AS MATERIALIZED (
    SELECT r.id, row_number() OVER (ORDER BY r.trank, r.visible_at, r.id) AS start_no
    FROM (SELECT c.id, c.visible_at,
                 row_number() OVER (PARTITION BY c.tenant ORDER BY c.visible_at, c.id) AS trank
          FROM cand AS c WHERE (SELECT ok FROM plain)) AS r
    ORDER BY r.trank, r.visible_at, r.id LIMIT %(limit)s
-- include: claim_start
SELECT id, lease_token, attempts, schedule_id, schedule_version, scheduled_for, max_attempts
FROM (SELECT * FROM started
      UNION ALL
      SELECT NULL, 'judge', NULL, NULL, NULL, NULL, NULL, NULL WHERE NOT (SELECT ok FROM plain)
      UNION ALL
      SELECT NULL, 'unstarted', NULL, NULL, NULL, NULL, NULL, NULL
      WHERE (SELECT count(*) FROM leased) > (SELECT count(*) FROM started)) AS r
ORDER BY start_no NULLS LAST;

-- name: claim_unlease_unstarted
-- claim_plain's and claim_shared's rows taken and not started (see claim_plain): back
-- into the queue (visible since their occurrence was available), and the batch row gone
-- when it started none. :tokens are the claim's fresh tokens (the first is the batch's),
-- :started the tokens of the runs it started.
WITH batch AS MATERIALIZED (
    SELECT b.token, b.occurrence_ids FROM claim_batches AS b WHERE b.token = (%(tokens)b::text[])[1]
), unstarted AS MATERIALIZED (
    SELECT x.id FROM batch AS b CROSS JOIN LATERAL unnest(b.occurrence_ids) AS x(id)
    WHERE b.token || '.' || x.id <> ALL(%(started)b::text[])
), requeued AS (
    INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at, overlap)
    SELECT o.id, o.queue, o.tenant, o.available_at, o.overlap FROM occurrences AS o
    WHERE o.id = ANY(ARRAY(SELECT id FROM unstarted))
    ON CONFLICT (occurrence_id) DO NOTHING
)
DELETE FROM claim_batches AS b USING batch WHERE b.token = batch.token AND b.open = 0;

-- fragment: lease_tokens
-- The asked :tokens, each split into its batch's token and its run's occurrence id
-- (schema 0022: `<batch>.<occurrence id>`). A token without a '.' is a run leased before
-- the upgrade, its batch's only one: `run` is NULL, and the statements take the batch's
-- first id (`coalesce(w.run, b.occurrence_ids[1])`, the array read only then). The id is
-- in the token rather than a position in the batch: a batch's ids are a toasted array
-- (500 ids: ~18 kB), and reading one element detoasts the whole of it — 63 µs of
-- leases_end per execution (bench.drain_census, 2026-12-07) where the id costs nothing.
WITH wanted AS MATERIALIZED (
    SELECT t.token, split_part(t.token, '.', 1) AS batch, nullif(split_part(t.token, '.', 2), '') AS run
    FROM unnest(%(tokens)b::text[]) AS t(token)
)

-- name: leases_lock
-- The batch rows of these tokens, locked in token order, before finish and release read
-- what they end (leases_end, leases_held). A statement of its own: those then read the
-- occurrences in a snapshot taken after the locks, so a finish or release of the same
-- batch that committed while this one waited is seen (a statement reads in the snapshot
-- it started with; the row it waited for is re-read, nothing else). One order for every
-- waiting locker (token order), and the heartbeat and the reaper never wait: no cycle.
-- include: lease_tokens
SELECT b.token FROM claim_batches AS b
WHERE b.token = ANY(ARRAY(SELECT DISTINCT batch FROM wanted))
ORDER BY b.token
FOR UPDATE OF b;

-- name: leases_extend
-- The batch rows of these tokens extended (one row per claimed batch, schema 0022); the
-- tokens answered are those whose run is still leased: its occurrence RUNNING under that
-- batch (a run ended, given back or reaped is not, though its batch may live on).
-- A heartbeat never waits for a row lock (SKIP LOCKED): a row another session holds is
-- being ended (a finish, a release) or reaped (its lease already ran out), so this
-- extension is not what keeps it. Such a batch still holds its runs as last committed,
-- and they count as held (`busy`): the next heartbeat extends it, or finds it gone.
-- Waiting instead made the heartbeat a party to deadlocks with a finish of the same
-- leases whenever the two locked in different orders
-- (test_a_heartbeat_never_waits_for_a_finish_of_the_same_leases).
-- include: lease_tokens
, locked AS MATERIALIZED (
    SELECT b.token FROM claim_batches AS b
    WHERE b.token = ANY(ARRAY(SELECT DISTINCT batch FROM wanted))
    FOR UPDATE OF b SKIP LOCKED
), extended AS (
    UPDATE claim_batches AS b SET lease_until = %(lease_until)s
    FROM locked WHERE b.token = locked.token
), live AS (
    SELECT token FROM locked
    UNION ALL
    SELECT b.token FROM claim_batches AS b  -- busy: the statement's snapshot, unlocked
    WHERE b.token = ANY(ARRAY(SELECT DISTINCT batch FROM wanted))
      AND b.token <> ALL(ARRAY(SELECT token FROM locked))
)
SELECT w.token FROM wanted AS w
JOIN live AS l ON l.token = w.batch
CROSS JOIN LATERAL (SELECT o.state, o.lease_batch FROM occurrences AS o
                    WHERE o.id = coalesce(w.run, (SELECT b.occurrence_ids[1] FROM claim_batches AS b
                                                  WHERE b.token = w.batch))
                    LIMIT 1) AS o
WHERE o.lease_batch = w.batch AND o.state = %(running)s::text;

-- fragment: lease_take
-- The whole of leases_held and leases_end (one text, see leases_held; pg_stat_statements
-- counts the two as one statement, under the name it saw first: comments aside, the
-- texts are the same).
-- include: lease_tokens
, held AS MATERIALIZED (
    SELECT w.token, w.batch, o.id, o.attempts, o.tenant, o.state, b.worker_id,
           coalesce(b.leased_at, o.started_at) AS started_at, o.overlap
    FROM wanted AS w
    JOIN claim_batches AS b ON b.token = w.batch
    CROSS JOIN LATERAL (SELECT o.id, o.attempts, o.tenant, o.state, o.started_at, o.overlap, o.lease_batch
                        FROM occurrences AS o WHERE o.id = coalesce(w.run, b.occurrence_ids[1]) LIMIT 1) AS o
    WHERE o.lease_batch = w.batch AND o.state = %(running)s::text
), tally AS (
    SELECT batch, count(*) AS n FROM held GROUP BY batch
), lowered AS (  -- a batch with runs still open keeps its row, as many fewer open
    UPDATE claim_batches AS b SET open = b.open - t.n FROM tally AS t WHERE b.token = t.batch AND b.open > t.n
), dropped AS (  -- and goes with its last (the two touch different rows: one statement may)
    DELETE FROM claim_batches AS b USING tally AS t WHERE b.token = t.batch AND b.open <= t.n
)
SELECT NULL::bigint, h.id, h.token, h.attempts, h.tenant, h.state, h.worker_id, h.started_at, h.overlap
FROM held AS h
ORDER BY h.id;

-- name: leases_held
-- The runs behind these tokens still leased (their occurrence RUNNING under the token's
-- batch), taken out of their batch (release, and finish's retries: each run's lease ends
-- here; the caller puts it back in the queue or ends it), with what the finish needs: (no
-- queue row: NULL, occurrence id, token, attempt, tenant, state, worker id, the
-- attempt's start, the overlap policy). The batch rows are this transaction's already
-- (leases_lock), and the occurrences are read after those locks were taken: a finish or
-- release of the same batch that committed first has moved them on, and the state check
-- drops them. A batch's `open` is lowered by its runs taken here; its row goes with the
-- last. The overlap policy is the occurrence's (schema 0018; the queue row's was a copy
-- of it): a claim of an 'allow' run took no slot.
-- include: lease_take

-- name: leases_end
-- finish's take of the runs that end (every completion but a retry): leases_held's (one
-- text, the fragment lease_take; see there). The runs left the queue when they were
-- claimed (schema 0022): there is no queue row to delete.
-- include: lease_take

-- name: finish_attempts
-- The attempt's one row, written as it ends (schema 0005), unless its occurrence row
-- keeps it (schema 0013: finish_occurrences; the engine's _kept_on_occurrence); a
-- 'running' row written before 0005 is completed in place.
INSERT INTO attempts AS a (occurrence_id, attempt, lease_token, worker_id, started_at, finished_at,
                           outcome, exit_code, signal, output, error)
SELECT c.occurrence_id, c.attempt, c.lease_token, c.worker_id, c.started_at, %(now)s,
       c.outcome, c.exit_code, c.signal, c.output, c.error
FROM unnest(%(occurrence_ids)b::text[], %(attempts)b::integer[], %(lease_tokens)b::text[],
            %(worker_ids)b::text[], %(started_at)b::timestamptz[], %(outcomes)b::text[],
            %(exit_codes)b::integer[], %(signals)b::integer[], %(outputs)b::text[],
            %(errors)b::text[])
     AS c(occurrence_id, attempt, lease_token, worker_id, started_at, outcome, exit_code, signal,
          output, error)
ON CONFLICT (occurrence_id, attempt) DO UPDATE
SET finished_at = excluded.finished_at, outcome = excluded.outcome, exit_code = excluded.exit_code,
    signal = excluded.signal, output = excluded.output, error = excluded.error
WHERE a.outcome = %(attempt_running)s::text;

-- name: finish_by_index
-- The rest of the finish's transaction plans by key: nested loops over index probes, no
-- sequential scan, hash or merge join (set_config(…, true) is SET LOCAL: until the
-- transaction ends; one statement). Every statement of a finish looks its rows up by key
-- (the lease tokens, the ids), a batch at a time, so a probe per row is the right plan
-- whatever the statistics say — and the statistics of the queue and of this week's
-- partition lag behind a burst. Measured without it: leases_end's DELETE joined its CTE
-- (estimated at 228 rows) to the queue as a hash join over a scan of the whole queue or a
-- merge join over a full index scan, depending on which of ANALYZE and the leader's
-- VACUUM had run since the burst (in one 20,000 drill every finish of 500 took 1.2 s,
-- 3 ms of database time per execution, its plan not captured); and
-- finish_occurrences a hash join over a scan of an analyzed weekly partition of 20,000
-- rows: 2.6 µs of planning and 15.9 of execution per execution against 0.6 and 9.8 by
-- key (tests: test_a_finish_finds_its_leases_by_index_without_statistics,
-- test_a_finish_updates_its_occurrences_by_key_not_by_a_scan_of_their_partition).
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true);

-- name: finish_occurrences
-- Only occurrences leases_held just found RUNNING, under their batch row's lock: none
-- can have moved since (the reaper skips locked rows; cancels and sweeps leave RUNNING
-- ones alone), so there is no state filter to mislead the planner (see leases_extend).
-- inline_attempt_worker: the worker of an attempt whose record is this row (schema 0013;
-- the engine's _kept_on_occurrence), NULL for the others. Planned after finish_by_index:
-- a nested loop probing each key in the partitions (pruned as it runs). An `o.id =
-- ANY(:occurrence_ids)` beside the join pruned partitions as it planned, but made the
-- planner estimate each of the batch's ids (~1.3 ms of planning a batch of 500).
UPDATE occurrences AS o
SET state = c.next_state,
    finished_at = CASE WHEN c.next_state = %(retry_wait)s::text THEN NULL ELSE %(now)s::timestamptz END,
    exit_code = c.exit_code, last_error = c.error, reason = c.reason, inline_attempt_worker = c.inline_worker
FROM unnest(%(occurrence_ids)b::text[], %(exit_codes)b::integer[], %(errors)b::text[],
            %(next_states)b::text[], %(reasons)b::text[], %(inline_workers)b::text[])
     AS c(occurrence_id, exit_code, error, next_state, reason, inline_worker)
WHERE o.id = c.occurrence_id;

-- name: dispatch_delete
DELETE FROM dispatch WHERE id = ANY(%(ids)b::bigint[]);

-- name: dispatch_retry
-- A retried run back in the queue (schema 0022: a claimed run has no queue row), visible
-- at its retry's instant; the occurrence gives queue, tenant and overlap policy.
INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at, overlap)
SELECT o.id, o.queue, o.tenant, c.visible_at, o.overlap
FROM unnest(%(occurrence_ids)b::text[], %(visible_at)b::timestamptz[]) AS c(occurrence_id, visible_at)
CROSS JOIN LATERAL (SELECT o.id, o.queue, o.tenant, o.overlap FROM occurrences AS o
                    WHERE o.id = c.occurrence_id LIMIT 1) AS o
ON CONFLICT (occurrence_id) DO NOTHING;

-- name: dispatch_unlease
-- Runs given back (release) or reaped for a retry: back in the queue (schema 0022: a
-- claimed run has no queue row), visible at :visible_at, or NULL: since their occurrence
-- was available (a run given back was due when it was claimed).
INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at, overlap)
SELECT o.id, o.queue, o.tenant, coalesce(%(visible_at)s::timestamptz, o.available_at), o.overlap
FROM unnest(%(occurrence_ids)b::text[]) AS c(occurrence_id)
CROSS JOIN LATERAL (SELECT o.id, o.queue, o.tenant, o.available_at, o.overlap FROM occurrences AS o
                    WHERE o.id = c.occurrence_id LIMIT 1) AS o
ON CONFLICT (occurrence_id) DO NOTHING;

-- name: release_attempts
-- Only a 'running' row written before schema 0005 can be there.
DELETE FROM attempts AS a
USING unnest(%(occurrence_ids)b::text[], %(attempts)b::integer[]) AS k(occurrence_id, attempt)
WHERE a.occurrence_id = k.occurrence_id AND a.attempt = k.attempt;

-- name: release_occurrences
UPDATE occurrences
SET attempts = attempts - 1,
    state = CASE WHEN attempts - 1 = 0 THEN %(fresh)s::text ELSE %(again)s::text END,
    started_at = CASE WHEN attempts - 1 = 0 THEN NULL ELSE started_at END
WHERE id = ANY(%(ids)b::text[]) AND state = %(running)s::text;

-- ------------------------------------------------------------------ leader

-- name: reap_by_index
-- The rest of the reaper's transaction plans without sequential scans (SET LOCAL: until it
-- ends): every statement of the reap goes by key (reap_pick probes each run's occurrence
-- by id; a scan of a week's partition instead, planned on statistics that lag behind a
-- burst, would read every run of the week).
SET LOCAL enable_seqscan = off;

-- name: reap_lock
-- The batches whose lease ran out (schema 0022: one lease row per claimed batch), oldest
-- first, as many as hold :limit open runs (the first always: one transaction reaps about
-- :limit runs, as it reaped :limit queue rows before), locked SKIP LOCKED (a batch a
-- finish or release holds is being ended: its worker wins). Their runs are read by
-- reap_pick, a statement of its own so that it reads them after these locks: a finish
-- that committed while this statement ran is seen (see leases_lock). (A window function
-- cannot sit beside FOR UPDATE: the count is a subquery's.)
SELECT b.token FROM claim_batches AS b
WHERE b.token = ANY(ARRAY(
        SELECT c.token FROM (SELECT token, sum(open) OVER (ORDER BY lease_until, token) - open AS before
                             FROM claim_batches WHERE lease_until < %(now)s) AS c
        WHERE c.before < %(limit)s))
  AND b.lease_until < %(now)s
ORDER BY b.lease_until, b.token
FOR UPDATE OF b SKIP LOCKED;

-- name: reap_pick
-- The lost runs of the :batches reap_lock locked: each of their occurrences still RUNNING
-- under its batch, (no queue row: NULL, occurrence id, attempt, max attempts, tenant,
-- token, worker id, the attempt's start), oldest lease first; the batch rows are deleted
-- (their other runs ended already).
WITH expired AS MATERIALIZED (
    SELECT b.token, b.worker_id, b.leased_at, b.lease_until, b.occurrence_ids FROM claim_batches AS b
    WHERE b.token = ANY(%(batches)b::text[])
), gone AS (
    DELETE FROM claim_batches AS b WHERE b.token = ANY(%(batches)b::text[])
)
SELECT NULL::bigint, o.id, o.attempts, o.max_attempts, o.tenant, e.token || '.' || o.id, e.worker_id,
       coalesce(e.leased_at, o.started_at)
FROM expired AS e
CROSS JOIN LATERAL unnest(e.occurrence_ids) WITH ORDINALITY AS x(id, n)
CROSS JOIN LATERAL (SELECT o.id, o.attempts, o.max_attempts, o.tenant, o.started_at, o.state, o.lease_batch
                    FROM occurrences AS o WHERE o.id = x.id LIMIT 1) AS o
WHERE o.lease_batch = e.token AND o.state = %(running)s::text
ORDER BY e.lease_until, e.token, x.n;

-- name: reap_attempts
-- The lost attempt's one row (see finish_attempts).
INSERT INTO attempts AS a (occurrence_id, attempt, lease_token, worker_id, started_at, finished_at,
                           outcome, error)
SELECT k.occurrence_id, k.attempt, k.lease_token, coalesce(k.worker_id, ''), coalesce(k.started_at, %(now)s),
       %(now)s, %(attempt_lost)s::text, %(error)s
FROM unnest(%(occurrence_ids)b::text[], %(attempts)b::integer[], %(lease_tokens)b::text[],
            %(worker_ids)b::text[], %(started_at)b::timestamptz[])
     AS k(occurrence_id, attempt, lease_token, worker_id, started_at)
ON CONFLICT (occurrence_id, attempt) DO UPDATE
SET outcome = %(attempt_lost)s::text, finished_at = excluded.finished_at, error = excluded.error
WHERE a.outcome = %(attempt_running)s::text;

-- name: reap_retry
UPDATE occurrences SET state = %(next)s::text
WHERE id = ANY(%(ids)b::text[]) AND state = %(expected)s::text;

-- name: reap_dead
UPDATE occurrences
SET state = %(next)s::text, finished_at = %(now)s,
    reason = replace(replace(%(reason)s::text, '{attempt}', attempts::text), '{max_attempts}',
                     max_attempts::text)
WHERE id = ANY(%(ids)b::text[]) AND state = %(expected)s::text;

-- name: history_extend
-- The weekly partitions of history (schema 0017) from the week holding :since to the one
-- holding :upto that do not exist yet; the number made. The function runs as the tables'
-- owner and does only that (the migration says why).
SELECT clockd_history_extend(%(since)s, %(upto)s);

-- name: history_census
-- The weekly partitions whose week ended by :before: (week, occurrences, live), live being
-- those not both terminal and finished before :before (a scan of each such partition).
SELECT week, occurrences, live FROM clockd_history_census(%(before)s);

-- name: history_drop
-- Detach and drop the week's partitions of occurrences and attempts unless one of its
-- occurrences is queued; true if dropped. Commit at once: detaching locks the parents.
SELECT clockd_history_drop(%(week)s);

-- name: prune
-- Terminal occurrences both due and finished before :before, oldest due first: a walk
-- of occurrences_recent (schema 0006: no index names finished_at, so the finish's update
-- is HOT; a run canceled ahead of its instant goes once that instant is old enough).
-- Attempts, outbox and dispatch rows go with their occurrence, deleted here (schema 0005
-- dropped their foreign keys and the cascade; a terminal occurrence has no outbox or
-- dispatch row, the two deletes are the cascade's safety net). The row count is the
-- number of occurrences deleted.
WITH gone AS (
    DELETE FROM occurrences WHERE id = ANY(ARRAY(
        SELECT id FROM occurrences
        WHERE scheduled_for < %(before)s AND finished_at < %(before)s
          AND state IN ('SUCCEEDED', 'DEAD', 'MISSED', 'SKIPPED_OVERLAP', 'CANCELED')
        ORDER BY scheduled_for LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED))
    RETURNING id
), attempts_gone AS (
    DELETE FROM attempts WHERE occurrence_id = ANY(ARRAY(SELECT id FROM gone))
), outbox_gone AS (
    DELETE FROM outbox WHERE occurrence_id = ANY(ARRAY(SELECT id FROM gone))
), dispatch_gone AS (
    DELETE FROM dispatch WHERE occurrence_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT id FROM gone;

-- ------------------------------------------------------------------ health

-- name: write_probe
-- /healthz's write (Store.probe_write): a write transaction's round trip, nothing written.
-- A server that cannot write its WAL stops (store_reachable says so); a full data disk
-- fails the writes the modes make (STORE_WRITES). A row rewritten here would leave a dead
-- tuple per probe and need a privilege roles.sql does not give clockd_daemon.
SELECT 1;

-- ------------------------------------------------------------------ the queue's upkeep

-- name: queue_vacuum_allowed
-- Whether this role's VACUUM of the queue would do anything: PostgreSQL 15 vacuums a
-- table for its owner (or a member of that role), the database's owner and superusers,
-- and only warns and skips it for anyone else (clockd_daemon of roles.sql owns nothing).
SELECT pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE')
FROM pg_class AS c, pg_database AS d
WHERE c.oid = 'dispatch'::regclass AND d.datname = current_database();

-- name: queue_vacuum
-- SKIP_LOCKED: an autovacuum (or another VACUUM) already at the table does the same
-- work, so this one never waits for it. TRUNCATE false: giving the empty pages at the
-- table's end back to the file system takes an ACCESS EXCLUSIVE lock — which every
-- claim would queue behind — and VACUUM tries for it up to 5 s (the leader's tick with
-- it; a twentieth of the active backends' samples in a sustained run were that wait), for
-- pages the next inserts need again. Outside a transaction (pool connections are
-- autocommit; VACUUM refuses to run in one).
VACUUM (SKIP_LOCKED, TRUNCATE false) dispatch;

-- name: stale_statistics_analyze
-- ANALYZE (SKIP_LOCKED) each hot table whose statistics may say "empty" while it fills:
-- the queue and the history's partitions, when their statistics count fewer rows than
-- the table has pages (a full page holds ~70 queue rows, ~40 occurrences) and more than
-- 1,000 rows were inserted, updated or deleted since their last ANALYZE. The planner
-- estimates a table's rows as reltuples / relpages × its pages now, so a table counted
-- with pages and no rows is planned as one row however much it has since taken in:
--   * the queue: the leader's VACUUM of a drained queue keeps its pages (TRUNCATE false)
--     and counts 0 rows, and a VACUUM after the next staging keeps that count when it
--     scans under 2 % of the pages (test_postgres_only.py: test_a_burst_staged_after_
--     the_queue_was_vacuumed_empty_is_claimed_by_key) — the claim's lease then joined its
--     starters by a full scan of dispatch_pkey, 4.5 s for 500 of 20,000 rows;
--   * a week's partition of occurrences counted while the first rows written to it
--     were not yet committed (ANALYZE counts no other transaction's insert in progress:
--     the leader's ANALYZE of history at its first prune, or autovacuum's, beside the
--     materializer's first batch) — the finish then joined its batch to every
--     partition by a full scan of each partition's key, materialized, ~1 s per finish
--     of 500 (run II2's 20,000 drill drained at 637/s: test_a_finish_after_its_partition_
--     was_counted_empty_probes_by_key).
-- Autovacuum's ANALYZE comes at most once per autovacuum_naptime (a minute), and not at
-- all while its rule (50 + 10 % of the rows counted) is not met; this is checked each
-- queue_vacuum_every. The page test keeps it to such tables: a full or draining one
-- (VACUUM keeps its count) is not analyzed every few thousand executions — ~40 ms at
-- 20,000 rows, ~0.17 s at 500,000 on this machine. n_mod_since_analyze is the cumulative
-- statistics' count: a busy backend reports its changes within about a second, one left
-- idle up to 10 s later; until then, and until the next tick, such a table is still
-- planned as one row. Partitions made ahead and analyzed empty have no pages counted
-- (relpages 0: the planner then estimates from the table's size) and are left alone.
-- A DO block: ANALYZE takes its tables by name. No percent sign in it (the driver's
-- parameter syntax).
DO $$
DECLARE
    stale regclass;
BEGIN
    FOR stale IN
        SELECT c.oid::regclass
        FROM pg_class AS c JOIN pg_stat_user_tables AS s ON s.relid = c.oid
        WHERE (c.oid = 'dispatch'::regclass
               OR c.oid IN (SELECT i.inhrelid FROM pg_inherits AS i
                            WHERE i.inhparent IN ('occurrences'::regclass, 'attempts'::regclass)))
          AND c.reltuples < c.relpages AND s.n_mod_since_analyze > 1000
    LOOP
        EXECUTE 'ANALYZE (SKIP_LOCKED) ' || stale::text;
    END LOOP;
END
$$;

-- ------------------------------------------------------------------ observation

-- fragment: leased_runs
-- Every run leased now (schema 0022): the occurrences of each claimed batch still RUNNING
-- under it, each probed by id (a nested loop of probes whatever the statistics: never a
-- join over a scan of the history). A FROM list and its WHERE: `b` the batch row, `o`
-- the occurrence (queue, tenant).
    FROM claim_batches AS b
    CROSS JOIN LATERAL unnest(b.occurrence_ids) AS x(id)
    CROSS JOIN LATERAL (SELECT o.queue, o.tenant, o.state, o.lease_batch FROM occurrences AS o
                        WHERE o.id = x.id LIMIT 1) AS o
    WHERE o.lease_batch = b.token AND o.state = %(running)s::text

-- name: backlog
-- The leader samples it every 10 s (and `clockctl status` shows it): due schedules, the
-- outbox, the runs leased (as many as jobs are running: the open runs of the claimed
-- batches, schema 0022). What waits in the queue is
-- queue_ready's. The due schedules are counted shard by shard over schedules_due's range
-- up to now (the shards found by a skip scan): a count over the whole index, whose
-- leading column is the shard, read every active schedule (1 M in the scale scenario)
-- to find the few due.
WITH RECURSIVE shards (shard) AS (
    SELECT (SELECT shard FROM schedules WHERE state = 'active' ORDER BY shard LIMIT 1)
    UNION ALL
    SELECT (SELECT s.shard FROM schedules AS s
            WHERE s.state = 'active' AND s.shard > shards.shard ORDER BY s.shard LIMIT 1)
    FROM shards WHERE shards.shard IS NOT NULL
)
SELECT (SELECT coalesce(sum(due.count), 0) FROM shards AS k
        CROSS JOIN LATERAL (SELECT count(*) AS count FROM schedules AS s
                            WHERE s.state = 'active' AND s.shard = k.shard
                              AND s.next_run_at <= %(now)s) AS due
        WHERE k.shard IS NOT NULL),
       (SELECT count(*) FROM outbox),
       (SELECT coalesce(sum(open), 0) FROM claim_batches);

-- name: queue_ready
-- Per queue with an unleased row: the rows claimable now and the oldest of them. Only
-- those: with direct dispatch the queue also holds the horizon's rows planned ahead
-- (rate × horizon, 1.2 M at 10,000/s with the default 2 min), which are not waiting for
-- anyone, and counting them every sample read them all. The queues are found by a skip
-- scan of dispatch_ready (misfire_pick's walk: change both), each counted over its range
-- up to now.
WITH RECURSIVE queues (queue) AS (
    SELECT (SELECT queue FROM dispatch WHERE lease_token IS NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT d.queue FROM dispatch AS d
            WHERE d.lease_token IS NULL AND d.queue > queues.queue ORDER BY d.queue LIMIT 1)
    FROM queues WHERE queues.queue IS NOT NULL
)
SELECT q.queue, ready.count, ready.oldest
FROM queues AS q
CROSS JOIN LATERAL (
    SELECT count(*) AS count, min(dispatch.visible_at) AS oldest FROM dispatch
    WHERE dispatch.lease_token IS NULL AND dispatch.queue = q.queue AND dispatch.visible_at <= %(now)s
) AS ready
WHERE q.queue IS NOT NULL
ORDER BY q.queue;

-- ================================================================== policies (schema 0002)
-- Misfire, overlap, tenant limits, idempotent create, dead letters. DESIGN.md §4.

-- ------------------------------------------------------------------ idempotent create, quotas

-- name: schedule_set_idempotency_key
-- Unique per tenant among live schedules (schedules_idempotency): a duplicate raises.
UPDATE schedules SET idempotency_key = %(key)s WHERE id = %(id)s;

-- name: schedule_get_by_idempotency_key
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules WHERE tenant = %(tenant)s AND idempotency_key = %(key)s AND state <> 'deleted';

-- name: tenant_limits_lock
-- A create's quota check, step 1: the tenant's schedule cap, locked until the create
-- commits, so concurrent creates of one tenant count one after the other (step 2 is a
-- statement of its own: it sees what the previous holder committed).
SELECT max_schedules FROM tenant_limits
WHERE tenant = %(tenant)s AND max_schedules IS NOT NULL
FOR UPDATE;

-- name: tenant_schedules_count
-- Step 2: the tenant's live schedules (an index range of schedules_live_name).
SELECT count(*) FROM schedules WHERE tenant = %(tenant)s AND state <> 'deleted';

-- name: tenant_limits_lock_many
-- apply_schedules' quota check, step 1, for every tenant of a batch at once: as
-- tenant_limits_lock, the rows locked in tenant order.
SELECT tenant, max_schedules FROM tenant_limits
WHERE tenant = ANY(%(tenants)b::text[]) AND max_schedules IS NOT NULL
ORDER BY tenant
FOR UPDATE;

-- name: tenant_schedules_count_many
-- Step 2: the live schedules of each of those tenants (a statement of its own, as
-- tenant_schedules_count).
SELECT tenant, count(*) FROM schedules
WHERE tenant = ANY(%(tenants)b::text[]) AND state <> 'deleted'
GROUP BY tenant;

-- ------------------------------------------------------------------ tenant limits

-- name: tenant_limits_upsert
INSERT INTO tenant_limits (tenant, max_schedules, max_running, max_triggers_per_minute,
                           catch_up_rate, updated_at)
VALUES (%(tenant)s, %(max_schedules)s::integer, %(max_running)s::integer,
        %(max_triggers_per_minute)s::integer, %(catch_up_rate)s::integer, %(now)s)
ON CONFLICT (tenant) DO UPDATE
SET max_schedules = EXCLUDED.max_schedules, max_running = EXCLUDED.max_running,
    max_triggers_per_minute = EXCLUDED.max_triggers_per_minute,
    catch_up_rate = EXCLUDED.catch_up_rate, updated_at = EXCLUDED.updated_at;

-- name: tenant_running_recount
-- After tenant_limits_upsert, whose row lock keeps the tenant's claims out (they skip a
-- locked row) and its finishes waiting: a new statement, so the count sees every claim
-- committed before the lock was taken.
UPDATE tenant_limits
SET running = (SELECT count(*)
-- include: leased_runs
                 AND o.tenant = %(tenant)s)
WHERE tenant = %(tenant)s;

-- name: tenant_limits_all
SELECT tenant, max_schedules, max_running, max_triggers_per_minute, catch_up_rate
FROM tenant_limits ORDER BY tenant;

-- name: tenant_usage
-- Every tenant that has live schedules (a skip scan of schedules_live_name) or limits,
-- with its limits and what it uses.
WITH RECURSIVE named (tenant) AS (
    SELECT (SELECT tenant FROM schedules WHERE state <> 'deleted' ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT s.tenant FROM schedules AS s
            WHERE s.state <> 'deleted' AND s.tenant > named.tenant ORDER BY s.tenant LIMIT 1)
    FROM named WHERE named.tenant IS NOT NULL
), tenants (tenant) AS (
    SELECT tenant FROM named WHERE tenant IS NOT NULL
    UNION
    SELECT tenant FROM tenant_limits
), running AS MATERIALIZED (
    SELECT o.tenant, count(*) AS n
-- include: leased_runs
    GROUP BY o.tenant
)
SELECT t.tenant, l.max_schedules, l.max_running, l.max_triggers_per_minute, l.catch_up_rate,
       (SELECT count(*) FROM schedules AS s WHERE s.tenant = t.tenant AND s.state <> 'deleted'),
       coalesce((SELECT r.n FROM running AS r WHERE r.tenant = t.tenant), 0)
FROM tenants AS t LEFT JOIN tenant_limits AS l ON l.tenant = t.tenant
ORDER BY t.tenant;

-- name: tenant_running_release
-- :tenants = one entry per claim that ends or is given back (finish, release, reap): a
-- capped tenant's running count goes down.
UPDATE tenant_limits AS l SET running = greatest(0, l.running - c.n)
FROM (SELECT tenant, count(*) AS n FROM unnest(%(tenants)b::text[]) AS t(tenant)
      GROUP BY tenant) AS c
WHERE l.tenant = c.tenant
  AND (l.max_running IS NOT NULL OR l.max_triggers_per_minute IS NOT NULL);

-- ------------------------------------------------------------------ overlap slots

-- name: overlap_release
-- The slots held by these ended occurrences (SUCCEEDED, DEAD, MISSED, …) pass to their
-- waiter, which goes back into the queue claimable now; or they become free.
WITH released AS (
    UPDATE overlap_slots AS g
    SET running_id = (SELECT o.id FROM occurrences AS o
                      WHERE o.id = g.waiting_id AND o.state IN ('ENQUEUED', 'RETRY_WAIT')),
        waiting_id = NULL
    WHERE g.running_id = ANY(%(ids)b::text[])
    RETURNING g.running_id AS handed_to
)
INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at, overlap)
SELECT o.id, o.queue, o.tenant, %(now)s, o.overlap
FROM released JOIN occurrences AS o ON o.id = released.handed_to
WHERE o.state IN ('ENQUEUED', 'RETRY_WAIT')
ON CONFLICT (occurrence_id) DO NOTHING;

-- ------------------------------------------------------------------ leader: misfire sweep

-- name: misfire_pick
-- Queued rows (ENQUEUED / RETRY_WAIT, not run-now) claimable for longer than their
-- schedule's max_lateness. The oldest :limit waiting rows of each queue (older than
-- :floor) name the schedules to look at; then every late row of those schedules comes
-- back, locked (a row being claimed right now is skipped: the claim wins), with what the
-- misfire policy needs (clockd.core.planning.sweep_verdict): its rank from the latest
-- late row of its schedule (1 = latest) and whether a newer instant of the schedule is
-- already due and not missed. Parked rows (visible_at infinity) are never late. The walk
-- of the queues is queue_ready's too (the SQL files have no includes): change both.
WITH RECURSIVE queues (queue) AS (
    SELECT (SELECT queue FROM dispatch WHERE lease_token IS NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT d.queue FROM dispatch AS d
            WHERE d.lease_token IS NULL AND d.queue > queues.queue ORDER BY d.queue LIMIT 1)
    FROM queues WHERE queues.queue IS NOT NULL
), scanned AS (
    SELECT x.id FROM queues AS q
    CROSS JOIN LATERAL (
        SELECT dispatch.id FROM dispatch
        WHERE dispatch.lease_token IS NULL AND dispatch.queue = q.queue
          AND dispatch.visible_at < %(now)s::timestamptz - %(floor)s::interval
        ORDER BY dispatch.visible_at, dispatch.id LIMIT %(limit)s
    ) AS x
    WHERE q.queue IS NOT NULL
), late_schedules AS (
    SELECT DISTINCT o.schedule_id
    FROM dispatch AS d
    JOIN occurrences AS o ON o.id = d.occurrence_id
    JOIN schedules AS s ON s.id = o.schedule_id
    WHERE d.id = ANY(ARRAY(SELECT id FROM scanned))
      AND o.state IN ('ENQUEUED', 'RETRY_WAIT') AND NOT o.manual
      AND d.visible_at < %(now)s::timestamptz - coalesce((s.spec->>'max_lateness_us')::bigint, %(default_max_lateness_us)s::bigint)
                                   * interval '1 microsecond'
), late AS (
    -- Every late row of the late schedules, found from the schedules (none late: nothing
    -- read), each step a probe by key. A join planned on the queue's statistics read
    -- every unleased queue row instead (0.6 s a sweep over a 100,000-row drain, every
    -- 5 s; 1 s a sweep with 1,000 schedules late in a 30,000-row queue): right after a
    -- burst, before any ANALYZE, the planner takes the unleased rows for 1 in 200 of the
    -- queue and walks a ready index rather than probe by key. So the queue row is found
    -- by its occurrence (q) and locked by its id (d), each a LIMIT 1 subquery (no
    -- condition of the outer query is pushed into it: only the key's index fits): q's
    -- snapshot picks what to lock, d's locked row (a row being claimed right now is
    -- skipped: the claim wins) is checked again.
    -- (test_postgres_only.py: test_a_misfire_sweep_reads_only_the_rows_it_looks_at)
    SELECT d.id AS dispatch_id, o.id, o.schedule_id, o.scheduled_for, d.visible_at,
           coalesce(s.spec->>'misfire', %(default_misfire)s::text) AS misfire,
           r.max_lateness_us,
           coalesce((s.spec->>'catch_up_limit')::integer, %(default_catch_up_limit)s::integer) AS catch_up_limit
    FROM unnest(ARRAY(SELECT schedule_id FROM late_schedules)) AS l(schedule_id)
    JOIN schedules AS s ON s.id = l.schedule_id
    CROSS JOIN LATERAL (  -- the schedule's rule, once: late when visible before late_before
        SELECT us AS max_lateness_us, %(now)s::timestamptz - us * interval '1 microsecond' AS late_before
        FROM (SELECT coalesce((s.spec->>'max_lateness_us')::bigint, %(default_max_lateness_us)s::bigint) AS us) AS x
    ) AS r
    JOIN occurrences AS o ON o.schedule_id = l.schedule_id
    CROSS JOIN LATERAL (SELECT dispatch.id, dispatch.lease_token, dispatch.visible_at FROM dispatch
                        WHERE dispatch.occurrence_id = o.id LIMIT 1) AS q
    CROSS JOIN LATERAL (SELECT dispatch.id, dispatch.lease_token, dispatch.visible_at FROM dispatch
                        WHERE dispatch.id = q.id LIMIT 1 FOR UPDATE SKIP LOCKED) AS d
    WHERE o.state IN ('ENQUEUED', 'RETRY_WAIT') AND NOT o.manual
      AND q.lease_token IS NULL AND q.visible_at < r.late_before   -- what to lock
      AND d.lease_token IS NULL AND d.visible_at < r.late_before   -- still so, locked
)
SELECT late.dispatch_id, late.id, late.visible_at, late.misfire, late.max_lateness_us,
       late.catch_up_limit,
       row_number() OVER (PARTITION BY late.schedule_id
                          ORDER BY late.scheduled_for DESC, late.id DESC) AS newest,
       EXISTS (SELECT 1 FROM occurrences AS n
               WHERE n.schedule_id = late.schedule_id AND NOT n.manual
                 AND n.scheduled_for > late.scheduled_for AND n.scheduled_for <= %(now)s::timestamptz
                 AND n.state NOT IN ('MISSED', 'CANCELED', 'SKIPPED_OVERLAP')) AS newer_due
FROM late;

-- name: misfire_mark
UPDATE occurrences AS o SET state = %(next)s::text, finished_at = %(now)s, reason = c.reason
FROM unnest(%(ids)b::text[], %(reasons)b::text[]) AS c(id, reason)
WHERE o.id = c.id AND o.state = ANY(%(expected)b::text[]);

-- name: overlap_stale
-- Slots whose holder ended without releasing them (canceled or missed while it waited
-- to retry), for overlap_release. A slot a claimer holds is skipped.
SELECT g.running_id
FROM overlap_slots AS g LEFT JOIN occurrences AS o ON o.id = g.running_id
WHERE g.running_id IS NOT NULL
  AND (o.id IS NULL OR o.state IN ('SUCCEEDED', 'DEAD', 'MISSED', 'SKIPPED_OVERLAP', 'CANCELED'))
LIMIT %(limit)s
FOR UPDATE OF g SKIP LOCKED;

-- ------------------------------------------------------------------ occurrences: running, dead letters

-- name: occurrences_running
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.schedule_id = %(schedule_id)s AND o.state = 'RUNNING'
ORDER BY o.scheduled_for, o.id;

-- name: dlq_list
-- DEAD occurrences, the most recently dead first (occurrences_dead), with their last error;
-- a page after another: keyset on (dead_at, id), the last row of the page before.
-- `o.dead_at IS NOT NULL`, not `o.state = 'DEAD'`: occurrences_dead is on dead_at (0006:
-- no index names state or finished_at, so the hot path's updates can be HOT), and the
-- planner does not know that a generated column's value follows state: only the
-- predicate itself in the query proves it. dead_at is stored as finished_at while DEAD.
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason, o.last_error
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.dead_at IS NOT NULL AND (%(tenant)s::text IS NULL OR o.tenant = %(tenant)s)
  AND (%(before_at)s::timestamptz IS NULL OR (o.dead_at, o.id) < (%(before_at)s, %(before_id)s::text))
ORDER BY o.dead_at DESC, o.id DESC LIMIT %(limit)s;

-- name: dlq_list_by_schedule
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason, o.last_error
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.schedule_id = %(schedule_id)s AND o.dead_at IS NOT NULL
  AND (%(before_at)s::timestamptz IS NULL OR (o.dead_at, o.id) < (%(before_at)s, %(before_id)s::text))
ORDER BY o.dead_at DESC, o.id DESC LIMIT %(limit)s;

-- name: dlq_replay
-- A DEAD occurrence back to the queue, same id, allowed one attempt more than it has
-- had (the claim numbers it attempts + 1). last_error stays until that attempt ends.
UPDATE occurrences
SET state = %(next)s::text, max_attempts = attempts + 1, finished_at = NULL,
    enqueued_at = %(now)s, reason = %(reason)s
WHERE id = %(id)s AND state = %(expected)s::text
RETURNING id;

-- name: dlq_dispatch
INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at, overlap)
SELECT id, queue, tenant, %(now)s, overlap FROM occurrences WHERE id = %(id)s AND state = %(next)s::text
ON CONFLICT (occurrence_id) DO NOTHING;

-- name: dlq_drop
-- Dropped from the dead-letter queue: CANCELED with the reason, history (attempts,
-- last_error) kept until retention prunes it.
UPDATE occurrences SET state = %(next)s::text, finished_at = %(now)s, reason = %(reason)s
WHERE id = %(id)s AND state = %(expected)s::text
RETURNING id;

-- ================================================================== operator read paths
-- clockctl reconcile / explain / status and the leader's samples. Reads only; the
-- SQLite store has the same names. The reconcile pair runs in one REPEATABLE READ,
-- READ ONLY transaction (postgres_only.sql: snapshot_read), so cursors, versions and
-- occurrences come from one snapshot.

-- name: reconcile_versions
-- Every version of the schedules that matter for [:start, :end]: one with a version in
-- force during the range (a deletion before :start does not count), or with a planned
-- occurrence in it. Each line carries the schedule's current row (cursor, anchor).
SELECT s.id, s.tenant, s.name, s.state, s.version, s.next_run_at, s.created_at,
       v.version, v.state, v.valid_from, v.valid_to, v.definition, v.next_run_at
FROM schedule_versions AS v JOIN schedules AS s ON s.id = v.schedule_id
WHERE v.schedule_id IN (
    SELECT schedule_id FROM schedule_versions
    WHERE valid_from <= %(end)s AND (valid_to IS NULL OR valid_to >= %(start)s)
      AND NOT (state = 'deleted' AND valid_from < %(start)s)
    UNION
    SELECT schedule_id FROM occurrences
    WHERE scheduled_for >= %(start)s AND scheduled_for <= %(end)s AND NOT manual)
ORDER BY v.schedule_id, v.version;

-- name: reconcile_versions_of
SELECT s.id, s.tenant, s.name, s.state, s.version, s.next_run_at, s.created_at,
       v.version, v.state, v.valid_from, v.valid_to, v.definition, v.next_run_at
FROM schedule_versions AS v JOIN schedules AS s ON s.id = v.schedule_id
WHERE v.schedule_id = %(schedule_id)s
ORDER BY v.version;

-- name: reconcile_occurrences
-- Planned occurrences due in [:start, :end], any state (occurrences_recent).
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason, o.last_error
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.scheduled_for >= %(start)s AND o.scheduled_for <= %(end)s AND NOT o.manual;

-- name: reconcile_occurrences_of
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason, o.last_error
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.schedule_id = %(schedule_id)s AND o.scheduled_for >= %(start)s
  AND o.scheduled_for <= %(end)s AND NOT o.manual;

-- name: next_visible
-- When the asked queues' next unleased row becomes visible (the earliest visible_at after
-- :now; NULL: none staged): an idle worker sleeps until then rather than a whole poll.
-- dispatch_ready's first entry past :now in each queue, one statement for all of them.
SELECT min(n.visible_at) FROM unnest(%(queues)b::text[]) AS q(queue)
CROSS JOIN LATERAL (
    SELECT d.visible_at FROM dispatch AS d
    WHERE d.queue = q.queue AND d.lease_token IS NULL AND d.visible_at > %(now)s
    ORDER BY d.visible_at LIMIT 1
) AS n;

-- name: queue_upcoming_definitions
-- The definitions (schedule_id, version) of the asked queues' unleased rows after the
-- position (:after_at, :after_id) in queue order (visible_at, id), the first :limit of
-- them with their positions: what an idle worker reads into its claim cache ahead of a
-- burst staged in the queue (Store.read_ahead_definitions). dispatch_ready from the
-- position in each queue, then one probe of each row's occurrence (LIMIT 1: a nested
-- loop of probes, never a join over a scan of the history, whatever the estimates).
SELECT u.visible_at, u.id, o.schedule_id, o.schedule_version
FROM (SELECT n.visible_at, n.id, n.occurrence_id
      FROM unnest(%(queues)b::text[]) AS q(queue)
      CROSS JOIN LATERAL (
          SELECT d.visible_at, d.id, d.occurrence_id FROM dispatch AS d
          WHERE d.queue = q.queue AND d.lease_token IS NULL
            AND (d.visible_at, d.id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
          ORDER BY d.visible_at, d.id LIMIT %(limit)s
      ) AS n
      ORDER BY n.visible_at, n.id LIMIT %(limit)s) AS u
CROSS JOIN LATERAL (SELECT o.schedule_id, o.schedule_version FROM occurrences AS o
                    WHERE o.id = u.occurrence_id LIMIT 1) AS o
ORDER BY u.visible_at, u.id;

-- name: queue_stats
-- The queue per queue name. `staged` includes rows waiting out a retry backoff and
-- queue_one's parked waiter. The leased runs are no queue rows (schema 0022): counted
-- from the claimed batches, per their occurrence's queue.
WITH queued AS (
    SELECT queue,
           count(*) FILTER (WHERE visible_at <= %(now)s) AS ready,
           count(*) FILTER (WHERE visible_at > %(now)s) AS staged,
           min(visible_at) FILTER (WHERE visible_at <= %(now)s) AS oldest
    FROM dispatch WHERE lease_token IS NULL GROUP BY queue
), leased AS (
    SELECT o.queue, count(*) AS n
-- include: leased_runs
    GROUP BY o.queue
)
SELECT coalesce(q.queue, l.queue), coalesce(q.ready, 0), coalesce(l.n, 0), coalesce(q.staged, 0), q.oldest
FROM queued AS q FULL JOIN leased AS l ON l.queue = q.queue
ORDER BY 1;

-- name: start_lag
-- Seconds from due to the first attempt's start of the occurrences due in [:since, :now]
-- (found through occurrences_recent: available_at is at most the 5-minute window after
-- scheduled_for); one still waiting counts with its lag so far. NULL percentiles when
-- there is none.
SELECT count(*),
       percentile_cont(ARRAY[0.5, 0.95, 0.99]::float8[]) WITHIN GROUP (
           ORDER BY extract(epoch FROM coalesce(started_at, %(now)s) - available_at)::float8)
FROM occurrences
WHERE scheduled_for >= %(since)s::timestamptz - %(window)s::interval AND scheduled_for <= %(now)s
  AND available_at >= %(since)s AND available_at <= %(now)s
  AND (started_at IS NOT NULL OR state IN ('SCHEDULED', 'ENQUEUED'));

-- name: live_schedules_count
-- Schedules not deleted: the leader's reconciler checks the fleet size before loading it.
SELECT count(*) FROM schedules WHERE state <> 'deleted';

-- name: dead_count
-- The dead-letter queue's size, from the occurrences_dead partial index (`dead_at IS NOT
-- NULL`, as dlq_list says why).
SELECT count(*) FROM occurrences WHERE dead_at IS NOT NULL;

-- name: not_run_counts
-- MISSED / SKIPPED_OVERLAP occurrences that ended in [:since, :until) (occurrences_not_run:
-- not_run_at is finished_at while in those states, schema 0006), by kind: never queued =
-- misfire at materialization, queued = the leader's lateness sweep.
SELECT state,
       CASE WHEN state = 'SKIPPED_OVERLAP' THEN 'overlap'
            WHEN enqueued_at IS NULL THEN 'misfire'
            ELSE 'lateness' END AS kind,
       count(*)
FROM occurrences
WHERE not_run_at >= %(since)s AND not_run_at < %(until)s
GROUP BY 1, 2;

-- ------------------------------------------------------------------ API: tokens, audit, pages (schema 0007)

-- name: api_token_insert
INSERT INTO api_tokens (id, tenant, name, role, hash, created_at, expires_at)
VALUES (%(id)s, %(tenant)s, %(name)s, %(role)s, %(hash)s, %(created_at)s, %(expires_at)s);

-- name: api_token_get
SELECT id, tenant, name, role, hash, created_at, expires_at, revoked_at FROM api_tokens WHERE id = %(id)s;

-- name: api_tokens_list
SELECT id, tenant, name, role, hash, created_at, expires_at, revoked_at FROM api_tokens
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s) ORDER BY tenant, name, created_at;

-- name: api_token_revoke
-- The tenant's unrevoked token with that id or name (never another tenant's).
UPDATE api_tokens SET revoked_at = %(now)s
WHERE revoked_at IS NULL AND tenant = %(tenant)s AND (id = %(ref)s OR name = %(ref)s)
RETURNING id, tenant, name, role, hash, created_at, expires_at, revoked_at;

-- name: audit_insert
INSERT INTO audit_log (at, tenant, actor, action, target, before_version, after_version, detail)
VALUES (%(at)s, %(tenant)s, %(actor)s, %(action)s, %(target)s, %(before_version)s, %(after_version)s,
        %(detail)s::jsonb)
RETURNING id;

-- name: audit_page
-- Newest first, keyset on id (audit_log_tenant; all tenants: the primary key).
SELECT id, at, tenant, actor, action, target, before_version, after_version, detail::text FROM audit_log
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s) AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC LIMIT %(limit)s;

-- name: schedules_page
-- A keyset page of a tenant's live schedules by name (schedules_live_name): the scan
-- starts after the cursor and stops at LIMIT or at :upto, whatever the table holds. A name
-- prefix narrows the range itself (clockd.store.api_rows.schedule_page_params: :after is
-- at least just below the prefix, :upto just above it); the prefix test keeps it exact.
-- Names are COLLATE "C" (schema 0001): the order, and so the cursor, is by code point as
-- in SQLite.
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules
WHERE tenant = %(tenant)s AND state <> 'deleted' AND name > %(after)s AND name < %(upto)s
  AND (%(prefix)s::text IS NULL OR starts_with(name, %(prefix)s))
ORDER BY name LIMIT %(limit)s;

-- name: occurrences_page
-- A tenant's occurrences newest first, keyset on (scheduled_for, id) (occurrences_recent,
-- or occurrences_by_schedule for one schedule).
SELECT o.id, o.schedule_id, s.name, o.schedule_version, o.scheduled_for, o.available_at,
       o.state, o.attempts, o.queue, o.manual, o.enqueued_at, o.started_at, o.finished_at,
       o.exit_code, o.reason
FROM occurrences AS o JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.tenant = %(tenant)s
  AND (%(schedule_id)s::text IS NULL OR o.schedule_id = %(schedule_id)s)
  AND (%(state)s::text IS NULL OR o.state = %(state)s)
  AND (%(since)s::timestamptz IS NULL OR o.scheduled_for >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR o.scheduled_for < %(until)s)
  AND (%(before_at)s::timestamptz IS NULL OR (o.scheduled_for, o.id) < (%(before_at)s, %(before_id)s::text))
ORDER BY o.scheduled_for DESC, o.id DESC LIMIT %(limit)s;

-- name: run_summaries
-- Per schedule of a page (clockctl list, the dashboard): the earliest start of its
-- occurrences still waiting (:waiting) among its :depth newest, and its latest occurrence
-- that started. Both walk occurrences_by_schedule (schedule_id, scheduled_for DESC).
SELECT ids.id,
       (SELECT min(w.available_at) FROM (
            SELECT o.available_at, o.state FROM occurrences AS o
            WHERE o.schedule_id = ids.id ORDER BY o.scheduled_for DESC LIMIT %(depth)s) AS w
        WHERE w.state = ANY(%(waiting)b::text[])),
       l.scheduled_for, l.started_at, l.state, l.exit_code
FROM unnest(%(ids)b::text[]) AS ids(id)
LEFT JOIN LATERAL (
    SELECT o.scheduled_for, o.started_at, o.state, o.exit_code FROM occurrences AS o
    WHERE o.schedule_id = ids.id AND o.started_at IS NOT NULL
    ORDER BY o.scheduled_for DESC LIMIT 1) AS l ON true;

-- ------------------------------------------------------------------ dashboard reads (issue 17)

-- name: start_lag_histogram
-- The start lags (seconds) of every occurrence due at :at (occurrences_recent), as
-- start_lag counts them, in :bins equal bins from min(0, lowest) to the highest: one row
-- per non-empty bin (bin, count), each with the totals; one row of totals when none.
WITH w AS MATERIALIZED (
    SELECT extract(epoch FROM coalesce(started_at, %(now)s) - available_at)::float8 AS lag FROM occurrences
    WHERE scheduled_for = %(at)s AND (started_at IS NOT NULL OR state IN ('SCHEDULED', 'ENQUEUED'))
), r AS (SELECT count(*) AS n, least(0, min(lag)) AS low, coalesce(max(lag), 0) AS high FROM w)
SELECT r.n, r.low, r.high, b.bin, b.c
FROM r LEFT JOIN (
    SELECT least(%(bins)s - 1, floor((w.lag - r.low) * %(bins)s / greatest(r.high - r.low, 1e-6)))::int AS bin,
           count(*) AS c
    FROM w, r GROUP BY 1) AS b ON true
ORDER BY b.bin;

-- name: occurrences_set_reason
-- The reason of occurrences a change just canceled: re-planned, or dropped by the new version.
UPDATE occurrences SET reason = %(reason)s WHERE id = ANY(%(ids)b::text[]);

-- ------------------------------------------------------------------ direct dispatch (issue 18)

-- name: materialize_insert_enqueued
-- materialize_insert with direct_dispatch, one statement: the occurrences, SCHEDULED
-- ones written already ENQUEUED (enqueued_at = :now) with no outbox row, and the dispatch
-- rows of those inserted ENQUEUED (what relay_dispatch would write), chained on the
-- insert's RETURNING. As two statements (the ids back to the engine, then the dispatch
-- insert reading each occurrence again by id) the materializer's transaction took
-- 1.2-1.3 x as long per row as the relay path's materialize_insert; chained, 1.1 x
-- (measured 2026-12-03, 200,000 rows in batches of 1,000; bench/staging.py has the
-- database time of both paths, relay included).
WITH inserted AS (
    INSERT INTO occurrences (id, schedule_id, schedule_version, tenant, queue, scheduled_for,
                             available_at, state, max_attempts, reason, finished_at, enqueued_at,
                             overlap)
    SELECT u.id, u.schedule_id, u.version, u.tenant, u.queue, u.scheduled_for, u.available_at,
           CASE WHEN u.state = %(scheduled)s::text THEN %(enqueued)s::text ELSE u.state END,
           u.max_attempts, u.reason, u.finished_at,
           CASE WHEN u.state = %(scheduled)s::text THEN %(now)s::timestamptz END, u.overlap
    FROM unnest(%(ids)b::text[], %(schedule_ids)b::text[], %(versions)b::integer[],
                %(tenants)b::text[], %(queues)b::text[], %(scheduled_for)b::timestamptz[],
                %(available_at)b::timestamptz[], %(states)b::text[],
                %(max_attempts)b::integer[], %(reasons)b::text[], %(finished_at)b::timestamptz[],
                %(overlaps)b::text[])
         AS u(id, schedule_id, version, tenant, queue, scheduled_for, available_at, state,
              max_attempts, reason, finished_at, overlap)
    ON CONFLICT DO NOTHING
    RETURNING id, state, queue, tenant, available_at, overlap
), queued AS (
    INSERT INTO dispatch (occurrence_id, queue, tenant, visible_at, overlap)
    SELECT id, queue, tenant, available_at, overlap FROM inserted WHERE state = %(enqueued)s::text
    ORDER BY available_at
    ON CONFLICT (occurrence_id) DO NOTHING
)
SELECT id, state FROM inserted;

-- name: occurrences_started_after
-- The latest instant at or after :after that an older version of the schedule started
-- (an attempt was made): a change's new cursor must pass it.
SELECT max(scheduled_for) FROM occurrences
WHERE schedule_id = %(schedule_id)s AND schedule_version < %(version)s
  AND scheduled_for >= %(after)s AND attempts > 0 AND NOT manual;

-- name: schedule_cursor_move
UPDATE schedules SET next_run_at = %(next_run_at)s::timestamptz
WHERE id = %(id)s AND version = %(version)s;

-- ------------------------------------------------------------------ schedule search (schema 0009)

-- name: schedules_page_state
-- schedules_page for one state (schema 0020): paused, the keyset walk of
-- schedules_paused_name (tenant, name), which stops at LIMIT (or at once); active, that
-- of schedules_live_name, passing over the paused schedules among the names it walks
-- (the price of an index the materializer's cursor moves do not write: see 0020).
SELECT id, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
       created_at, updated_at, paused_at, spec
FROM schedules
WHERE tenant = %(tenant)s AND state = %(state)s AND state <> 'deleted'
  AND name > %(after)s AND name < %(upto)s
  AND (%(prefix)s::text IS NULL OR starts_with(name, %(prefix)s))
ORDER BY name LIMIT %(limit)s;

-- name: schedules_page_label
-- schedules_page for one label: the keyset walk of schedule_labels' key (tenant, key,
-- value, name) joined to each schedule; a state and a prefix filter what it finds.
SELECT s.id, s.tenant, s.name, s.kind, s.expr, s.tz, s.queue, s.state, s.version, s.next_run_at,
       s.shard, s.created_at, s.updated_at, s.paused_at, s.spec
FROM schedule_labels AS l JOIN schedules AS s ON s.id = l.schedule_id
WHERE l.tenant = %(tenant)s AND l.key = %(label_key)s AND l.value = %(label_value)s
  AND l.name > %(after)s AND l.name < %(upto)s AND s.state <> 'deleted'
  AND (%(state)s::text IS NULL OR s.state = %(state)s)
  AND (%(prefix)s::text IS NULL OR starts_with(l.name, %(prefix)s))
ORDER BY l.name LIMIT %(limit)s;

-- name: schedule_labels_insert
-- The labels of schedules just written, one array per column (a pair given twice is
-- kept once).
INSERT INTO schedule_labels (tenant, key, value, name, schedule_id)
SELECT n.tenant, n.key, n.value, n.name, n.schedule_id
FROM unnest(%(tenants)b::text[], %(keys)b::text[], %(label_values)b::text[], %(names)b::text[],
            %(ids)b::text[]) AS n(tenant, key, value, name, schedule_id)
ON CONFLICT DO NOTHING;

-- name: schedule_labels_delete
-- A changed schedule's label rows, before its new ones are written (or it is deleted):
-- those of the version it replaces (%(version)s, the new one, - 1), by schedule_labels'
-- key from that version's definition (schema 0015: no index by schedule id). Runs after
-- schedule_update, which holds the schedule row's lock: that version is the current one.
DELETE FROM schedule_labels AS l
USING schedule_versions AS v, jsonb_array_elements(v.definition -> 'labels') AS p(pair)
WHERE v.schedule_id = %(schedule_id)s AND v.version = %(version)s - 1
  AND l.tenant = v.definition ->> 'tenant' AND l.key = p.pair ->> 0 AND l.value = p.pair ->> 1
  AND l.name = v.definition ->> 'name' AND l.schedule_id = v.schedule_id;
