-- clockd PostgreSQL store, schema 0002: scheduling policies (DESIGN.md §4).
-- The same tables, columns and indexes as the SQLite store's 0002_policies.sql, in
-- PostgreSQL's types (see 0001_init.sql for the mapping).

-- Idempotent create (`clockctl add --idempotency-key K`): a key names one live
-- schedule of its tenant; deleting the schedule frees the key.
ALTER TABLE schedules ADD COLUMN idempotency_key text COLLATE "C";
CREATE UNIQUE INDEX schedules_idempotency ON schedules (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state <> 'deleted';
-- Per-tenant quota checks count a tenant's live schedules from schedules_live_name.

-- Overlap policy (skip, queue_one), enforced by the claim: one row per schedule whose
-- policy is not `allow` (written with the schedule: schedule_insert, schedule_update).
-- running_id holds the slot: the occurrence that is running (or retrying: a RETRY_WAIT
-- holder keeps it until it ends); waiting_id is the one occurrence queue_one lets wait
-- (still ENQUEUED, but out of the queue: no dispatch row while it waits). Released when
-- the holder ends: the slot passes to waiting_id, whose dispatch row is written back,
-- claimable at once. The claim locks these rows FOR UPDATE SKIP LOCKED:
-- two workers racing for one schedule never both decide it is free.
CREATE TABLE overlap_slots (
    schedule_id text COLLATE "C" PRIMARY KEY REFERENCES schedules (id),
    running_id  text COLLATE "C",
    waiting_id  text COLLATE "C"
);
CREATE INDEX overlap_slots_held ON overlap_slots (running_id) WHERE running_id IS NOT NULL;
INSERT INTO overlap_slots (schedule_id)
SELECT id FROM schedules WHERE spec->>'overlap' IN ('skip', 'queue_one');

-- Tenant-fair claims: the tenants that have queued rows (a skip scan), then the
-- oldest rows of each tenant, without reading a flooding tenant's backlog.
CREATE INDEX dispatch_ready_tenant ON dispatch (queue, tenant, visible_at, id) WHERE lease_token IS NULL;
-- A tenant's running count when its limits are first set.
CREATE INDEX dispatch_leased_tenant ON dispatch (tenant) WHERE lease_token IS NOT NULL;

-- Per-tenant limits (`clockctl tenant set`); NULL = no limit. A tenant without a row
-- has no limits. While a tenant has a running or per-minute cap, `running` counts its
-- leased queue rows: the claim adds what it leases and finish / release / reap take
-- back what they unlease, in the same transactions (`tenant set` recounts it), and
-- window_start / window_claims count the claims of the current minute (UTC). The
-- claim locks this row (FOR UPDATE SKIP LOCKED) and reads it fresh, so it is the lock
-- that makes a cap exact: one claimer at a time per capped tenant.
CREATE TABLE tenant_limits (
    tenant                  text COLLATE "C" PRIMARY KEY,
    max_schedules           integer CHECK (max_schedules >= 0),
    max_running             integer CHECK (max_running >= 0),
    max_triggers_per_minute integer CHECK (max_triggers_per_minute >= 0),
    catch_up_rate           integer CHECK (catch_up_rate >= 1),
    running                 integer NOT NULL DEFAULT 0 CHECK (running >= 0),
    window_start            timestamptz,
    window_claims           integer NOT NULL DEFAULT 0,
    updated_at              timestamptz NOT NULL
);

-- The dead-letter queue (`clockctl dlq list`), newest first, without a scan.
CREATE INDEX occurrences_dead ON occurrences (finished_at, id) WHERE state = 'DEAD';
