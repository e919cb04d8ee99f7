-- A transaction its caller decides (X1-X4 in docs/design.md): after phase 1 its row waits for the
-- caller's commit or rollback until decide_by (the log's clock), and is then presumed aborted.
-- A waiting row is not final and not in doubt: its transactional id stays quarantined (I1), its
-- SQL gids stay prepared, and recovery leaves it alone until decide_by.
ALTER TABLE coordinator_transactions ADD COLUMN IF NOT EXISTS decide_by timestamptz;

ALTER TABLE coordinator_transactions DROP CONSTRAINT coordinator_transactions_state_check;
ALTER TABLE coordinator_transactions ADD CONSTRAINT coordinator_transactions_state_check CHECK (state IN
    ('active', 'aborting', 'waiting', 'prepared', 'committing', 'committed', 'aborted', 'heuristic', 'heuristic_mixed'));

-- The waiting rows by deadline: the deadline claims (X4), the bound on waiting transactions, the
-- oldest deadline of the status strip and the metrics.
CREATE INDEX IF NOT EXISTS coordinator_transactions_waiting
    ON coordinator_transactions (decide_by)
    WHERE state = 'waiting';

-- The transactions that still hold their transactional id (I1): an id goes back to its pool only
-- when none names it (TransactionalIDInDoubt), which the decision of every waiting transaction
-- asks; without the index each asking read the whole table.
CREATE INDEX IF NOT EXISTS coordinator_transactions_holding_id
    ON coordinator_transactions (transactional_id)
    WHERE state IN ('waiting', 'prepared', 'committing', 'aborting');
