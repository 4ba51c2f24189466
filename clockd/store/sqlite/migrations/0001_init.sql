-- clockd embedded store, schema 0001.
-- Instants are INTEGER microseconds since the Unix epoch, UTC (clockd.store.codec).
-- The PostgreSQL store carries the same tables under the same migration number.

-- The current definition of every schedule; a deleted one stays (soft delete) so
-- its occurrences and versions keep their parent.
CREATE TABLE schedules (
    id          TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('cron', 'once', 'every')),
    expr        TEXT    NOT NULL,
    tz          TEXT    NOT NULL,
    queue       TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('active', 'paused', 'deleted')),
    version     INTEGER NOT NULL CHECK (version >= 1),
    next_run_at INTEGER,                      -- cursor: next instant not yet materialized
    shard       INTEGER NOT NULL CHECK (shard >= 0),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    paused_at   INTEGER,
    spec        TEXT    NOT NULL              -- JSON: target, retry, timeout, policies, labels
);
-- One live schedule per (tenant, name); a deleted name may be reused.
CREATE UNIQUE INDEX schedules_live_name ON schedules (tenant, name) WHERE state != 'deleted';
-- "What is due soon in my shards", never a scan of all schedules.
CREATE INDEX schedules_due ON schedules (shard, next_run_at) WHERE state = 'active';

-- Every definition a schedule ever had; valid_to IS NULL on the current one.
CREATE TABLE schedule_versions (
    schedule_id TEXT    NOT NULL REFERENCES schedules (id),
    version     INTEGER NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('active', 'paused', 'deleted')),
    valid_from  INTEGER NOT NULL,
    valid_to    INTEGER,
    definition  TEXT    NOT NULL,             -- JSON: the whole ScheduleDef
    reason      TEXT,
    PRIMARY KEY (schedule_id, version)
);

-- One row per planned instant (and per run-now request).
CREATE TABLE occurrences (
    id               TEXT    PRIMARY KEY,    -- deterministic (clockd.core.ids)
    schedule_id      TEXT    NOT NULL REFERENCES schedules (id),
    schedule_version INTEGER NOT NULL,
    tenant           TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    scheduled_for    INTEGER NOT NULL,
    available_at     INTEGER NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('SCHEDULED', 'ENQUEUED', 'RUNNING',
                         'RETRY_WAIT', 'SUCCEEDED', 'DEAD', 'MISSED', 'SKIPPED_OVERLAP', 'CANCELED')),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    manual           INTEGER NOT NULL DEFAULT 0 CHECK (manual IN (0, 1)),
    enqueued_at      INTEGER,
    started_at       INTEGER,
    finished_at      INTEGER,                -- set when the state becomes terminal
    exit_code        INTEGER,
    reason           TEXT,                   -- why MISSED / SKIPPED / CANCELED / DEAD
    last_error       TEXT
);
-- No instant materialized twice. Run-now occurrences are outside it: one may fall on a
-- planned instant, and two may be asked for in the same microsecond.
CREATE UNIQUE INDEX occurrences_planned
    ON occurrences (schedule_id, schedule_version, scheduled_for) WHERE manual = 0;
CREATE INDEX occurrences_by_schedule ON occurrences (schedule_id, scheduled_for DESC);
-- `clockctl runs` without a schedule: the newest first, without sorting the table.
CREATE INDEX occurrences_recent ON occurrences (scheduled_for DESC);
-- Retention: terminal occurrences by age.
CREATE INDEX occurrences_finished ON occurrences (finished_at) WHERE finished_at IS NOT NULL;

-- Materialized, not yet staged into the queue.
CREATE TABLE outbox (
    id            INTEGER PRIMARY KEY,
    occurrence_id TEXT    NOT NULL UNIQUE REFERENCES occurrences (id) ON DELETE CASCADE,
    queue         TEXT    NOT NULL,
    tenant        TEXT    NOT NULL,
    available_at  INTEGER NOT NULL
);
CREATE INDEX outbox_available ON outbox (available_at);

-- The queue workers claim from. A row is unleased (lease_token IS NULL: claimable once
-- visible_at <= now) or leased to one worker until lease_until.
CREATE TABLE dispatch (
    id            INTEGER PRIMARY KEY,       -- bigint: the hot index stays local
    occurrence_id TEXT    NOT NULL UNIQUE REFERENCES occurrences (id) ON DELETE CASCADE,
    queue         TEXT    NOT NULL,
    tenant        TEXT    NOT NULL,
    visible_at    INTEGER NOT NULL,
    lease_token   TEXT,
    lease_until   INTEGER,
    worker_id     TEXT,
    CHECK ((lease_token IS NULL) = (lease_until IS NULL))
);
CREATE INDEX dispatch_ready ON dispatch (queue, visible_at) WHERE lease_token IS NULL;
CREATE INDEX dispatch_leased ON dispatch (lease_until) WHERE lease_token IS NOT NULL;
CREATE UNIQUE INDEX dispatch_lease_token ON dispatch (lease_token) WHERE lease_token IS NOT NULL;

-- One row per try of an occurrence.
CREATE TABLE attempts (
    occurrence_id TEXT    NOT NULL REFERENCES occurrences (id) ON DELETE CASCADE,
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    lease_token   TEXT    NOT NULL,
    worker_id     TEXT    NOT NULL,
    started_at    INTEGER NOT NULL,
    finished_at   INTEGER,
    outcome       TEXT    NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed',
                      'timed_out', 'lost', 'error', 'stopped')),
    exit_code     INTEGER,
    signal        INTEGER,
    output        TEXT    NOT NULL DEFAULT '',
    error         TEXT,
    PRIMARY KEY (occurrence_id, attempt)
);

-- Highest fencing token seen per resource ('leader', 'shard:<n>').
CREATE TABLE fences (
    resource TEXT    PRIMARY KEY,
    token    INTEGER NOT NULL
);

-- Monotonic counters (the local coordinator's fencing tokens).
CREATE TABLE counters (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
);
