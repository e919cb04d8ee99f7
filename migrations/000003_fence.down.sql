DROP INDEX IF EXISTS coordinator_transactions_in_doubt;
CREATE INDEX coordinator_transactions_in_doubt
    ON coordinator_transactions (instance_id, state)
    WHERE state IN ('active', 'prepared', 'committing');
UPDATE coordinator_transactions SET state = 'active' WHERE state = 'aborting';
ALTER TABLE coordinator_transactions DROP CONSTRAINT coordinator_transactions_state_check;
ALTER TABLE coordinator_transactions ADD CONSTRAINT coordinator_transactions_state_check CHECK (state IN
    ('active', 'prepared', 'committing', 'committed', 'aborted', 'heuristic', 'heuristic_mixed'));
ALTER TABLE coordinator_transactions
    DROP COLUMN IF EXISTS owner_instance,
    DROP COLUMN IF EXISTS owner_epoch,
    DROP COLUMN IF EXISTS one_phase;
ALTER TABLE coordinator_instances DROP COLUMN IF EXISTS epoch;
