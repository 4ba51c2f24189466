-- clockd embedded store, schema 0007: the HTTP API's tokens and audit log (issue #16).
-- The PostgreSQL store carries the same tables under the same number.

-- Bearer tokens. Only a hash of the token is kept (clockd.tokens): the token itself
-- is printed once by `clockctl token create` and never stored or logged.
CREATE TABLE api_tokens (
    id         TEXT    PRIMARY KEY,          -- the public part of the token
    tenant     TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    role       TEXT    NOT NULL CHECK (role IN ('readonly', 'operator', 'admin', 'cluster-admin')),
    hash       TEXT    NOT NULL,             -- sha256 of the whole token, hex
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    revoked_at INTEGER
);
-- One unrevoked token of a name per tenant (what `token revoke NAME` names).
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (tenant, name) WHERE revoked_at IS NULL;

-- Every write through the API (and the token commands): who, what, when, versions.
CREATE TABLE audit_log (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    at             INTEGER NOT NULL,
    tenant         TEXT    NOT NULL,
    actor          TEXT    NOT NULL,         -- token name (or the local user for clockctl)
    action         TEXT    NOT NULL,         -- e.g. schedule.create, schedule.pause, token.revoke
    target         TEXT    NOT NULL,         -- schedule name, occurrence id, token name
    before_version INTEGER,
    after_version  INTEGER,
    detail         TEXT    NOT NULL DEFAULT '{}'   -- JSON
);
-- A tenant's log, newest first, by keyset on id.
CREATE INDEX audit_log_tenant ON audit_log (tenant, id);
