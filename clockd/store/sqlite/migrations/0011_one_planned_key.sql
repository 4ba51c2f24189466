-- clockd SQLite store, schema 0011: occurrences_planned is gone (the PostgreSQL store's
-- 0011 says why): a planned occurrence's id is the uuid5 of (schedule, version,
-- instant), so the primary key already keeps an instant from being materialized twice.
-- One index entry fewer for every occurrence written. Dropping an index moves no row.
DROP INDEX IF EXISTS occurrences_planned;
