-- clockd's PostgreSQL role split. Applied by `clockd migrate --create-roles` (as the
-- database owner, after the migrations), or by hand with psql. Idempotent.
--
--   clockd_daemon    what `clockd run` needs: read and write every clockd table.
--   clockd_operator  what `clockctl` needs to change things (add, update, pause, resume,
--                    rm, run-now, apply, import-crontab, dlq replay/drop, tenant set):
--                    schedules and their pending occurrences; never attempts, fences or
--                    leases of running work.
--   clockd_readonly  what `clockctl list/show/runs/logs/preview/explain/reconcile/status/
--                    export` needs: SELECT only.
--
-- These are group roles (NOLOGIN). Give people and services login roles that are members:
--   CREATE ROLE alice LOGIN PASSWORD '…' IN ROLE clockd_operator;
--   CREATE ROLE clockd_node LOGIN PASSWORD '…' IN ROLE clockd_daemon;
-- Schema changes (`clockd migrate`) stay with the database owner.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'clockd_readonly') THEN
        CREATE ROLE clockd_readonly NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'clockd_operator') THEN
        CREATE ROLE clockd_operator NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'clockd_daemon') THEN
        CREATE ROLE clockd_daemon NOLOGIN;
    END IF;
END
$$;

GRANT clockd_readonly TO clockd_operator;
-- What each role may do: grants.sql (run after this file, and again by every
-- `clockd migrate` while these roles exist).
