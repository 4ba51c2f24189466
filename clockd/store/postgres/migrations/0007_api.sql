-- clockd PostgreSQL store, schema 0007: the HTTP API's tokens and audit log (issue #16).
-- The SQLite store carries the same tables under the same number.

-- Bearer tokens. Only a hash of the token is kept (clockd.tokens): the token itself
-- is printed once by `clockctl token create` and never stored or logged.
CREATE TABLE api_tokens (
    id         text COLLATE "C" PRIMARY KEY,      -- the public part of the token
    tenant     text COLLATE "C" NOT NULL,
    name       text COLLATE "C" NOT NULL,
    role       text        NOT NULL CHECK (role IN ('readonly', 'operator', 'admin', 'cluster-admin')),
    hash       text        NOT NULL,         -- sha256 of the whole token, hex
    created_at timestamptz NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz
);
-- One unrevoked token of a name per tenant (what `token revoke NAME` names).
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (tenant, name) WHERE revoked_at IS NULL;

-- Every write through the API (and the token commands): who, what, when, versions.
CREATE TABLE audit_log (
    id             bigserial   PRIMARY KEY,
    at             timestamptz NOT NULL,
    tenant         text COLLATE "C" NOT NULL,
    actor          text        NOT NULL,     -- token name (or the local user for clockctl)
    action         text        NOT NULL,     -- e.g. schedule.create, schedule.pause, token.revoke
    target         text        NOT NULL,     -- schedule name, occurrence id, token name
    before_version integer,
    after_version  integer,
    detail         jsonb       NOT NULL DEFAULT '{}'
);
-- A tenant's log, newest first, by keyset on id.
CREATE INDEX audit_log_tenant ON audit_log (tenant, id);
