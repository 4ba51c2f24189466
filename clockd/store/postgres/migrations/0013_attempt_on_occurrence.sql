-- clockd PostgreSQL store, schema 0013: a run that succeeds at its first attempt and
-- prints nothing writes no attempts row (issue 18, "fewer writes per execution"). The
-- SQLite store carries the same change under the same number.
--
-- Such a run's occurrence row already says everything its attempt row would: state
-- SUCCEEDED, attempts 1, started_at (the claim's instant, which is also the lease's
-- leased_at), finished_at, exit_code; no output, signal or error. The one fact missing
-- is the worker, kept here in inline_attempt_worker by the finish's occurrence update
-- (which writes the row anyway, a HOT update: no index names the column). Any other
-- ending — a failure, a retry, a lost lease, an output, a second attempt — still writes
-- its attempts row, as before (clockd.store.engine._kept_on_occurrence decides).
-- The figures: README, Performance, round two.
--
-- attempt_history is every ended attempt, whichever row keeps it: what `clockctl runs`
-- and `logs`, the API and the dashboard show (attempts_list reads it), and what to query
-- by hand instead of attempts. Adding a nullable column without a default rewrites no
-- row; a clockd of schema 0012 still running beside this one writes attempts rows for
-- every ending, which the view shows as before.
ALTER TABLE occurrences ADD COLUMN inline_attempt_worker text;
CREATE VIEW attempt_history AS
SELECT occurrence_id, attempt, lease_token, worker_id, started_at, finished_at, outcome, exit_code, signal,
       output, error
FROM attempts
UNION ALL
SELECT id, 1, '', inline_attempt_worker, started_at, finished_at, 'succeeded', exit_code, NULL::integer,
       '', NULL::text
FROM occurrences WHERE inline_attempt_worker IS NOT NULL;
-- The view is new: the roles of roles.sql (`clockd migrate --create-roles`), where they
-- exist, may read it at once (clockctl runs/logs read it as clockd_readonly).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'clockd_readonly') THEN
        GRANT SELECT ON attempt_history TO clockd_readonly;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'clockd_daemon') THEN
        GRANT SELECT ON attempt_history TO clockd_daemon;
    END IF;
END
$$;
