-- The due index (000009) holds the same rows, led by the instance as this one was: one index
-- fewer to maintain at every state change.
DROP INDEX CONCURRENTLY IF EXISTS coordinator_transactions_in_doubt;
