-- clockd embedded store, schema 0017: the PostgreSQL store's history moves into weekly
-- partitions under this number (its 0017 says why). SQLite has no partitions: an embedded
-- store's history is a few million rows at most and its row delete (prune) runs in
-- process, so nothing changes here; the number keeps the two stores' schemas in step.
SELECT 1;
