-- Recovery bookkeeping: per-transaction retry state, with deadlines in database time.
ALTER TABLE coordinator_transactions
    ADD COLUMN attempts        integer     NOT NULL DEFAULT 0,
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN last_error      text;

-- Coordinator instances sharing this log (docs/design.md I8). Liveness is a session-level advisory
-- lock held by the running instance (freed by PostgreSQL the moment its connection dies); the
-- heartbeat is informational and bounds takeover of an instance that never held the lock.
CREATE TABLE coordinator_instances (
    instance_id   text        PRIMARY KEY,
    txn_id_prefix text        NOT NULL,
    pool_size     integer     NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now()
);
