-- What the group roles of roles.sql may do in this database. Idempotent. Run by
-- `clockd migrate --create-roles` after roles.sql, and by every `clockd migrate` while
-- all three roles exist, whether it applies a migration or not (they are cluster-wide;
-- a new table or view would otherwise stay out of their reach until --create-roles is
-- run again: schema 0009's schedule_labels was, and an operator's `clockctl apply`,
-- which labels what it manages, was refused).
-- Runs as the migrating role (the database owner): only object grants, never role
-- membership, which would need CREATEROLE.
GRANT USAGE ON SCHEMA public TO clockd_readonly, clockd_operator, clockd_daemon;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO clockd_readonly;
GRANT INSERT, UPDATE, DELETE ON schedules, schedule_labels, schedule_versions, occurrences, outbox, dispatch,
    overlap_slots, tenant_limits TO clockd_operator;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO clockd_daemon;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO clockd_operator, clockd_daemon;
-- Schema 0007: operators' writes are audited; tokens are managed by the daemon's role
-- (`clockctl token` as the database owner or clockd_daemon), and their hashes are not
-- for readonly logins.
GRANT INSERT ON audit_log TO clockd_operator;
REVOKE SELECT ON api_tokens FROM clockd_readonly;
-- Schema 0017: the leader keeps history in weekly partitions through these functions,
-- which run as the tables' owner and do only that. (Checked first: a store migrated only
-- part of the way, as an upgrade test makes one, has no such functions yet.)
DO $$
BEGIN
    IF to_regprocedure('clockd_history_drop(timestamptz)') IS NOT NULL THEN
        GRANT EXECUTE ON FUNCTION clockd_history_extend(timestamptz, timestamptz),
            clockd_history_census(timestamptz), clockd_history_drop(timestamptz) TO clockd_daemon;
    END IF;
END
$$;
