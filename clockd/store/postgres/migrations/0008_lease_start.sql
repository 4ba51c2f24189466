-- clockd PostgreSQL store, schema 0008: nothing to do here. The SQLite store's 0008
-- adds dispatch.leased_at so that its claim, too, writes no attempt row (this store's
-- 0005 did both). The number is kept so both stores count their schema alike
-- (tests/contract/store/test_sql_parity.py).
SELECT 1;
