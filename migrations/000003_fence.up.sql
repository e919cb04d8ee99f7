-- Fencing (claim before act). A row has an owner: the instance allowed to write it and the epoch
-- that instance held when it took the row. Every state write is a compare-and-set on state,
-- owner and epoch, and only succeeds while the owner still holds that epoch on its instance row.
-- An instance's epoch is bumped every time its advisory lock is taken (its own start or
-- re-claim, a takeover, an operator acting for it), so a process that lost its lock can no
-- longer write anything.
ALTER TABLE coordinator_instances
    ADD COLUMN epoch bigint NOT NULL DEFAULT 0;

ALTER TABLE coordinator_transactions
    ADD COLUMN owner_instance text,
    ADD COLUMN owner_epoch    bigint NOT NULL DEFAULT 0,
    ADD COLUMN one_phase      boolean NOT NULL DEFAULT false;

UPDATE coordinator_transactions SET owner_instance = instance_id;
ALTER TABLE coordinator_transactions ALTER COLUMN owner_instance SET NOT NULL;

-- Rows of the one-phase path (one database, no Kafka) left active by an older binary: the only
-- active rows with a single SQL gid and no Kafka ids. Their COMMIT decides them (the marker).
UPDATE coordinator_transactions SET one_phase = true
WHERE state = 'active' AND jsonb_array_length(sql_gids) = 1 AND transactional_id IS NULL;

-- aborting: a resolver claimed the row before it was prepared; the outcome is fixed (abort, or
-- for a one-phase row whatever its marker proves), participants may still hold work.
ALTER TABLE coordinator_transactions DROP CONSTRAINT coordinator_transactions_state_check;
ALTER TABLE coordinator_transactions ADD CONSTRAINT coordinator_transactions_state_check CHECK (state IN
    ('active', 'aborting', 'prepared', 'committing', 'committed', 'aborted', 'heuristic', 'heuristic_mixed'));

DROP INDEX coordinator_transactions_in_doubt;
CREATE INDEX coordinator_transactions_in_doubt
    ON coordinator_transactions (instance_id, state)
    WHERE state IN ('active', 'aborting', 'prepared', 'committing');

-- The marker table's aborted column (fencing markers of one-phase transactions) is added by the
-- participant at startup (sqltxn), on every database, only where it is missing.
