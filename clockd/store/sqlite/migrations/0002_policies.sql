-- clockd embedded store, schema 0002: scheduling policies (DESIGN.md §4).
-- The PostgreSQL store carries the same tables under the same migration number.

-- Idempotent create (`clockctl add --idempotency-key K`): a key names one live
-- schedule of its tenant; deleting the schedule frees the key.
ALTER TABLE schedules ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX schedules_idempotency ON schedules (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state != 'deleted';
-- Per-tenant quota checks count a tenant's live schedules from schedules_live_name.

-- Overlap policy (skip, queue_one), enforced by the claim: one row per schedule whose
-- policy is not `allow`. running_id holds the slot: the occurrence that is running (or
-- retrying: a RETRY_WAIT holder keeps it until it ends); waiting_id is the one
-- occurrence queue_one lets wait (still ENQUEUED, but out of the queue: no dispatch
-- row while it waits). Released when the holder ends: the slot passes to waiting_id,
-- whose dispatch row is written back, claimable at once.
CREATE TABLE overlap_slots (
    schedule_id TEXT PRIMARY KEY REFERENCES schedules (id),
    running_id  TEXT,
    waiting_id  TEXT
);
CREATE INDEX overlap_slots_held ON overlap_slots (running_id) WHERE running_id IS NOT NULL;
INSERT INTO overlap_slots (schedule_id)
SELECT id FROM schedules WHERE json_extract(spec, '$.overlap') IN ('skip', 'queue_one');

-- Tenant-fair claims: the tenants that have queued rows (a skip scan), then the
-- oldest rows of each tenant, without reading a flooding tenant's backlog.
CREATE INDEX dispatch_ready_tenant ON dispatch (queue, tenant, visible_at) WHERE lease_token IS NULL;
-- A tenant's running count when its limits are first set.
CREATE INDEX dispatch_leased_tenant ON dispatch (tenant) WHERE lease_token IS NOT NULL;

-- Per-tenant limits (`clockctl tenant set`); NULL = no limit. A tenant without a row
-- has no limits. While a tenant has a running or per-minute cap, `running` counts its
-- leased queue rows: the claim adds what it leases and finish / release / reap take
-- back what they unlease, in the same transactions (`tenant set` recounts it), and
-- window_start / window_claims count the claims of the current minute (UTC). The
-- claim reads and writes this row, so it is the lock that makes a cap exact.
CREATE TABLE tenant_limits (
    tenant                  TEXT    PRIMARY KEY,
    max_schedules           INTEGER CHECK (max_schedules >= 0),
    max_running             INTEGER CHECK (max_running >= 0),
    max_triggers_per_minute INTEGER CHECK (max_triggers_per_minute >= 0),
    catch_up_rate           INTEGER CHECK (catch_up_rate >= 1),
    running                 INTEGER NOT NULL DEFAULT 0 CHECK (running >= 0),
    window_start            INTEGER,
    window_claims           INTEGER NOT NULL DEFAULT 0,
    updated_at              INTEGER NOT NULL
);

-- The dead-letter queue (`clockctl dlq list`), newest first, without a scan.
CREATE INDEX occurrences_dead ON occurrences (finished_at) WHERE state = 'DEAD';
