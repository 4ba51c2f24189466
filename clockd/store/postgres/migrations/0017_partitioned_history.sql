-- clockd PostgreSQL store, schema 0017: history in weekly partitions (issue 18, "History
-- that does not slow the hot path"). The SQLite store keeps its row delete and takes the
-- same number as a no-op.
--
-- occurrences is range-partitioned on its id, attempts on occurrence_id. Since schema 0016
-- an id leads with its instant's Unix milliseconds (clockd.core.ids), so a range of ids is
-- a range of time and the keys every statement looks up by are the partition key: no
-- statement changes, the primary keys stay (id) and (occurrence_id, attempt). Partition
-- occurrences_wYYYYMMDD holds the ids of the instants of the week (Monday 00:00 UTC) that
-- starts that day, attempts_wYYYYMMDD their attempts.
--
-- The tables as they were become the DEFAULT partitions (occurrences_default,
-- attempts_default): nothing is copied, so the upgrade is instant whatever the history
-- holds. They keep every row written before, whose uuid5 ids are spread over the whole
-- key range, and take any id no weekly partition covers; the row delete (prune) empties
-- them as the retention window passes. A weekly partition made later first takes over
-- the rows of its range that the DEFAULT holds (a uuid5 falls in one week's range about
-- twice in a million), because PostgreSQL refuses to attach a partition while the DEFAULT
-- holds rows of its range; attaching it scans the DEFAULT under its lock, so while the
-- DEFAULT still holds the flat history of an upgraded store that scan costs about a
-- second per million rows, once a week.
--
-- Retiring a week (clockd_history_census, then clockd_history_drop): once the week's end
-- is before now - retention and every occurrence of it is terminal and finished before
-- then, its two partitions are detached and dropped: a few ms of catalog work instead of
-- deleting the rows one by one (python -m bench --only retention: 0.17 s of database time
-- per million occurrences for the scan and drop, against 5-6 s for the delete and its
-- vacuum). A week that still holds a live row is kept whole until a later prune finds it
-- done; its terminal rows are row-deleted as before.
--
-- Who may: making and dropping partitions needs the tables' owner, and the daemon's role
-- of roles.sql owns nothing. The three functions below run as their owner (the role that
-- migrates: SECURITY DEFINER, with the search_path this migration ran with) and do only
-- that; grants.sql lets clockd_daemon execute them.
ALTER TABLE occurrences RENAME TO occurrences_default;
ALTER INDEX occurrences_pkey RENAME TO occurrences_default_pkey;
ALTER INDEX occurrences_by_schedule RENAME TO occurrences_default_by_schedule;
ALTER INDEX occurrences_recent RENAME TO occurrences_default_recent;
ALTER INDEX occurrences_dead RENAME TO occurrences_default_dead;
ALTER INDEX occurrences_not_run RENAME TO occurrences_default_not_run;
ALTER TABLE attempts RENAME TO attempts_default;
ALTER INDEX attempts_pkey RENAME TO attempts_default_pkey;

CREATE TABLE occurrences (
    LIKE occurrences_default INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS INCLUDING COMMENTS
) PARTITION BY RANGE (id);
ALTER TABLE occurrences ADD CONSTRAINT occurrences_pkey PRIMARY KEY (id);
CREATE INDEX occurrences_by_schedule ON occurrences (schedule_id, scheduled_for DESC);
CREATE INDEX occurrences_recent ON occurrences (scheduled_for DESC);
CREATE INDEX occurrences_dead ON occurrences (dead_at, id) WHERE dead_at IS NOT NULL;
CREATE INDEX occurrences_not_run ON occurrences (not_run_at) WHERE not_run_at IS NOT NULL;
-- The old table's indexes are the same, so they become the DEFAULT's part of these: no build.
ALTER TABLE occurrences ATTACH PARTITION occurrences_default DEFAULT;

CREATE TABLE attempts (
    LIKE attempts_default INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS
) PARTITION BY RANGE (occurrence_id);
ALTER TABLE attempts ADD CONSTRAINT attempts_pkey PRIMARY KEY (occurrence_id, attempt);
ALTER TABLE attempts ATTACH PARTITION attempts_default DEFAULT;

-- A view names the tables it was made from: attempt_history (schema 0013) followed the
-- rename, so it is made again over the partitioned tables.
CREATE OR REPLACE VIEW attempt_history AS
    SELECT occurrence_id, attempt, lease_token, worker_id, started_at, finished_at, outcome, exit_code, signal,
           output, error
    FROM attempts
    UNION ALL
    SELECT id, 1, '', inline_attempt_worker, started_at, finished_at, 'succeeded', exit_code, NULL::integer, '',
           NULL::text
    FROM occurrences WHERE inline_attempt_worker IS NOT NULL;

-- The functions below resolve names in this schema, then (last, so that no one's temporary
-- table can stand in for one of these) pg_temp: SET search_path FROM CURRENT takes this.
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);

