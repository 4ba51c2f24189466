-- clockd embedded store, schema 0022: the PostgreSQL store leases a claimed batch of runs
-- with one row under this number (its 0022 says why: a claim there rewrote each queue row
-- in place, a new version with an entry in each of its indexes, and the finish found it
-- again by token). SQLite keeps a lease per queue row: one writer, no row versions or
-- index churn of that kind (a claim rewrites the row in place, and the finish deletes it
-- by the token's index), and its embedded figures met their goals (README, Performance).
-- The number keeps the two stores' schemas in step.
SELECT 1;
