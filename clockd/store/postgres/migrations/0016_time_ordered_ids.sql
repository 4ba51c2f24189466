-- clockd PostgreSQL store, schema 0016: occurrence ids are time-ordered (issue 18, "What
-- the order of the occurrence keys costs"). The SQLite store takes the same number.
--
-- No row changes: the scheme is code (clockd.core.ids.occurrence_id). A planned
-- occurrence's id now leads with its instant's Unix milliseconds (a deterministic UUID of
-- version 8 with a version 7's layout; the other 74 bits are the uuid5's), so the
-- materializer's inserts land at the right edge of occurrences_pkey and of dispatch's
-- occurrence key and the claim's and finish's lookups touch recent leaves. Rows planned
-- before keep the uuid5 they were stored with: an occurrence's id never changes.
--
-- Why a migration at all: the key skips an instant planned twice (schema 0011) only if
-- both plans compute the same id, so one database must not be planned into by both
-- schemes at once. Recording 0016 makes a clockd of an older release refuse to start
-- against this database ("newer than this clockd"): upgrade every clockd process together
-- (stop them, start the new release). The cursor advance and the fence, in the
-- materializer's own transaction, keep an instant from being planned twice either way; the
-- key is the second guard.
COMMENT ON COLUMN occurrences.id IS
    'Time-ordered since schema 0016 (clockd.core.ids.occurrence_id): the instant''s Unix '
    'milliseconds, then 74 bits of SHA-1 of (schedule, version, instant). Rows planned '
    'before keep their uuid5.';
