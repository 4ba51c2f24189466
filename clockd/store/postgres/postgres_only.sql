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

-- ------------------------------------------------------------------ operator read paths

-- name: snapshot_read
-- First statement of the reconciler's read transaction: every statement after it sees
-- one snapshot (cursors, versions and occurrences agree), and it can write nothing.
-- It takes no row lock either, so a daemon's limit on idle-in-transaction time (which
-- is about the locks a stalled process holds: clockd.wiring.daemon_stall_limit) is
-- lifted for it: the reconciler decodes an hour of occurrences between its statements.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;
SET LOCAL idle_in_transaction_session_timeout = 0;
