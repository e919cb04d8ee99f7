CREATE INDEX CONCURRENTLY IF NOT EXISTS coordinator_transactions_in_doubt
    ON coordinator_transactions (instance_id, state)
    WHERE state IN ('active', 'aborting', 'prepared', 'committing');
