-- Statements of the PostgreSQL store that have no SQLite counterpart: SQLite
-- serializes every writer with its file lock, PostgreSQL needs an explicit lock for
-- the migrator. Kept out of queries.sql so the parity test compares like with like.

-- name: migration_lock
-- Held until the end of the migration's transaction: concurrent `clockd migrate` runs
-- (or two daemons' migrate calls) apply each migration once, one after the other.
-- The key is 'clockd' in ASCII, a constant every release keeps.
SELECT pg_advisory_xact_lock(109317376404324);

-- name: server_time
-- The server's clock for the clock-offset check (SQLite has no server: the local
-- clock). clock_timestamp(), not now(): now() is the transaction's start.
SELECT clock_timestamp();

-- name: group_roles_exist
-- Whether `clockd migrate --create-roles` made roles.sql's three group roles in this
-- cluster: then every `clockd migrate` re-applies grants.sql (see there).
SELECT count(*) = 3 FROM pg_roles
WHERE rolname IN ('clockd_readonly', 'clockd_operator', 'clockd_daemon');

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
-- it; 5 % of the active backends' samples in a sustained run were that wait), for
-- pages the next inserts need again. Outside a transaction (pool connections are
-- autocommit; VACUUM refuses to run in one).
VACUUM (SKIP_LOCKED, TRUNCATE false) dispatch;

-- ------------------------------------------------------------------ operator read paths

-- name: snapshot_read
-- First statement of the reconciler's read transaction: every statement after it sees
-- one snapshot (cursors, versions and occurrences agree), and it can write nothing.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;
