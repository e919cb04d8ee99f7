-- A recovery pass reads its instance's due rows oldest deadline first, a page at a time
-- (txlog.Log.Due). The in-doubt index (instance_id, state) made every page read and sort all
-- of the instance's rows in doubt: 100 ms a page with 10,000 of them, a sixth of a pass. This
-- index hands them over in deadline order, so a page reads its own rows. It covers the same
-- rows as the in-doubt index, which 000010 drops (every query that used it can use this one).
-- CONCURRENTLY, alone in its file, as 000008.
CREATE INDEX CONCURRENTLY IF NOT EXISTS coordinator_transactions_due
    ON coordinator_transactions (instance_id, next_attempt_at)
    WHERE state IN ('active', 'aborting', 'prepared', 'committing');
