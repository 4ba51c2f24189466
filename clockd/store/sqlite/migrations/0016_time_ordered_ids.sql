-- clockd embedded store, schema 0016: occurrence ids are time-ordered, as in the
-- PostgreSQL store's 0016 (which says why). No row changes: the scheme is code
-- (clockd.core.ids.occurrence_id), and rows planned before keep their uuid5. Recording the
-- number makes a clockd of an older release refuse to open this file, so one store is
-- never planned into by both schemes.
SELECT 1;
