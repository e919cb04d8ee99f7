DROP INDEX CONCURRENTLY IF EXISTS coordinator_transactions_due;