-- The lowest id an instant at or after `at` can have (bytewise, as the id column's
-- COLLATE "C" compares): its Unix milliseconds as the id's first 12 hex digits.
CREATE FUNCTION clockd_id_bound(at timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path FROM CURRENT
AS $$
    SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4)
    FROM (SELECT lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0') AS h) AS ms
$$;

-- Make the weekly partitions of the weeks from the one holding `since` to the one holding
-- `upto` that do not exist yet, then analyze the partitioned tables; the number made. The leader calls it at every prune (a
-- week back to two ahead): a partition exists before its first instant is planned.
-- lock_timeout: attaching takes the DEFAULT's lock; rather than queue the hot path behind
-- a long wait, a week not made now is made at the next prune (its rows go to the DEFAULT
-- meanwhile, and move when it is made).
CREATE FUNCTION clockd_history_extend(since timestamptz, upto timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '1s'
AS $$
DECLARE
    week timestamptz := date_trunc('week', since AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    made integer := 0;
    lo text;
    hi text;
    suffix text;
    cols text;
    idx record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('clockd history partitions'));
    -- The columns a row is written with (the generated ones are computed again).
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
    FROM pg_attribute WHERE attrelid = 'occurrences'::regclass AND attnum > 0 AND NOT attisdropped
      AND attgenerated = '';
    WHILE week <= upto LOOP
        suffix := to_char(week AT TIME ZONE 'UTC', 'YYYYMMDD');
        IF to_regclass('occurrences_w' || suffix) IS NULL THEN
            lo := clockd_id_bound(week);
            hi := clockd_id_bound(week + interval '7 days');
            BEGIN
                EXECUTE format('CREATE TABLE %I (LIKE occurrences INCLUDING DEFAULTS INCLUDING GENERATED '
                               'INCLUDING CONSTRAINTS) WITH (fillfactor = 50)', 'occurrences_w' || suffix);
                EXECUTE format('CREATE TABLE %I (LIKE attempts INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                               'attempts_w' || suffix);
                EXECUTE format('WITH moved AS (DELETE FROM occurrences_default WHERE id >= %L AND id < %L '
                               'RETURNING %s) INSERT INTO %I (%s) SELECT %s FROM moved',
                               lo, hi, cols, 'occurrences_w' || suffix, cols, cols);
                EXECUTE format('WITH moved AS (DELETE FROM attempts_default WHERE occurrence_id >= %L '
                               'AND occurrence_id < %L RETURNING *) INSERT INTO %I SELECT * FROM moved',
                               lo, hi, 'attempts_w' || suffix);
                EXECUTE format('ALTER TABLE occurrences ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                               'occurrences_w' || suffix, lo, hi);
                EXECUTE format('ALTER TABLE attempts ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                               'attempts_w' || suffix, lo, hi);
                -- The partitions' indexes named as their parents' (occurrences_w20261130_dead
                -- beside occurrences_dead), not as PostgreSQL names what an attach builds.
                FOR idx IN
                    SELECT child.relname AS child, parent.relname AS parent, table_name
                    FROM unnest(ARRAY['occurrences', 'attempts']) AS table_name
                    JOIN pg_index AS x ON x.indrelid = (table_name || '_w' || suffix)::regclass
                    JOIN pg_class AS child ON child.oid = x.indexrelid
                    JOIN pg_inherits AS i ON i.inhrelid = child.oid
                    JOIN pg_class AS parent ON parent.oid = i.inhparent
                    WHERE child.relname <> table_name || '_w' || suffix || substr(parent.relname, length(table_name) + 1)
                LOOP
                    EXECUTE format('ALTER INDEX %I RENAME TO %I', idx.child,
                                   idx.table_name || '_w' || suffix || substr(idx.parent, length(idx.table_name) + 1));
                END LOOP;
                -- Statistics from the start: a partition never analyzed is planned as ten
                -- pages of rows, and the claim's joins over the weeks ahead, all empty, turned
                -- into hash joins over scans of every partition; an analyzed empty one is
                -- planned as empty until autovacuum's analyze sees it fill.
                EXECUTE format('ANALYZE %I, %I', 'occurrences_w' || suffix, 'attempts_w' || suffix);
                made := made + 1;
            EXCEPTION WHEN lock_not_available THEN
                RAISE NOTICE 'clockd: partitions of the week of % not made now (lock timeout)', week;
            END;
        END IF;
        week := week + interval '7 days';
    END LOOP;
    -- The partitioned tables' own statistics, which autovacuum never gathers (it analyzes
    -- the partitions only): without them the planner knows no id to be unique across the
    -- partitions, a join by id to occurrences estimated thousands of rows per row, and the
    -- claim's update of its occurrences became a hash join over a scan of every partition.
    -- Sampling the partitions (30,000 rows) and analyzing each, once per prune (hourly).
    BEGIN
        ANALYZE occurrences, attempts;
    EXCEPTION WHEN lock_not_available THEN
        RAISE NOTICE 'clockd: occurrences and attempts not analyzed now (lock timeout)';
    END;
    RETURN made;
END
$$;

-- The weekly partitions whose week ends at or before `before`, each with its occurrences and
-- how many of them are not both terminal and finished before `before` (a scan of the
-- partition: no index names state, so that the finish's update stays HOT, schema 0006).
CREATE FUNCTION clockd_history_census(before timestamptz)
RETURNS TABLE (week timestamptz, occurrences bigint, live bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    part record;
BEGIN
    FOR part IN
        SELECT c.relname, to_date(substr(c.relname, 14), 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC' AS starts
        FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'occurrences'::regclass AND c.relname ~ '^occurrences_w[0-9]{8}$'
        ORDER BY c.relname
    LOOP
        CONTINUE WHEN part.starts + interval '7 days' > before;
        week := part.starts;
        EXECUTE format('SELECT count(*), count(*) FILTER (WHERE NOT (state IN (''SUCCEEDED'', ''DEAD'', '
                       '''MISSED'', ''SKIPPED_OVERLAP'', ''CANCELED'') AND finished_at < $1)) FROM %I',
                       part.relname)
            INTO occurrences, live USING before;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Detach and drop the week's two partitions, if nothing of the week is queued: true if
-- dropped. The census found every row terminal without a lock; an occurrence replayed
-- from the dead-letter queue since would have a queue row, which this looks for after
-- the detach, whose lock no other write of occurrences passes until this commits (a
-- replay waiting behind it then finds no occurrence). Detaching takes the parent's lock
-- (a DEFAULT exists, so not CONCURRENTLY): the caller commits at once.
CREATE FUNCTION clockd_history_drop(week timestamptz) RETURNS boolean
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
       OR EXISTS (SELECT 1 FROM outbox WHERE occurrence_id >= lo AND occurrence_id < hi) THEN
        RAISE EXCEPTION 'clockd: the week of % has queued occurrences', week USING ERRCODE = 'object_in_use';
    END IF;
    EXECUTE format('DROP TABLE %I', 'attempts_w' || suffix);
    EXECUTE format('DROP TABLE %I', 'occurrences_w' || suffix);
    RETURN true;
EXCEPTION WHEN object_in_use OR lock_not_available THEN
    RETURN false;
END
$$;

REVOKE ALL ON FUNCTION clockd_history_extend(timestamptz, timestamptz), clockd_history_census(timestamptz),
    clockd_history_drop(timestamptz) FROM PUBLIC;

-- The partitions of the weeks around the migration, so that what is planned next has one.
SELECT clockd_history_extend(now() - interval '7 days', now() + interval '14 days');
