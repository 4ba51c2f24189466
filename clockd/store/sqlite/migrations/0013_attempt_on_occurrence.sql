-- clockd embedded store, schema 0013: a run that succeeds at its first attempt and
-- prints nothing writes no attempts row (issue 18), as in the PostgreSQL store's 0013,
-- which says why. The occurrence row keeps that attempt's worker in
-- inline_attempt_worker; attempt_history is every ended attempt, whichever row keeps it
-- (attempts_list reads it; query it by hand instead of attempts).
ALTER TABLE occurrences ADD COLUMN inline_attempt_worker TEXT;
CREATE VIEW attempt_history AS
SELECT occurrence_id, attempt, lease_token, worker_id, started_at, finished_at, outcome, exit_code, signal,
       output, error
FROM attempts
UNION ALL
SELECT id, 1, '', inline_attempt_worker, started_at, finished_at, 'succeeded', exit_code, NULL, '', NULL
FROM occurrences WHERE inline_attempt_worker IS NOT NULL;
