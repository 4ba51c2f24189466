-- clockd PostgreSQL store, schema 0004: HOT updates of occurrences (issue #7). The
-- SQLite store carries the same number (a no-op there: SQLite has no HOT).

-- The relay (SCHEDULED -> ENQUEUED, enqueued_at) and the claim (-> RUNNING, attempts,
-- started_at) update every occurrence once each. PostgreSQL can make such an update
-- HOT (heap-only: no new entry in any index, the old version pruned from the page
-- later) only if no column any index uses changes, index predicates included, and the
-- new version fits on the same page. Up to 0003 neither held: occurrences_dead's
-- predicate (state = 'DEAD') names state, so every state change wrote a new entry into
-- every occurrences index (pkey, planned, by_schedule, recent, ...), and inserted rows
-- filled their pages. The fix:
--   * dead, a stored generated column, carries what the predicate needs: its value
--     stays false from SCHEDULED through RUNNING, and PostgreSQL compares the stored
--     values of indexed columns, so those updates no longer block HOT;
--   * occurrences_dead is rebuilt on it (the DLQ queries say `o.dead` to match);
--   * fillfactor 50 leaves room on each page for a new version of every row on it:
--     the relay updates whole pages at once (2000 rows a batch, in insertion order),
--     and a page's old versions are pruned, making room for the claim's, once no
--     snapshot needs them. Measured with 50 k occurrences due at one instant, with
--     the dead column (fillfactor: relay / claim updates that were HOT; 0003: none):
--     100: 0.5 % / 11 %;
--     80: 25 % / 53 %; 50: 96 % / 93 %; 40: 100 % / 100 %. WAL per row went from
--     ~770 / ~680 bytes to ~140 / ~170, and the indexes grew 0.2 MB instead of 9 MB.
--     The price is space: rows that will never be updated again (history, until
--     retention prunes it) keep their pages half empty too; over four such hours,
--     vacuumed in between, the heap was 22 % larger than with 0003 (whose non-HOT
--     updates leave holes of their own), the indexes 7 % smaller. While an older
--     snapshot blocks pruning (a long transaction, in any database of the cluster)
--     the claim's updates find no room on the page and are not HOT (4 %); the
--     relay's still are.
-- No index on occurrences names state, enqueued_at, started_at or attempts after this
-- (pkey: id; planned: schedule_id, schedule_version, scheduled_for, manual;
-- by_schedule: schedule_id, scheduled_for; recent: scheduled_for; finished and dead:
-- finished_at, id, dead). Keep it so: an index on any of them makes the hot path's
-- updates non-HOT again. Finishing (finished_at) is not HOT, and need not be:
-- occurrences_finished wants the entry.
-- dispatch is left as it is: the claim sets lease_token, which its indexes use.
--
-- Cost: ADD COLUMN ... STORED rewrites occurrences and rebuilds its indexes under an
-- ACCESS EXCLUSIVE lock: the relay, the claim and clockctl wait until it is done
-- (about 4 s per million occurrences on a test machine; retention bounds the table).
-- Run `clockd migrate` in a quiet hour. The fillfactor is set after the rewrite, so
-- the rewrite packs the existing rows (nearly all history, never updated again) and
-- sheds their bloat; new pages get the room.
DROP INDEX occurrences_dead;
ALTER TABLE occurrences
    ADD COLUMN dead boolean NOT NULL GENERATED ALWAYS AS (state = 'DEAD') STORED;
-- The dead-letter queue (`clockctl dlq list`), newest first, without a scan.
CREATE INDEX occurrences_dead ON occurrences (finished_at, id) WHERE dead;
ALTER TABLE occurrences SET (fillfactor = 50);
