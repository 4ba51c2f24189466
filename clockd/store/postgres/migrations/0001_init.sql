-- clockd PostgreSQL store, schema 0001.
-- The same tables, columns and indexes as the SQLite store's 0001_init.sql, in
-- PostgreSQL's types:
--   * instants are timestamptz (UTC at the boundary; the store sets TimeZone = UTC);
--   * the spec / definition documents are jsonb;
--   * booleans are boolean (SQLite: INTEGER 0/1);
--   * outbox and dispatch ids are bigint identities (SQLite: INTEGER PRIMARY KEY);
--   * ids, names, tenants, queues and lease tokens are text COLLATE "C": bytewise
--     comparison is what SQLite does, it keeps the occurrence-prefix range lookup
--     correct whatever the database's locale (a linguistic collation ignores '-'),
--     and memcmp keeps the hot indexes cheap;
--   * the queue indexes end in the bigint id: SQLite's indexes carry the rowid
--     implicitly, which is what makes "ORDER BY visible_at, id LIMIT n" an ordered
--     index scan there; PostgreSQL needs the column spelled out, or 500 k rows
--     due at one instant would be sorted on every claim.

-- The current definition of every schedule; a deleted one stays (soft delete) so
-- its occurrences and versions keep their parent.
CREATE TABLE schedules (
    id          text COLLATE "C" PRIMARY KEY,
    tenant      text COLLATE "C" NOT NULL,
    name        text COLLATE "C" NOT NULL,
    kind        text    NOT NULL CHECK (kind IN ('cron', 'once', 'every')),
    expr        text    NOT NULL,
    tz          text    NOT NULL,
    queue       text COLLATE "C" NOT NULL,
    state       text    NOT NULL CHECK (state IN ('active', 'paused', 'deleted')),
    version     integer NOT NULL CHECK (version >= 1),
    next_run_at timestamptz,                  -- cursor: next instant not yet materialized
    shard       integer NOT NULL CHECK (shard >= 0),
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    paused_at   timestamptz,
    spec        jsonb   NOT NULL              -- target, retry, timeout, policies, labels
);
-- One live schedule per (tenant, name); a deleted name may be reused.
CREATE UNIQUE INDEX schedules_live_name ON schedules (tenant, name) WHERE state <> 'deleted';
-- "What is due soon in my shards", never a scan of all schedules. The id makes
-- "ORDER BY next_run_at, id LIMIT n" an ordered scan even when thousands of
-- schedules share the top of the hour.
CREATE INDEX schedules_due ON schedules (shard, next_run_at, id) WHERE state = 'active';

-- Every definition a schedule ever had; valid_to IS NULL on the current one.
CREATE TABLE schedule_versions (
    schedule_id text COLLATE "C" NOT NULL REFERENCES schedules (id),
    version     integer NOT NULL,
    state       text    NOT NULL CHECK (state IN ('active', 'paused', 'deleted')),
    valid_from  timestamptz NOT NULL,
    valid_to    timestamptz,
    definition  jsonb   NOT NULL,             -- the whole ScheduleDef
    reason      text,
    PRIMARY KEY (schedule_id, version)
);

-- One row per planned instant (and per run-now request).
CREATE TABLE occurrences (
    id               text COLLATE "C" PRIMARY KEY,  -- deterministic (clockd.core.ids)
    schedule_id      text COLLATE "C" NOT NULL REFERENCES schedules (id),
    schedule_version integer NOT NULL,
    tenant           text COLLATE "C" NOT NULL,
    queue            text COLLATE "C" NOT NULL,
    scheduled_for    timestamptz NOT NULL,
    available_at     timestamptz NOT NULL,
    state            text    NOT NULL CHECK (state IN ('SCHEDULED', 'ENQUEUED', 'RUNNING',
                         'RETRY_WAIT', 'SUCCEEDED', 'DEAD', 'MISSED', 'SKIPPED_OVERLAP', 'CANCELED')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     integer NOT NULL CHECK (max_attempts >= 1),
    manual           boolean NOT NULL DEFAULT false,
    enqueued_at      timestamptz,
    started_at       timestamptz,
    finished_at      timestamptz,             -- set when the state becomes terminal
    exit_code        integer,
    reason           text,                    -- why MISSED / SKIPPED / CANCELED / DEAD
    last_error       text
);
-- No instant materialized twice. Run-now occurrences are outside it: one may fall on a
-- planned instant, and two may be asked for in the same microsecond.
CREATE UNIQUE INDEX occurrences_planned
    ON occurrences (schedule_id, schedule_version, scheduled_for) WHERE NOT manual;
CREATE INDEX occurrences_by_schedule ON occurrences (schedule_id, scheduled_for DESC);
-- `clockctl runs` without a schedule: the newest first, without sorting the table.
CREATE INDEX occurrences_recent ON occurrences (scheduled_for DESC);
-- Retention: terminal occurrences by age.
CREATE INDEX occurrences_finished ON occurrences (finished_at) WHERE finished_at IS NOT NULL;

-- Materialized, not yet staged into the queue.
CREATE TABLE outbox (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    occurrence_id text COLLATE "C" NOT NULL UNIQUE REFERENCES occurrences (id) ON DELETE CASCADE,
    queue         text COLLATE "C" NOT NULL,
    tenant        text COLLATE "C" NOT NULL,
    available_at  timestamptz NOT NULL
);
CREATE INDEX outbox_available ON outbox (available_at, id);

-- The queue workers claim from. A row is unleased (lease_token IS NULL: claimable once
-- visible_at <= now) or leased to one worker until lease_until.
CREATE TABLE dispatch (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- the hot index stays local
    occurrence_id text COLLATE "C" NOT NULL UNIQUE REFERENCES occurrences (id) ON DELETE CASCADE,
    queue         text COLLATE "C" NOT NULL,
    tenant        text COLLATE "C" NOT NULL,
    visible_at    timestamptz NOT NULL,
    lease_token   text COLLATE "C",
    lease_until   timestamptz,
    worker_id     text,
    CHECK ((lease_token IS NULL) = (lease_until IS NULL))
);
CREATE INDEX dispatch_ready ON dispatch (queue, visible_at, id) WHERE lease_token IS NULL;
CREATE INDEX dispatch_leased ON dispatch (lease_until, id) WHERE lease_token IS NOT NULL;
CREATE UNIQUE INDEX dispatch_lease_token ON dispatch (lease_token) WHERE lease_token IS NOT NULL;

-- One row per try of an occurrence.
CREATE TABLE attempts (
    occurrence_id text COLLATE "C" NOT NULL REFERENCES occurrences (id) ON DELETE CASCADE,
    attempt       integer NOT NULL CHECK (attempt >= 1),
    lease_token   text COLLATE "C" NOT NULL,
    worker_id     text    NOT NULL,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    outcome       text    NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed',
                      'timed_out', 'lost', 'error', 'stopped')),
    exit_code     integer,
    signal        integer,
    output        text    NOT NULL DEFAULT '',
    error         text,
    PRIMARY KEY (occurrence_id, attempt)
);

-- Highest fencing token seen per resource ('leader', 'shard:<n>').
CREATE TABLE fences (
    resource text COLLATE "C" PRIMARY KEY,
    token    bigint NOT NULL
);

-- Monotonic counters (the local coordinator's fencing tokens).
CREATE TABLE counters (
    name  text COLLATE "C" PRIMARY KEY,
    value bigint NOT NULL
);
