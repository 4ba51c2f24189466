-- clockd embedded store, schema 0019: a queue row carries its occurrence's overlap policy,
-- as in the PostgreSQL store's 0019, which says why (its claim_plain reads it; this store's
-- claim, a sequence of steps, reads the occurrence's still). NULL: not known here.
ALTER TABLE dispatch ADD COLUMN overlap TEXT;
