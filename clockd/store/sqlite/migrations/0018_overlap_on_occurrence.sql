-- clockd embedded store, schema 0018: an occurrence carries the overlap policy of the
-- version that planned it, as in the PostgreSQL store's 0018, which says why. NULL (rows
-- written before) means "read the schedule's spec", as before.
ALTER TABLE occurrences ADD COLUMN overlap TEXT;
