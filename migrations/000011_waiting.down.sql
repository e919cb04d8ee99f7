DROP INDEX IF EXISTS coordinator_transactions_holding_id;
DROP INDEX IF EXISTS coordinator_transactions_waiting;
-- A waiting row has no decision: down, it is presumed aborted by recovery (I5).
UPDATE coordinator_transactions SET state = 'aborting' WHERE state = 'waiting';
ALTER TABLE coordinator_transactions DROP CONSTRAINT coordinator_transactions_state_check;
ALTER TABLE coordinator_transactions ADD CONSTRAINT coordinator_transactions_state_check CHECK (state IN
    ('active', 'aborting', 'prepared', 'committing', 'committed', 'aborted', 'heuristic', 'heuristic_mixed'));
ALTER TABLE coordinator_transactions DROP COLUMN IF EXISTS decide_by;
