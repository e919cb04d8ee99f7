DROP TABLE IF EXISTS coordinator_instances;
ALTER TABLE coordinator_transactions
    DROP COLUMN IF EXISTS attempts,
    DROP COLUMN IF EXISTS next_attempt_at,
    DROP COLUMN IF EXISTS last_error;
