-- clockd embedded store, schema 0020: the PostgreSQL store replaces its state search's index
-- under this number (its 0020 says why: every move of a cursor wrote an entry into it).
-- SQLite keeps schedules_state_name: its planner uses a partial index only for a query
-- whose WHERE repeats the predicate's constant, and schedules_page_state binds the state
-- as a parameter; the embedded store's cursor moves are one process's. Nothing changes
-- here; the number keeps the two stores' schemas in step.
SELECT 1;
