-- clockd embedded store, schema 0010: one index fewer for every lease (issue 18). The
-- PostgreSQL store drops the same index under the same number (its 0010 says why).
-- dispatch_leased (lease_until) served only the reaper (reap_pick), which now reads the
-- leased rows through dispatch_lease_token; a claim updates one index fewer and a lease
-- extension none. Dropping an index moves no row: every lease stays as it was.
DROP INDEX IF EXISTS dispatch_leased;
