-- The newest-first listing (GET /v1/transactions without a state, the console) reads the newest
-- rows by (created_at, gid). Without an index it sorted the whole table: 1.0 s a page on a log of
-- a million rows, and a log holds the retention's worth (COORDINATOR_RETENTION, 7 days) of rows
-- (docs/decisions.md, "Retention"). CONCURRENTLY, and alone in its file (it cannot run inside a
-- transaction block): a large log keeps taking writes while the index is built.
CREATE INDEX CONCURRENTLY IF NOT EXISTS coordinator_transactions_created
    ON coordinator_transactions (created_at, gid);
