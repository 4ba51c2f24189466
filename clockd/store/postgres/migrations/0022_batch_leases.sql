-- clockd PostgreSQL store, schema 0022: a lease per claimed batch (issue 18).
--
-- Until 0021 every claimed queue row carried its own lease: the claim rewrote the
-- `dispatch` row (lease_token, lease_until, worker_id, leased_at; not HOT, an entry in
-- each of its three indexes) and the finish found it again by dispatch_lease_token and
-- deleted it. Now a claim takes the rows it starts out of the queue (a DELETE writes no
-- index entry) and writes one `claim_batches` row for the whole batch: its token, the
-- worker, until when it is leased, since when, how many of its runs are still open, and
-- the ids of the occurrences it claimed, in claim order; a run's lease token is
-- `<batch token>.<occurrence id>`. Each occurrence it starts gets RUNNING as before and the
-- batch's token in `lease_batch` (no index names the column: the update stays HOT). A run
-- is leased while its occurrence is RUNNING under a batch whose row is there; the finish,
-- the heartbeat, release and the reaper meet on the batch row's lock (docs/store.md, "A
-- lease per claimed batch"). Measured: bench.batch_lease, README "Where a drain's server
-- time goes".
--
-- dispatch keeps its lease columns, always NULL from here on: every index and statement
-- that reads the queue's unleased rows (`lease_token IS NULL`) reads the whole queue, as
-- it should. A later schema may drop them with the indexes' predicates.
CREATE TABLE claim_batches (
    token          text COLLATE "C" PRIMARY KEY,
    worker_id      text NOT NULL,
    lease_until    timestamptz NOT NULL,
    leased_at      timestamptz NOT NULL,
    open           integer NOT NULL,
    occurrence_ids text[] COLLATE "C" NOT NULL
);
ALTER TABLE occurrences ADD COLUMN lease_batch text COLLATE "C";

-- The upgrade: a run leased by the code before becomes a batch of one under its own
-- token (a token without a '.' is the only run of the batch of that token), so a worker
-- that claimed it before the upgrade finishes it, and the reaper reaps it, as any other.
-- A leased row whose occurrence is not RUNNING (a claim that leased without starting,
-- given back in the same transaction: none survives a commit) is left unleased.
INSERT INTO claim_batches (token, worker_id, lease_until, leased_at, open, occurrence_ids)
SELECT d.lease_token, coalesce(d.worker_id, ''), d.lease_until,
       coalesce(d.leased_at, o.started_at, d.lease_until), 1, ARRAY[d.occurrence_id]
FROM dispatch AS d JOIN occurrences AS o ON o.id = d.occurrence_id
WHERE d.lease_token IS NOT NULL AND o.state = 'RUNNING';
UPDATE occurrences AS o SET lease_batch = b.token
FROM claim_batches AS b WHERE o.id = b.occurrence_ids[1];
DELETE FROM dispatch AS d USING claim_batches AS b WHERE d.lease_token = b.token;
UPDATE dispatch SET lease_token = NULL, lease_until = NULL, worker_id = NULL, leased_at = NULL
WHERE lease_token IS NOT NULL;

-- Schema 0017's drop of a week looked for the week's queued occurrences in dispatch and
-- the outbox after its detach; a claimed run has no queue row any more: a run replayed
-- from the dead-letter queue after the census and claimed before the drop is found in its
-- batch row instead (a batch that still names an ended run of the week keeps the week
-- until a later prune: the check is on ids, not states).
CREATE OR REPLACE FUNCTION clockd_history_drop(week timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '1s'
AS $$
DECLARE
    suffix text := to_char(week AT TIME ZONE 'UTC', 'YYYYMMDD');
    lo text := clockd_id_bound(week);
    hi text := clockd_id_bound(week + interval '7 days');
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('clockd history partitions'));
    IF to_regclass('occurrences_w' || suffix) IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER TABLE attempts DETACH PARTITION %I', 'attempts_w' || suffix);
    EXECUTE format('ALTER TABLE occurrences DETACH PARTITION %I', 'occurrences_w' || suffix);
    IF EXISTS (SELECT 1 FROM dispatch WHERE occurrence_id >= lo AND occurrence_id < hi)
       OR EXISTS (SELECT 1 FROM outbox WHERE occurrence_id >= lo AND occurrence_id < hi)
       OR EXISTS (SELECT 1 FROM claim_batches AS b CROSS JOIN LATERAL unnest(b.occurrence_ids) AS x(id)
                  WHERE x.id >= lo AND x.id < hi) THEN
        RAISE EXCEPTION 'clockd: the week of % has queued occurrences', week USING ERRCODE = 'object_in_use';
    END IF;
    EXECUTE format('DROP TABLE %I', 'attempts_w' || suffix);
    EXECUTE format('DROP TABLE %I', 'occurrences_w' || suffix);
    RETURN true;
EXCEPTION WHEN object_in_use OR lock_not_available THEN
    RETURN false;
END
$$;
